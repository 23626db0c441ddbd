/* conn.c - one client connection: framing, the proto 2 read loop of spec
 * §2.5-2.6 and the output queue.
 *
 * Reading is pull-driven: we only take the next line out of the frame reader
 * when the connection's state allows it, so a verb in input mode "none"
 * leaves later frames in the socket (or the reader) until its final frame,
 * exactly as the spec orders. Everything an RPC does to the connection from
 * inside a send (a write failure) is deferred to c->kick, so an RPC is never
 * re-entered from its own call.
 *
 * A Unix connection whose first bytes come with a descriptor (SCM_RIGHTS)
 * is a handoff carrier from sandboxd (relay.c): a client socket that
 * already got its 101, a marker byte 0x00 and the bytes the client
 * pipelined, up to the carrier's EOF. The socket then becomes a connection
 * of its own that reads those bytes first; the carrier stays open until
 * that connection ends, as sandboxd's signal to take the socket back.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "silkd.h"

struct conn {
  int fd_in, fd_out;
  struct event *rev, *wev, *kick;
  struct evbuffer *out;
  sbx_frame_reader *fr; /* fill mode: the socket is read straight into it */
  uint8_t *scratch; /* decoded bulk payloads */
  size_t scratch_cap;
  char *pending; /* a request read while a fed RPC ran (§2.6b) */
  size_t pending_len;
  const struct rpc_ops *ops;
  void *rpc;
  bool in_rpc;
  bool input_ended; /* fed RPC: input ended */
  bool input_paused;
  bool want_writable;
  bool eof;       /* the client's stream ended */
  bool dispatched;
  bool broken;    /* write failed or oversize: no more I/O at all */
  bool closing;   /* close once the output is flushed */
  bool aborted;   /* rpc_ops.abort already called */
  bool pumping;
  bool is_stdio;
  bool big_sndbuf; /* SO_SNDBUF raised, at the first bulk frame */
  bool unix_first; /* a Unix socket not read yet: it may be a carrier */
  bool carrier;    /* reading a carrier's pipelined bytes into carry */
  bool adopted;    /* fd_in came over a carrier */
  int carry_fd;    /* carrier: the socket it carries; adopted: the carrier */
  char *carry;
  size_t carry_len;
  struct conn *next, *prev;
};

static struct conn *conns;
static void conn_pump(struct conn *c);
static void conn_flush(struct conn *c);

static void kick(struct conn *c) { event_active(c->kick, 0, 0); }

static void conn_free(struct conn *c) {
  if (c->prev) c->prev->next = c->next;
  else conns = c->next;
  if (c->next) c->next->prev = c->prev;
  event_free(c->rev);
  event_free(c->wev);
  event_free(c->kick);
  evbuffer_free(c->out);
  sbx_frame_reader_free(c->fr);
  sbx_free(c->scratch);
  sbx_free(c->pending);
  if (c->is_stdio) {
    /* The stdio transport is the whole daemon's one connection. */
    event_base_loopexit(silkd.base, NULL);
  } else if (c->fd_in >= 0) {
    /* sandboxd holds a duplicate of an adopted socket, so close alone
     * would leave the client waiting: the FIN goes now, and the carrier's
     * close has sandboxd drain and close its copy (§4.21's guest EOF). */
    if (c->adopted) shutdown(c->fd_in, SHUT_WR);
    close(c->fd_in);
  }
  if (c->carry_fd >= 0) close(c->carry_fd);
  sbx_free(c->carry);
  sbx_free(c);
}

/* Free the connection if nothing refers to it any more. */
static bool conn_maybe_free(struct conn *c) {
  if (c->in_rpc || c->pumping) return false;
  if (c->broken || (c->closing && evbuffer_get_length(c->out) == 0)) {
    conn_free(c);
    return true;
  }
  return false;
}

static void conn_break(struct conn *c) {
  if (c->broken) return;
  c->broken = true;
  evbuffer_drain(c->out, evbuffer_get_length(c->out));
  event_del(c->rev);
  event_del(c->wev);
  kick(c);
}

static void on_kick(evutil_socket_t fd, short what, void *arg) {
  struct conn *c = arg;
  if (c->broken && c->in_rpc && !c->aborted) {
    c->aborted = true;
    if (c->ops->abort) c->ops->abort(c->rpc);
    /* abort may have finished the RPC (and kicked again). */
    return;
  }
  if (conn_maybe_free(c)) return;
  if (!c->broken) conn_pump(c);
}

static void on_write(evutil_socket_t fd, short what, void *arg) {
  struct conn *c = arg;
  conn_flush(c);
  if (c->broken) return;
  if (c->want_writable && evbuffer_get_length(c->out) < SILKD_OUT_LOW) {
    c->want_writable = false;
    if (c->in_rpc && c->ops->writable) c->ops->writable(c->rpc);
  }
  if (c->closing) conn_maybe_free(c);
}

static void on_read(evutil_socket_t fd, short what, void *arg) { conn_pump(arg); }

static struct conn *conn_new(int fd_in, int fd_out) {
  struct conn *c = sbx_calloc(1, sizeof *c);
  c->carry_fd = -1;
  c->fd_in = fd_in;
  c->fd_out = fd_out;
  c->is_stdio = fd_in != fd_out;
  set_nonblock(fd_in);
  set_nonblock(fd_out);
  c->rev = event_new(silkd.base, fd_in, EV_READ, on_read, c);
  c->wev = event_new(silkd.base, fd_out, EV_WRITE, on_write, c);
  c->kick = event_new(silkd.base, -1, 0, on_kick, c);
  c->out = evbuffer_new();
  c->fr = sbx_frame_reader_new(SBX_WIRE_FRAME_CAP);
  c->next = conns;
  if (conns) conns->prev = c;
  conns = c;
  return c;
}

void conn_start(int fd_in, int fd_out) {
  struct conn *c = conn_new(fd_in, fd_out);
  if (!c->is_stdio) {
    int dom = 0;
    socklen_t len = sizeof dom;
    c->unix_first = getsockopt(fd_in, SOL_SOCKET, SO_DOMAIN, &dom, &len) == 0 && dom == AF_UNIX;
  }
  conn_pump(c);
}

void conn_close_all(void) {
  for (struct conn *c = conns; c; c = c->next) conn_break(c);
}

static void conn_flush(struct conn *c) {
  while (!c->broken && evbuffer_get_length(c->out) > 0) {
    int n = evbuffer_write(c->out, c->fd_out);
    if (n > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      event_add(c->wev, NULL);
      return;
    }
    if (n < 0 && errno == EINTR) continue;
    conn_break(c);
    return;
  }
}

/* ---- output ---- */

size_t conn_out_len(const struct conn *c) { return evbuffer_get_length(c->out); }
bool conn_broken(const struct conn *c) { return c->broken; }
void conn_want_writable(struct conn *c) {
  c->want_writable = true;
  if (evbuffer_get_length(c->out) < SILKD_OUT_LOW) event_add(c->wev, NULL);
}

static bool conn_queue(struct conn *c, const void *p, size_t n);

bool conn_send_raw(struct conn *c, const void *p, size_t n) { return conn_queue(c, p, n); }

static bool conn_queue(struct conn *c, const void *p, size_t n) {
  if (c->broken) return false;
  bool was_empty = evbuffer_get_length(c->out) == 0;
  evbuffer_add(c->out, p, n);
  /* Write at once when nothing waits: interactive verbs need the latency. */
  if (was_empty) conn_flush(c);
  return !c->broken;
}

bool conn_send_resp(struct conn *c, const sbx_wire_resp *r) {
  sbx_buf b = SBX_BUF_INIT(SBX_WIRE_FRAME_CAP + 1);
  sbx_error e;
  if (sbx_wire_encode_resp(&b, r, &e) < 0) {
    sbx_buf_free(&b);
    if (e.code == SBX_E_TOOBIG) return conn_send_error(c, SBX_ERR_INTERNAL, "response exceeds frame cap");
    return conn_send_error(c, SBX_ERR_INTERNAL, "encode: %s", e.msg);
  }
  bool ok = conn_queue(c, b.ptr, b.len);
  sbx_buf_free(&b);
  return ok;
}

bool conn_send_error(struct conn *c, sbx_wire_error_kind kind, const char *fmt, ...) {
  char msg[SBX_ERROR_MSG_MAX * 2];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sbx_buf b = SBX_BUF_INIT(SBX_WIRE_FRAME_CAP + 1);
  sbx_error e;
  bool ok = false;
  if (sbx_wire_encode_error(&b, kind, msg, &e) == 0) ok = conn_queue(c, b.ptr, b.len);
  sbx_buf_free(&b);
  return ok;
}

bool conn_send_sbx_error(struct conn *c, const sbx_error *e, sbx_wire_error_kind other) {
  sbx_wire_error_kind k = e->code == SBX_E_NOTFOUND ? SBX_ERR_NOT_FOUND : other;
  return conn_send_error(c, k, "%s", e->msg);
}

bool conn_send_simple(struct conn *c, sbx_wire_type t) {
  sbx_wire_resp r = {.type = t};
  return conn_send_resp(c, &r);
}

bool conn_send_exit(struct conn *c, int32_t code) {
  sbx_wire_resp r = {.type = SBX_RESP_EXIT, .u.exit.code = code};
  return conn_send_resp(c, &r);
}

bool conn_send_started(struct conn *c, uint32_t pid) {
  sbx_wire_resp r = {.type = SBX_RESP_STARTED, .u.started.pid = pid};
  return conn_send_resp(c, &r);
}

bool conn_send_bulk(struct conn *c, sbx_wire_bulk kind, const void *p, size_t n) {
  if (c->broken) return false;
  if (!c->big_sndbuf) {
    /* A bulk frame (about 350 KB) does not fit the default 208 KiB socket
     * buffer, so each one took several wakeups of both sides. Only
     * connections that stream get it. Not a socket (stdio on a pipe): the
     * call just fails. */
    c->big_sndbuf = true;
    int sb = SILKD_SNDBUF;
    if (setsockopt(c->fd_out, SOL_SOCKET, SO_SNDBUFFORCE, &sb, sizeof sb) < 0)
      setsockopt(c->fd_out, SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
  }
  bool was_empty = evbuffer_get_length(c->out) == 0;
  size_t len = sbx_wire_bulk_frame_len(kind, n);
  struct evbuffer_iovec v;
  if (evbuffer_reserve_space(c->out, (ev_ssize_t)len, &v, 1) < 1) {
    conn_break(c);
    return false;
  }
  v.iov_len = sbx_wire_bulk_encode_into(v.iov_base, kind, p, n);
  evbuffer_commit_space(c->out, &v, 1);
  if (was_empty) conn_flush(c);
  return !c->broken;
}

/* ---- RPC lifecycle ---- */

void conn_rpc_begin(struct conn *c, const struct rpc_ops *ops, void *rpc) {
  c->ops = ops;
  c->rpc = rpc;
  c->in_rpc = true;
  c->input_ended = false;
  c->input_paused = false;
  c->aborted = false;
  /* A connection that broke during the dispatch call still needs abort;
   * a cancel-on-input RPC needs its input watched from now on. */
  if (c->broken || ops->mode == SBX_INPUT_CANCEL) kick(c);
}

void conn_rpc_done(struct conn *c) {
  c->in_rpc = false;
  c->ops = NULL;
  c->rpc = NULL;
  c->want_writable = false;
  c->input_paused = false;
  if (c->scratch_cap > (1u << 20)) {
    sbx_free(c->scratch);
    c->scratch = NULL;
    c->scratch_cap = 0;
  }
  sbx_frame_reader_trim(c->fr, SILKD_READ_KEEP);
  kick(c);
}

void conn_pause_input(struct conn *c, bool paused) {
  if (c->input_paused == paused) return;
  c->input_paused = paused;
  if (!paused) kick(c);
}

/* ---- input ---- */

static void close_after_flush(struct conn *c) {
  c->closing = true;
  event_del(c->rev);
  /* Not on an adopted socket: sandboxd reads it during the drain. */
  if (c->fd_in == c->fd_out && !c->adopted) shutdown(c->fd_in, SHUT_RD);
}

/* ---- handoff carriers ---- */

static bool stream_socket(int fd) {
  struct stat st;
  int type = 0;
  socklen_t len = sizeof type;
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
         type == SOCK_STREAM;
}

/* The first read of a Unix connection; a carrier (a descriptor came) sets
 * c->carrier and keeps the bytes after the marker, a bad one breaks the
 * connection. Otherwise just a read. */
static ssize_t first_read(struct conn *c, char *where, size_t room) {
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(4 * sizeof(int))];
  } u;
  struct iovec iov = {where, room};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
  ssize_t n = recvmsg(c->fd_in, &m, MSG_CMSG_CLOEXEC);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return n;
  c->unix_first = false;
  int got = -1;
  for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
      if (got < 0) got = fd;
      else close(fd); /* one socket per carrier */
    }
  }
  if (got < 0) return n;
  if (n <= 0 || where[0] != 0 || !stream_socket(got)) {
    sbx_warn("handoff refused: %s", n <= 0 || where[0] != 0 ? "no marker byte" : "not a stream socket");
    close(got);
    conn_break(c);
    return 0;
  }
  c->carrier = true;
  c->carry_fd = got;
  c->carry = sbx_malloc(SILKD_CARRY_MAX + 1);
  c->carry_len = (size_t)n - 1 > SILKD_CARRY_MAX ? SILKD_CARRY_MAX + 1 : (size_t)n - 1;
  memcpy(c->carry, where + 1, c->carry_len);
  return 0;
}

/* The carrier ended: its socket becomes a connection that reads the
 * pipelined bytes first, and the carrier stays open as long as it lives. */
static void adopt(struct conn *c) {
  struct conn *a = conn_new(c->carry_fd, c->carry_fd);
  a->adopted = true;
  a->carry_fd = c->fd_in;
  c->carry_fd = c->fd_in = c->fd_out = -1;
  char *where;
  size_t room;
  sbx_error e;
  if (c->carry_len > 0) {
    if (sbx_frame_reader_space(a->fr, c->carry_len, &where, &room, &e) < 0) {
      conn_break(a);
    } else {
      memcpy(where, c->carry, c->carry_len);
      sbx_frame_reader_commit(a->fr, c->carry_len);
    }
  }
  conn_break(c); /* freed when its pump returns */
  if (!a->broken) conn_pump(a);
}

/* Read the carrier to its EOF, at most SILKD_CARRY_MAX bytes. */
static void carrier_pump(struct conn *c) {
  for (;;) {
    if (c->carry_len > SILKD_CARRY_MAX) {
      sbx_warn("handoff refused: over %d pipelined bytes", SILKD_CARRY_MAX);
      conn_break(c);
      return;
    }
    ssize_t n = read(c->fd_in, c->carry + c->carry_len, SILKD_CARRY_MAX + 1 - c->carry_len);
    if (n > 0) {
      c->carry_len += (size_t)n;
    } else if (n == 0) {
      adopt(c);
      return;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      event_add(c->rev, NULL);
      return;
    } else if (errno != EINTR) {
      conn_break(c);
      return;
    }
  }
}

/* Decode a line; for bulk frames the payload lands in c->scratch. */
static int decode(struct conn *c, const char *line, size_t len, sbx_wire_req *req, sbx_error *err) {
  size_t need = sbx_b64_decoded_max(len) + 4;
  if (need > c->scratch_cap) {
    sbx_free(c->scratch);
    c->scratch = sbx_malloc(need);
    c->scratch_cap = need;
  }
  sbx_wire_bulk kind;
  size_t n;
  int r = sbx_wire_bulk_decode(line, len, &kind, c->scratch, c->scratch_cap, &n, err);
  if (r < 0) return r;
  if (r == 1 && (kind == SBX_BULK_REQ_DATA || kind == SBX_BULK_REQ_STDIN)) {
    memset(req, 0, sizeof *req);
    req->op = kind == SBX_BULK_REQ_DATA ? SBX_OP_DATA : SBX_OP_STDIN;
    req->u.data.data.ptr = c->scratch;
    req->u.data.data.len = n;
    return 0;
  }
  if (r == 1) return sbx_err(err, SBX_E_PARSE, "a response frame is not a request");
  return sbx_wire_decode_req(line, len, req, err);
}

static void serve_request(struct conn *c, sbx_wire_req *req) {
  c->dispatched = true;
  if (req->nul_field) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "invalid argument: NUL byte in %s", req->nul_field);
    return;
  }
  dispatch(c, req);
}

/* §2.5: a frame read between RPCs. */
static void line_idle(struct conn *c, const char *line, size_t len) {
  sbx_wire_req req;
  sbx_error e;
  if (decode(c, line, len, &req, &e) < 0) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "parse: %s", e.msg);
    close_after_flush(c);
    return;
  }
  if (sbx_wire_op_is_continuation(req.op)) {
    if (!c->dispatched) {
      c->dispatched = true;
      conn_send_error(c, SBX_ERR_BAD_REQUEST, "stray data/stdin frame");
    }
  } else {
    serve_request(c, &req);
  }
  sbx_wire_req_free(&req);
}

static void end_input(struct conn *c) {
  if (c->input_ended) return;
  c->input_ended = true;
  if (c->ops->input_end) c->ops->input_end(c->rpc);
}

/* §2.6b/c: a frame read while an RPC with input runs. */
static void line_rpc(struct conn *c, const char *line, size_t len) {
  sbx_wire_req req;
  sbx_error e;
  bool ok = decode(c, line, len, &req, &e) == 0;
  if (c->ops->mode == SBX_INPUT_UPLOAD) {
    if (ok && req.op == SBX_OP_DATA) {
      c->ops->input(c->rpc, SBX_OP_DATA, req.u.data.data.ptr, req.u.data.data.len);
    } else if (ok && req.op == SBX_OP_DATA_END) {
      c->input_ended = true;
      c->ops->input_end(c->rpc);
    } else {
      conn_send_error(c, SBX_ERR_BAD_REQUEST, "expected data or data_end");
      c->input_ended = true;
      c->aborted = true;
      c->ops->abort(c->rpc);
    }
  } else if (!ok) {
    end_input(c);
  } else if (sbx_wire_op_is_continuation(req.op)) {
    if (!c->input_ended && c->ops->input)
      c->ops->input(c->rpc, req.op, req.u.data.data.ptr, req.u.data.data.len);
  } else {
    /* Served after the RPC's final frame; the line buffer will not live
     * that long. */
    c->pending = sbx_malloc(len + 1);
    memcpy(c->pending, line, len);
    c->pending_len = len;
    end_input(c);
  }
  if (ok) sbx_wire_req_free(&req);
}

static void on_eof(struct conn *c) {
  if (!c->in_rpc) {
    close_after_flush(c);
    return;
  }
  if (c->ops->mode == SBX_INPUT_UPLOAD && !c->input_ended) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "stream ended before data_end");
    c->input_ended = true;
    c->aborted = true;
    c->closing = true;
    c->ops->abort(c->rpc);
    return;
  }
  end_input(c);
}

static bool may_read(const struct conn *c) {
  if (c->broken || c->closing) return false;
  if (!c->in_rpc) return true;
  if (c->input_paused || c->input_ended) return false;
  return c->ops->mode == SBX_INPUT_FED || c->ops->mode == SBX_INPUT_UPLOAD;
}

/* §2.6d: any readable state (a byte, end of stream, an error) stops a
 * cancel-on-input RPC with no final frame. Nothing is consumed: the bytes
 * stay for the §2.5 loop once the RPC is gone. */
static void cancel_watch(struct conn *c) {
  if (!c->in_rpc || c->aborted || c->broken || c->ops->mode != SBX_INPUT_CANCEL) return;
  bool input = c->eof || sbx_frame_reader_pending(c->fr) > 0;
  if (!input) {
    struct pollfd p = {.fd = c->fd_in, .events = POLLIN | POLLRDHUP};
    input = poll(&p, 1, 0) != 0;
  }
  if (!input) {
    event_add(c->rev, NULL);
    return;
  }
  c->aborted = true;
  if (c->ops->abort) c->ops->abort(c->rpc);
}

static void conn_pump(struct conn *c) {
  if (c->pumping) return;
  c->pumping = true;
  while (may_read(c)) {
    if (c->carrier) {
      carrier_pump(c);
      break;
    }
    if (!c->in_rpc && c->pending) {
      char *line = c->pending;
      size_t len = c->pending_len;
      c->pending = NULL;
      line_idle(c, line, len);
      sbx_free(line);
      continue;
    }
    const char *line;
    size_t len;
    sbx_error e;
    int r = sbx_frame_reader_next(c->fr, &line, &len, &e);
    if (r < 0) { /* oversize: close with no reply (§1.4) */
      conn_break(c);
      break;
    }
    if (r == 1) {
      if (c->in_rpc) line_rpc(c, line, len);
      else line_idle(c, line, len);
      continue;
    }
    if (c->eof) {
      on_eof(c);
      if (!c->in_rpc && !c->closing) close_after_flush(c);
      break;
    }
    char *where;
    size_t room;
    if (sbx_frame_reader_space(c->fr, SILKD_READ_MIN, &where, &room, &e) < 0) {
      conn_break(c);
      break;
    }
    ssize_t n = c->unix_first ? first_read(c, where, room) : read(c->fd_in, where, room);
    if (c->broken || c->carrier) continue;
    if (n > 0) {
      sbx_frame_reader_commit(c->fr, (size_t)n);
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      c->eof = true;
      sbx_frame_reader_finish(c->fr);
    } else if (errno != EINTR) {
      event_add(c->rev, NULL);
      break;
    }
  }
  cancel_watch(c);
  c->pumping = false;
  if (c->broken && c->in_rpc && !c->aborted) kick(c);
  else conn_maybe_free(c);
}
