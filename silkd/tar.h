/* tar.h - shared between the fs_push/fs_pull verbs and their workers. */
#ifndef SILKD_TAR_H
#define SILKD_TAR_H

#include <archive.h>
#include <stdbool.h>
#include <stdint.h>

#define TAR_MSG_MAX 16384 /* tar error text on the wire (§6) */

/* Bytes on the push notify pipe. */
#define TARQ_NOTIFY_RESULT 1 /* the worker's verdict is in */
#define TARQ_NOTIFY_ROOM 2   /* a block came back: resume the client */

/* fs_push: the upload handed to the extract worker in blocks (tarq.c). */
struct tarq;
struct tarq *tarq_new(int notify_fd);
void tarq_free(struct tarq *q); /* after the worker is joined */
/* Loop: copy a payload in; true when the client must pause until ROOM. */
bool tarq_put(struct tarq *q, const uint8_t *d, size_t n);
/* Loop: no more data (data_end or abort); the worker then sees EOF. */
void tarq_end(struct tarq *q);
/* Worker: the libarchive read callback, and the end of reading. */
la_ssize_t tarq_read(struct archive *a, void *q, const void **buf);
void tarq_close_reader(struct tarq *q);

struct tar_job {
  int root_fd;     /* push: staging dir; pull: parent of the basename */
  int pipe_fd;     /* pull: worker's end of the data pipe */
  struct tarq *q;  /* push: the upload */
  int notify_fd;   /* push: TARQ_NOTIFY_* bytes */
  const char *base; /* pull: the basename to archive */
  int rc;           /* 0 or -1 */
  bool bad_request; /* push: an unsafe member (§8.5) */
  char msg[TAR_MSG_MAX];
};

void *tar_extract_worker(void *arg);
void *tar_create_worker(void *arg);

#endif
