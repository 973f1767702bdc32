#include <rocshmem/rocshmem.h>
#include "deep_ep.h"
const char *deep_ep_offload_arch(void) { return DEEP_EP_OFFLOAD_ARCH; }
