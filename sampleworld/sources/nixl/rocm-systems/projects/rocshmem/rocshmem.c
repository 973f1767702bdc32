#include "rocshmem.h"
#include "rocshmem_config.h"
const char *rocshmem_gpu_targets(void) { return ROCSHMEM_GPU_TARGETS; }
