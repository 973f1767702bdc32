#ifndef ROCSHMEM_H
#define ROCSHMEM_H
const char *rocshmem_gpu_targets(void);
#endif
