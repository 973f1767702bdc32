#include "ucp.h"
const char *ucp_get_version_string(void) { return "sampleworld-ucx"; }
