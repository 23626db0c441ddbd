/* Scope-bound cleanup for the library's own code (GNU C cleanup
 * attribute): internal, as it is a coding convenience, not an API. */
#ifndef SBX_CORE_CLEANUP_H
#define SBX_CORE_CLEANUP_H

#include <sandbox/core.h>

static inline void sbxi_freep(void *p) { sbx_free(*(void **)p); }
void sbxi_closep(int *fd);
#define sbxi_cleanup_free __attribute__((cleanup(sbxi_freep)))
#define sbxi_cleanup_close __attribute__((cleanup(sbxi_closep)))
#define sbxi_cleanup_buf __attribute__((cleanup(sbx_buf_free)))

#endif
