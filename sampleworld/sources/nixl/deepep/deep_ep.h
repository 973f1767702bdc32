#ifndef DEEP_EP_H
#define DEEP_EP_H
const char *deep_ep_offload_arch(void);
#endif
