/* Streaming uploads and downloads over one agent connection, and the
 * fd-based push/pull/read/write built on them. */
#include <errno.h>
#include <unistd.h>

#include "util/util.h"
#include "client/client_priv.h"

#define XFER_CHUNK (256 * 1024)

struct sbx_transfer {
  sbx_sandbox *s;
  sbx_agent *a;
  bool upload;
  bool ended; /* the RPC reached its final frame: the connection is reusable */
};

static int begin(sbx_sandbox *s, sbx_wire_req *req, bool upload, sbx_transfer **out, sbx_error *err) {
  sbx_agent *a;
  int rc = conn_get(s, &a, err);
  if (rc < 0) return rc;
  if ((rc = sbx_agent_send(a, req, err)) < 0) {
    sbx_agent_close(a);
    return rc;
  }
  sbx_transfer *t = sbx_calloc(1, sizeof *t);
  t->s = s;
  t->a = a;
  t->upload = upload;
  *out = t;
  return 0;
}

int sbx_sandbox_push_begin(sbx_sandbox *s, const char *dest, sbx_transfer **out, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_FS_PUSH};
  r.u.fs_push.dest = dest;
  return begin(s, &r, true, out, err);
}

int sbx_sandbox_write_begin(sbx_sandbox *s, const char *path, int mode, sbx_transfer **out, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_FS_WRITE};
  r.u.fs_write.path = path;
  if (mode >= 0) {
    r.u.fs_write.has_mode = true;
    r.u.fs_write.mode = (uint32_t)mode;
  }
  return begin(s, &r, true, out, err);
}

int sbx_sandbox_pull_begin(sbx_sandbox *s, const char *path, sbx_transfer **out, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_FS_PULL};
  r.u.fs_pull.path = path;
  return begin(s, &r, false, out, err);
}

int sbx_sandbox_read_begin(sbx_sandbox *s, const char *path, sbx_transfer **out, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_FS_READ};
  r.u.fs_read.path = path;
  return begin(s, &r, false, out, err);
}

int sbx_transfer_write(sbx_transfer *t, const void *data, size_t n, sbx_error *err) {
  if (!t->upload || t->ended) return sbx_err(err, SBX_E_INVAL, "transfer: not an open upload");
  return sbx_agent_upload_write(t->a, data, n, err);
}

int sbx_transfer_finish(sbx_transfer *t, sbx_error *err) {
  if (!t->upload || t->ended) return sbx_err(err, SBX_E_INVAL, "transfer: not an open upload");
  int rc = sbx_agent_upload_end(t->a, err);
  t->ended = rc == 0 || rc == SBX_E_REMOTE;
  return rc;
}

int sbx_transfer_read(sbx_transfer *t, const void **data, size_t *n, sbx_error *err) {
  if (t->upload) return sbx_err(err, SBX_E_INVAL, "transfer: not a download");
  if (t->ended) return 0;
  int rc = sbx_agent_next_data(t->a, data, n, err);
  if (rc == 0 || rc == SBX_E_REMOTE) t->ended = true;
  return rc;
}

void sbx_transfer_close(sbx_transfer *t) {
  if (!t) return;
  if (t->ended) {
    conn_put(t->s, t->a);
  } else {
    sbx_agent_close(t->a); /* closing aborts the upload or download (§4) */
  }
  sbx_free(t);
}

static int download_to_fd(sbx_transfer *t, int fd, sbx_error *err) {
  int rc;
  const void *p;
  size_t n;
  while ((rc = sbx_transfer_read(t, &p, &n, err)) == 1) {
    if (sbxi_write_all(fd, p, n) < 0) {
      rc = sbx_err_os(err, errno, "write");
      break;
    }
  }
  sbx_transfer_close(t);
  return rc;
}

static int upload_from_fd(sbx_transfer *t, int fd, sbx_error *err) {
  char *buf = sbx_malloc(XFER_CHUNK);
  int rc = 0;
  for (;;) {
    ssize_t n = read(fd, buf, XFER_CHUNK);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = sbx_err_os(err, errno, "read");
      break;
    }
    if (n == 0) {
      rc = sbx_transfer_finish(t, err);
      break;
    }
    if ((rc = sbx_transfer_write(t, buf, (size_t)n, err)) < 0) break;
  }
  sbx_free(buf);
  sbx_transfer_close(t);
  return rc;
}

int sbx_sandbox_push(sbx_sandbox *s, const char *dest, int fd, sbx_error *err) {
  sbx_transfer *t;
  int rc = sbx_sandbox_push_begin(s, dest, &t, err);
  return rc < 0 ? rc : upload_from_fd(t, fd, err);
}

int sbx_sandbox_write_file_fd(sbx_sandbox *s, const char *path, int fd, int mode, sbx_error *err) {
  sbx_transfer *t;
  int rc = sbx_sandbox_write_begin(s, path, mode, &t, err);
  return rc < 0 ? rc : upload_from_fd(t, fd, err);
}

int sbx_sandbox_pull(sbx_sandbox *s, const char *path, int fd, sbx_error *err) {
  sbx_transfer *t;
  int rc = sbx_sandbox_pull_begin(s, path, &t, err);
  return rc < 0 ? rc : download_to_fd(t, fd, err);
}

int sbx_sandbox_read_file_fd(sbx_sandbox *s, const char *path, int fd, sbx_error *err) {
  sbx_transfer *t;
  int rc = sbx_sandbox_read_begin(s, path, &t, err);
  return rc < 0 ? rc : download_to_fd(t, fd, err);
}
