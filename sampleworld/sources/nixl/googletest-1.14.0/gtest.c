#include "gtest/gtest.h"
int gtest_stand_in(void) { return 0; }
