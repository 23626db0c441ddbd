/* A blocking silkd client over one stream. Reads go through the frame
 * reader with a 256 KiB buffer; output frames take the bulk fast path into a
 * reused scratch buffer, so streaming a child's output allocates nothing per
 * frame. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sandbox/agent.h>

#include "agent/agent_priv.h"


int sbx_agent_open(int fd, sbx_agent **out, sbx_error *err) {
  if (fd < 0) return sbx_err(err, SBX_E_INVAL, "agent: bad fd");
  sbx_agent *a = sbx_calloc(1, sizeof *a);
  a->fd = fd;
  a->timeout_ms = -1;
  a->reader = sbx_frame_reader_new(0);
  a->rbuf = sbx_malloc(AGENT_READ_BUF);
  sbx_buf_init(&a->wbuf, SBX_WIRE_FRAME_CAP + 1);
  *out = a;
  return 0;
}

void sbx_agent_close(sbx_agent *a) {
  if (!a) return;
  if (a->fd >= 0) close(a->fd);
  sbx_frame_reader_free(a->reader);
  sbx_free(a->rbuf);
  sbx_free(a->scratch);
  sbx_buf_free(&a->wbuf);
  sbx_free(a);
}

int sbx_agent_fd(const sbx_agent *a) { return a->fd; }
void sbx_agent_set_timeout(sbx_agent *a, int timeout_ms) { a->timeout_ms = timeout_ms; }
bool sbx_agent_usable(const sbx_agent *a) { return !a->broken && !a->eof; }

int agent_broken(sbx_agent *a, int rc) {
  a->broken = true;
  return rc;
}

static int write_all(sbx_agent *a, const char *p, size_t n, sbx_error *err) {
  while (n > 0) {
    /* send with MSG_NOSIGNAL: a peer that went away must be an error here,
     * not a SIGPIPE that kills a library user's process */
    ssize_t w = a->not_socket ? write(a->fd, p, n) : send(a->fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == ENOTSOCK && !a->not_socket) {
      a->not_socket = true;
      continue;
    }
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd pfd = {a->fd, POLLOUT, 0};
        poll(&pfd, 1, a->timeout_ms);
        continue;
      }
      return agent_broken(a, sbx_err_os(err, errno, "agent: write"));
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int sbx_agent_send(sbx_agent *a, const sbx_wire_req *req, sbx_error *err) {
  if (a->broken) return sbx_err(err, SBX_E_PROTO, "agent: connection is unusable");
  sbx_buf_reset(&a->wbuf);
  int rc = sbx_wire_encode_req(&a->wbuf, req, err);
  if (rc < 0) return rc;
  return write_all(a, a->wbuf.ptr, a->wbuf.len, err);
}

int sbx_agent_send_bulk(sbx_agent *a, sbx_wire_bulk kind, const void *data, size_t n, sbx_error *err) {
  if (a->broken) return sbx_err(err, SBX_E_PROTO, "agent: connection is unusable");
  sbx_buf_reset(&a->wbuf);
  int rc = sbx_wire_bulk_encode(&a->wbuf, kind, data, n, err);
  if (rc < 0) return rc;
  return write_all(a, a->wbuf.ptr, a->wbuf.len, err);
}

int agent_send_op(sbx_agent *a, sbx_wire_op op, sbx_error *err) {
  sbx_wire_req r = {.op = op};
  return sbx_agent_send(a, &r, err);
}

/* The next raw frame; 0 = end of stream. */
int agent_next_line(sbx_agent *a, const char **line, size_t *len, sbx_error *err) {
  for (;;) {
    int rc = sbx_frame_reader_next(a->reader, line, len, err);
    if (rc != 0) return rc < 0 ? agent_broken(a, rc) : 1;
    if (a->eof) return 0;
    struct pollfd pfd = {a->fd, POLLIN, 0};
    int pr = poll(&pfd, 1, a->timeout_ms);
    if (pr == 0) return agent_broken(a, sbx_err(err, SBX_E_TIMEOUT, "agent: no answer within %d ms", a->timeout_ms));
    if (pr < 0 && errno != EINTR) return agent_broken(a, sbx_err_os(err, errno, "agent: poll"));
    if (pr < 0) continue;
    ssize_t n = read(a->fd, a->rbuf, AGENT_READ_BUF);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return agent_broken(a, sbx_err_os(err, errno, "agent: read"));
    }
    if (n == 0) {
      a->eof = true;
      sbx_frame_reader_finish(a->reader);
    } else {
      sbx_frame_reader_feed(a->reader, a->rbuf, (size_t)n);
    }
  }
}

int agent_need_frame(sbx_agent *a, const char **line, size_t *len, sbx_error *err) {
  int rc = agent_next_line(a, line, len, err);
  if (rc == 0) return agent_broken(a, sbx_err(err, SBX_E_PROTO, "agent: connection closed before the reply ended"));
  return rc < 0 ? rc : 0;
}

int sbx_agent_recv(sbx_agent *a, sbx_wire_resp *out, sbx_error *err) {
  const char *line;
  size_t len;
  int rc = agent_need_frame(a, &line, &len, err);
  if (rc < 0) return rc;
  rc = sbx_wire_decode_resp(line, len, out, err);
  if (rc < 0) {
    sbx_err_wrap(err, "agent: bad frame from silkd");
    return agent_broken(a, SBX_E_PROTO);
  }
  return 0;
}

/* An error frame -> SBX_E_REMOTE carrying the kind. */
int agent_remote_error(const sbx_wire_resp *r, sbx_error *err) {
  int rc = sbx_err(err, SBX_E_REMOTE, "%s: %s", sbx_wire_error_kind_name(r->u.error.kind), r->u.error.message);
  if (err) err->detail = (int)r->u.error.kind;
  return rc;
}

int agent_unexpected(sbx_agent *a, const sbx_wire_resp *r, const char *verb, sbx_error *err) {
  return agent_broken(a, sbx_err(err, SBX_E_PROTO, "agent: unexpected %s frame during %s", sbx_wire_type_name(r->type), verb));
}

/* Receive the single-frame reply of a verb: `want` or an error. */
int agent_recv_reply(sbx_agent *a, sbx_wire_type want, sbx_wire_resp *out, const char *verb, sbx_error *err) {
  int rc = sbx_agent_recv(a, out, err);
  if (rc < 0) return rc;
  if (out->type == want) return 0;
  if (out->type == SBX_RESP_ERROR) {
    rc = agent_remote_error(out, err);
  } else {
    rc = agent_unexpected(a, out, verb, err);
  }
  sbx_wire_resp_free(out);
  return rc;
}

int sbx_agent_info(sbx_agent *a, sbx_resp_info *out, char *version, size_t version_len, sbx_error *err) {
  int rc = agent_send_op(a, SBX_OP_INFO, err);
  if (rc < 0) return rc;
  sbx_wire_resp r;
  if ((rc = agent_recv_reply(a, SBX_RESP_INFO, &r, "info", err)) < 0) return rc;
  *out = r.u.info;
  if (version && version_len) snprintf(version, version_len, "%s", r.u.info.version);
  out->version = NULL; /* owned by the frame, which is freed here */
  sbx_wire_resp_free(&r);
  return 0;
}

int agent_ensure_scratch(sbx_agent *a, size_t n) {
  if (n <= a->scratch_cap) return 0;
  a->scratch = sbx_realloc(a->scratch, n);
  a->scratch_cap = n;
  return 0;
}

int agent_send_chunked(sbx_agent *a, sbx_wire_bulk kind, const void *data, size_t n, sbx_error *err) {
  const char *p = data;
  while (n > 0) {
    size_t k = n > AGENT_CHUNK ? AGENT_CHUNK : n;
    int rc = sbx_agent_send_bulk(a, kind, p, k, err);
    if (rc < 0) return rc;
    p += k;
    n -= k;
  }
  return 0;
}

/* Forward one read of stdin_fd; returns 1 at EOF (stdin_close sent). */
static int pump_stdin(sbx_agent *a, int fd, sbx_error *err) {
  /* scratch is free here: output frames are decoded into it only between reads */
  ssize_t n = read(fd, a->scratch, a->scratch_cap < AGENT_CHUNK ? a->scratch_cap : AGENT_CHUNK);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
  if (n <= 0) {
    int rc = agent_send_op(a, SBX_OP_STDIN_CLOSE, err);
    return rc < 0 ? rc : 1;
  }
  int rc = sbx_agent_send_bulk(a, SBX_BULK_REQ_STDIN, a->scratch, (size_t)n, err);
  return rc < 0 ? rc : 0;
}

static int deliver(const sbx_agent_exec_io *io, sbx_stream s, const void *p, size_t n) {
  return io && io->on_output ? io->on_output(io->ud, s, p, n) : 0;
}

int sbx_agent_exec(sbx_agent *a, const sbx_req_exec *req, const sbx_agent_exec_io *io, int *exit_code,
                   sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_EXEC};
  r.u.exec = *req;
  int rc = sbx_agent_send(a, &r, err);
  if (rc < 0) return rc;
  bool in_session = req->session != NULL;
  bool detached = req->has_detach && req->detach;
  int stdin_fd = io && !in_session && !detached ? io->stdin_fd : -1;
  bool started = in_session; /* session execs send no `started` */
  agent_ensure_scratch(a, AGENT_CHUNK);
  for (;;) {
    /* While stdin is open, wait on both the socket and stdin. */
    if (started && stdin_fd >= 0 && sbx_frame_reader_pending(a->reader) == 0 && !a->eof) {
      struct pollfd pfd[2] = {{a->fd, POLLIN, 0}, {stdin_fd, POLLIN, 0}};
      int pr = poll(pfd, 2, a->timeout_ms);
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) return agent_broken(a, sbx_err(err, SBX_E_TIMEOUT, "agent: no answer within %d ms", a->timeout_ms));
      if (pfd[1].revents) {
        rc = pump_stdin(a, stdin_fd, err);
        if (rc < 0) return rc;
        if (rc == 1) stdin_fd = -1;
      }
      if (!(pfd[0].revents)) continue;
    }
    const char *line;
    size_t len;
    if ((rc = agent_need_frame(a, &line, &len, err)) < 0) return rc;
    sbx_wire_bulk kind;
    size_t n;
    if (agent_ensure_scratch(a, sbx_b64_decoded_max(len)) == 0 &&
        (rc = sbx_wire_bulk_decode(line, len, &kind, a->scratch, a->scratch_cap, &n, err)) == 1) {
      if (kind == SBX_BULK_STDOUT || kind == SBX_BULK_STDERR) {
        rc = deliver(io, kind == SBX_BULK_STDOUT ? SBX_STREAM_STDOUT : SBX_STREAM_STDERR, a->scratch, n);
        if (rc) return agent_broken(a, rc < 0 ? rc : SBX_E_INTERNAL);
        continue;
      }
      return agent_broken(a, sbx_err(err, SBX_E_PROTO, "agent: unexpected data frame during exec"));
    }
    if (rc < 0) return agent_broken(a, rc);
    sbx_wire_resp resp;
    if (sbx_wire_decode_resp(line, len, &resp, err) < 0) return agent_broken(a, SBX_E_PROTO);
    switch (resp.type) {
    case SBX_RESP_STARTED:
      if (started) {
        rc = agent_unexpected(a, &resp, "exec", err);
        break;
      }
      started = true;
      if (io && io->on_started) io->on_started(io->ud, resp.u.started.pid);
      if (detached) {
        if (exit_code) *exit_code = 0;
        rc = 1;
        break;
      }
      if (io && io->stdin_data && (rc = agent_send_chunked(a, SBX_BULK_REQ_STDIN, io->stdin_data, io->stdin_len, err)) < 0) break;
      if (stdin_fd < 0 && (rc = agent_send_op(a, SBX_OP_STDIN_CLOSE, err)) < 0) break;
      rc = 0;
      break;
    case SBX_RESP_STDOUT:
    case SBX_RESP_STDERR:
      rc = deliver(io, resp.type == SBX_RESP_STDOUT ? SBX_STREAM_STDOUT : SBX_STREAM_STDERR, resp.u.data.data.ptr,
                   resp.u.data.data.len);
      if (rc) rc = agent_broken(a, rc < 0 ? rc : SBX_E_INTERNAL);
      break;
    case SBX_RESP_EXIT:
      if (exit_code) *exit_code = resp.u.exit.code;
      rc = 1;
      break;
    case SBX_RESP_ERROR: rc = agent_remote_error(&resp, err); break;
    default: rc = agent_unexpected(a, &resp, "exec", err);
    }
    sbx_wire_resp_free(&resp);
    if (rc == 1) return 0;
    if (rc < 0) return rc;
  }
}

typedef struct {
  sbx_buf *out, *errout;
  sbx_error *err;
} run_ctx;

static int run_collect(void *ud, sbx_stream s, const void *p, size_t n) {
  run_ctx *c = ud;
  sbx_buf *b = s == SBX_STREAM_STDOUT ? c->out : c->errout;
  return b ? sbx_buf_add(b, p, n, c->err) : 0;
}

int sbx_agent_run(sbx_agent *a, const char *const *argv, sbx_buf *out, sbx_buf *errout, int *exit_code,
                  sbx_error *err) {
  size_t argc = 0;
  while (argv[argc]) argc++;
  sbx_req_exec req = {.argv = {(const char **)argv, argc}};
  run_ctx c = {out, errout, err};
  sbx_agent_exec_io io = {.on_output = run_collect, .ud = &c, .stdin_fd = -1};
  return sbx_agent_exec(a, &req, &io, exit_code, err);
}

int sbx_agent_kill(sbx_agent *a, uint32_t pid, int signal, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_KILL};
  r.u.kill.pid = pid;
  r.u.kill.has_signal = true;
  r.u.kill.signal = signal;
  int rc = sbx_agent_send(a, &r, err);
  sbx_wire_resp resp;
  if (rc < 0 || (rc = agent_recv_reply(a, SBX_RESP_DONE, &resp, "kill", err)) < 0) return rc;
  sbx_wire_resp_free(&resp);
  return 0;
}

int agent_stream(sbx_agent *a, const char *verb, agent_frame_fn on_frame, void *ud, sbx_error *err) {
  for (;;) {
    sbx_wire_resp resp;
    int rc = sbx_agent_recv(a, &resp, err);
    if (rc < 0) return rc;
    if (resp.type == SBX_RESP_DONE) rc = 1;
    else if (resp.type == SBX_RESP_ERROR) rc = agent_remote_error(&resp, err);
    else if ((rc = on_frame(a, &resp, ud, err)) == AGENT_FRAME_UNEXPECTED) rc = agent_unexpected(a, &resp, verb, err);
    sbx_wire_resp_free(&resp);
    if (rc != 0) return rc == 1 ? 0 : rc;
  }
}

static int read_file_frame(sbx_agent *a, const sbx_wire_resp *r, void *ud, sbx_error *err) {
  if (r->type != SBX_RESP_DATA) return AGENT_FRAME_UNEXPECTED;
  /* a full buffer leaves the rest of the stream unread: the connection
   * cannot be reused */
  int rc = sbx_buf_add(ud, r->u.data.data.ptr, r->u.data.data.len, err);
  return rc < 0 ? agent_broken(a, rc) : 0;
}

int sbx_agent_read_file(sbx_agent *a, const char *path, sbx_buf *out, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_FS_READ};
  r.u.fs_read.path = path;
  int rc = sbx_agent_send(a, &r, err);
  if (rc < 0) return rc;
  return agent_stream(a, "fs_read", read_file_frame, out, err);
}

int sbx_agent_write_file(sbx_agent *a, const char *path, const void *data, size_t n, int mode, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_FS_WRITE};
  r.u.fs_write.path = path;
  if (mode >= 0) {
    r.u.fs_write.has_mode = true;
    r.u.fs_write.mode = (uint32_t)mode;
  }
  int rc = sbx_agent_send(a, &r, err);
  if (rc == 0) rc = agent_send_chunked(a, SBX_BULK_REQ_DATA, data, n, err);
  if (rc < 0 || (rc = agent_send_op(a, SBX_OP_DATA_END, err)) < 0) return rc;
  sbx_wire_resp resp;
  if ((rc = agent_recv_reply(a, SBX_RESP_DONE, &resp, "fs_write", err)) < 0) return rc;
  sbx_wire_resp_free(&resp);
  return 0;
}

int sbx_agent_stat(sbx_agent *a, const char *path, sbx_wire_file_info *out, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_FS_STAT};
  r.u.fs_stat.path = path;
  int rc = sbx_agent_send(a, &r, err);
  sbx_wire_resp resp;
  if (rc < 0 || (rc = agent_recv_reply(a, SBX_RESP_STAT, &resp, "fs_stat", err)) < 0) return rc;
  *out = resp.u.stat.info;
  sbx_wire_resp_free(&resp);
  return 0;
}
