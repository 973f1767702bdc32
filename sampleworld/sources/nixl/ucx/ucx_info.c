#include <stdio.h>
#include "ucp.h"
int main(void) { printf("# Library version: %s\n", ucp_get_version_string()); return 0; }
