/* Scope-bound cleanup for the library's own code (GNU C cleanup
 * attribute): internal, as it is a coding convenience, not an API.
 *
 * The cleanups keep errno, so `return -1` after a failed call still
 * reports that call's errno once the scope's descriptors are closed. A
 * function hands a resource on with sbxi_steal_ptr/sbxi_steal_fd, which
 * empty the variable so its cleanup does nothing. */
#ifndef SBX_CORE_CLEANUP_H
#define SBX_CORE_CLEANUP_H

#include <errno.h>

#include <sandbox/core.h>

static inline void sbxi_freep(void *p) {
  int saved = errno;
  sbx_free(*(void **)p);
  errno = saved;
}
void sbxi_closep(int *fd);
#define sbxi_cleanup_free __attribute__((cleanup(sbxi_freep)))
#define sbxi_cleanup_close __attribute__((cleanup(sbxi_closep)))
#define sbxi_cleanup_buf __attribute__((cleanup(sbx_buf_free)))

/* Take the pointer out of *pp, leaving NULL (bubblewrap's steal_pointer). */
static inline void *sbxi_steal_ptr_(void *pp) {
  void **p = (void **)pp;
  void *v = *p;
  *p = NULL;
  return v;
}
#define sbxi_steal_ptr(pp) ((__typeof__(*(pp)))sbxi_steal_ptr_(pp))

/* Take the descriptor out of *fd, leaving -1. */
static inline int sbxi_steal_fd(int *fd) {
  int v = *fd;
  *fd = -1;
  return v;
}

#endif
