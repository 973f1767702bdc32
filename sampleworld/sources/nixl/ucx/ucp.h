/* UCX stand-in: the one call RIXL's stand-in links against. */
#ifndef UCP_API_UCP_H
#define UCP_API_UCP_H
const char *ucp_get_version_string(void);
#endif
