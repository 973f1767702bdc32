#include <ucp/api/ucp.h>
#include "nixl.h"
const char *nixl_backend_version(void) { return ucp_get_version_string(); }
