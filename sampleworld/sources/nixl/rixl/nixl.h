/* RIXL (ROCm NIXL) stand-in: an agent that reports the UCX it was built against. */
#ifndef NIXL_H
#define NIXL_H
const char *nixl_backend_version(void);
#endif
