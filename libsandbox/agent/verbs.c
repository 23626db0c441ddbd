/* The silkd verbs beyond exec and the basic file calls: process table,
 * sessions, directory and path operations, pty resize, and the streaming
 * halves of downloads and uploads that the client builds on. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sandbox/agent.h>

#include "agent/agent_priv.h"

int sbx_agent_open_prefixed(int fd, const void *prefix, size_t n, sbx_agent **out, sbx_error *err) {
  if (n > AGENT_READ_BUF) {
    if (fd >= 0) close(fd);
    return sbx_err(err, SBX_E_TOOBIG, "agent: %zu pipelined bytes", n);
  }
  int rc = sbx_agent_open(fd, out, err);
  if (rc < 0 || n == 0) return rc;
  /* The reader refers to the chunk until it is used up, so it must live in
   * rbuf, which is only refilled once the reader asks for more. */
  memcpy((*out)->rbuf, prefix, n);
  sbx_frame_reader_feed((*out)->reader, (*out)->rbuf, n);
  return 0;
}

bool sbx_agent_idle(sbx_agent *a) {
  if (a->broken || a->eof) return false;
  const char *line;
  size_t len;
  sbx_error e;
  int rc = sbx_frame_reader_next(a->reader, &line, &len, &e);
  if (rc != 0 || sbx_frame_reader_pending(a->reader) != 0) {
    a->broken = true; /* bytes past the final frame: out of sync */
    return false;
  }
  return true;
}

int sbx_agent_poll_recv(sbx_agent *a, sbx_wire_resp *out, int timeout_ms, sbx_error *err) {
  if (a->broken) return sbx_err(err, SBX_E_PROTO, "agent: connection is unusable");
  for (;;) {
    const char *line;
    size_t len;
    int rc = sbx_frame_reader_next(a->reader, &line, &len, err);
    if (rc < 0) return agent_broken(a, rc);
    if (rc == 1) {
      if (sbx_wire_decode_resp(line, len, out, err) < 0) {
        sbx_err_wrap(err, "agent: bad frame from silkd");
        return agent_broken(a, SBX_E_PROTO);
      }
      return 1;
    }
    if (a->eof) return agent_broken(a, sbx_err(err, SBX_E_PROTO, "agent: connection closed"));
    struct pollfd pfd = {a->fd, POLLIN, 0};
    int pr = poll(&pfd, 1, timeout_ms);
    if (pr < 0 && errno == EINTR) return 0;
    if (pr < 0) return agent_broken(a, sbx_err_os(err, errno, "agent: poll"));
    if (pr == 0) return 0;
    ssize_t n = read(a->fd, a->rbuf, AGENT_READ_BUF);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) return 0;
      return agent_broken(a, sbx_err_os(err, errno, "agent: read"));
    }
    if (n == 0) {
      a->eof = true;
      sbx_frame_reader_finish(a->reader);
    } else {
      sbx_frame_reader_feed(a->reader, a->rbuf, (size_t)n);
    }
    timeout_ms = 0; /* what is readable now, nothing more */
  }
}

/* Send req and expect the single frame `want`, which is freed unless out. */
static int call(sbx_agent *a, const sbx_wire_req *req, sbx_wire_type want, sbx_wire_resp *out, sbx_error *err) {
  int rc = sbx_agent_send(a, req, err);
  if (rc < 0) return rc;
  sbx_wire_resp r;
  if ((rc = agent_recv_reply(a, want, &r, sbx_wire_op_name(req->op), err)) < 0) return rc;
  if (out) {
    *out = r;
  } else {
    sbx_wire_resp_free(&r);
  }
  return 0;
}

int sbx_agent_ps(sbx_agent *a, sbx_wire_resp *out, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_PS};
  return call(a, &r, SBX_RESP_PROCS, out, err);
}

int sbx_agent_session_create(sbx_agent *a, const sbx_req_session_create *req, char *id, size_t id_len,
                             sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_SESSION_CREATE};
  r.u.session_create = *req;
  sbx_wire_resp resp;
  int rc = call(a, &r, SBX_RESP_SESSION_CREATED, &resp, err);
  if (rc < 0) return rc;
  if (id && id_len) snprintf(id, id_len, "%s", resp.u.session_created.id);
  sbx_wire_resp_free(&resp);
  return 0;
}

int sbx_agent_session_list(sbx_agent *a, sbx_wire_resp *out, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_SESSION_LIST};
  return call(a, &r, SBX_RESP_SESSIONS, out, err);
}

int sbx_agent_session_rm(sbx_agent *a, const char *id, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_SESSION_RM};
  r.u.session_rm.id = id;
  return call(a, &r, SBX_RESP_DONE, NULL, err);
}

int sbx_agent_mkdir(sbx_agent *a, const char *path, bool parents, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_FS_MKDIR};
  r.u.fs_mkdir.path = path;
  r.u.fs_mkdir.has_parents = true;
  r.u.fs_mkdir.parents = parents;
  return call(a, &r, SBX_RESP_DONE, NULL, err);
}

int sbx_agent_remove(sbx_agent *a, const char *path, bool recursive, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_FS_RM};
  r.u.fs_rm.path = path;
  r.u.fs_rm.has_recursive = true;
  r.u.fs_rm.recursive = recursive;
  return call(a, &r, SBX_RESP_DONE, NULL, err);
}

int sbx_agent_rename(sbx_agent *a, const char *from, const char *to, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_FS_RENAME};
  r.u.fs_rename.from = from;
  r.u.fs_rename.to = to;
  return call(a, &r, SBX_RESP_DONE, NULL, err);
}

int sbx_agent_pty_resize(sbx_agent *a, uint32_t pid, uint16_t cols, uint16_t rows, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_PTY_RESIZE};
  r.u.pty_resize.pid = pid;
  r.u.pty_resize.cols = cols;
  r.u.pty_resize.rows = rows;
  return call(a, &r, SBX_RESP_DONE, NULL, err);
}

struct list_cb {
  int (*on_entry)(void *ud, const sbx_wire_dir_entry *e);
  void *ud;
};

static int list_frame(sbx_agent *a, const sbx_wire_resp *r, void *ud, sbx_error *err) {
  (void)err;
  struct list_cb *cb = ud;
  if (r->type != SBX_RESP_ENTRIES) return AGENT_FRAME_UNEXPECTED;
  for (size_t i = 0; cb->on_entry && i < r->u.entries.len; i++) {
    int rc = cb->on_entry(cb->ud, &r->u.entries.items[i]);
    if (rc) return agent_broken(a, rc < 0 ? rc : SBX_E_INTERNAL);
  }
  return 0;
}

int sbx_agent_list_dir(sbx_agent *a, const char *path,
                       int (*on_entry)(void *ud, const sbx_wire_dir_entry *e), void *ud, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_FS_LIST};
  r.u.fs_list.path = path;
  int rc = sbx_agent_send(a, &r, err);
  if (rc < 0) return rc;
  struct list_cb cb = {on_entry, ud};
  return agent_stream(a, "fs_list", list_frame, &cb, err);
}

/* attach: (stdout|stderr)* -> exit|done; logs: (stdout|stderr)* -> [exit] -> done. */
struct follow_cb {
  sbx_wire_op op;
  const sbx_agent_exec_io *io;
  int *exit_code;
};

static int follow_frame(sbx_agent *a, const sbx_wire_resp *r, void *ud, sbx_error *err) {
  (void)err;
  struct follow_cb *cb = ud;
  if (r->type == SBX_RESP_EXIT) {
    if (cb->exit_code) *cb->exit_code = r->u.exit.code;
    return cb->op == SBX_OP_ATTACH ? 1 : 0;
  }
  if (r->type != SBX_RESP_STDOUT && r->type != SBX_RESP_STDERR) return AGENT_FRAME_UNEXPECTED;
  const sbx_agent_exec_io *io = cb->io;
  if (!io || !io->on_output) return 0;
  int rc = io->on_output(io->ud, r->type == SBX_RESP_STDOUT ? SBX_STREAM_STDOUT : SBX_STREAM_STDERR,
                         r->u.data.data.ptr, r->u.data.data.len);
  return rc ? agent_broken(a, rc < 0 ? rc : SBX_E_INTERNAL) : 0;
}

static int follow(sbx_agent *a, sbx_wire_op op, uint32_t pid, const sbx_agent_exec_io *io, int *exit_code,
                  sbx_error *err) {
  sbx_wire_req r = {.op = op};
  r.u.attach.pid = pid;
  int rc = sbx_agent_send(a, &r, err);
  if (rc < 0) return rc;
  if (exit_code) *exit_code = INT32_MIN;
  struct follow_cb cb = {op, io, exit_code};
  return agent_stream(a, sbx_wire_op_name(op), follow_frame, &cb, err);
}

int sbx_agent_attach(sbx_agent *a, uint32_t pid, const sbx_agent_exec_io *io, int *exit_code, sbx_error *err) {
  return follow(a, SBX_OP_ATTACH, pid, io, exit_code, err);
}

int sbx_agent_logs(sbx_agent *a, uint32_t pid, const sbx_agent_exec_io *io, int *exit_code, sbx_error *err) {
  return follow(a, SBX_OP_LOGS, pid, io, exit_code, err);
}

int sbx_agent_next_data(sbx_agent *a, const void **data, size_t *n, sbx_error *err) {
  const char *line;
  size_t len;
  int rc = agent_need_frame(a, &line, &len, err);
  if (rc < 0) return rc;
  sbx_wire_bulk kind;
  agent_ensure_scratch(a, sbx_b64_decoded_max(len) + 1);
  rc = sbx_wire_bulk_decode(line, len, &kind, a->scratch, a->scratch_cap, n, err);
  if (rc < 0) return agent_broken(a, rc);
  if (rc == 1) {
    if (kind != SBX_BULK_DATA) return agent_broken(a, sbx_err(err, SBX_E_PROTO, "agent: unexpected output frame"));
    *data = a->scratch;
    return 1;
  }
  sbx_wire_resp resp;
  if (sbx_wire_decode_resp(line, len, &resp, err) < 0) return agent_broken(a, SBX_E_PROTO);
  if (resp.type == SBX_RESP_DATA) {
    /* not in canonical shape: copy out of the frame before freeing it */
    agent_ensure_scratch(a, resp.u.data.data.len + 1);
    memcpy(a->scratch, resp.u.data.data.ptr, resp.u.data.data.len);
    *data = a->scratch;
    *n = resp.u.data.data.len;
    rc = 1;
  } else if (resp.type == SBX_RESP_DONE) {
    rc = 0;
  } else if (resp.type == SBX_RESP_ERROR) {
    rc = agent_remote_error(&resp, err);
  } else {
    rc = agent_unexpected(a, &resp, "download", err);
  }
  sbx_wire_resp_free(&resp);
  return rc;
}

int sbx_agent_upload_write(sbx_agent *a, const void *data, size_t n, sbx_error *err) {
  return agent_send_chunked(a, SBX_BULK_REQ_DATA, data, n, err);
}

int sbx_agent_upload_end(sbx_agent *a, sbx_error *err) {
  int rc = agent_send_op(a, SBX_OP_DATA_END, err);
  if (rc < 0) return rc;
  sbx_wire_resp resp;
  if ((rc = agent_recv_reply(a, SBX_RESP_DONE, &resp, "upload", err)) < 0) return rc;
  sbx_wire_resp_free(&resp);
  return 0;
}
