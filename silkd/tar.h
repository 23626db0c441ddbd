/* tar.h - shared between the fs_push/fs_pull verbs and their workers. */
#ifndef SILKD_TAR_H
#define SILKD_TAR_H

#include <stdbool.h>

#define TAR_MSG_MAX 16384 /* tar error text on the wire (§6) */

struct tar_job {
  int root_fd;   /* push: staging dir; pull: parent of the basename */
  int pipe_fd;   /* worker's end of the data pipe */
  int notify_fd; /* push: one byte when the result is known */
  const char *base; /* pull: the basename to archive */
  int rc;           /* 0 or -1 */
  bool bad_request; /* push: an unsafe member (§8.5) */
  char msg[TAR_MSG_MAX];
};

void *tar_extract_worker(void *arg);
void *tar_create_worker(void *arg);

#endif
