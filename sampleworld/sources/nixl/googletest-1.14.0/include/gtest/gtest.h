#ifndef GTEST_H
#define GTEST_H
#define GTEST_VERSION "1.14.0"
int gtest_stand_in(void);
#endif
