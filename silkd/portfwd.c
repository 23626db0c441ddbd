/* portfwd.c - port_forward (§5.10): a byte relay between the connection and
 * a TCP socket on 127.0.0.1. The RPC ends only when both directions have
 * closed; `done` marks the guest's EOF, not the end of the RPC.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "silkd.h"

struct fwd {
  struct conn *c;
  int fd;
  uint16_t port;
  struct event *rev;
  struct fdwriter *w;
  bool guest_eof;  /* done sent */
  bool client_eof; /* client-to-guest direction shut down */
  bool ended;
};

static void fwd_free(struct fwd *f) {
  event_free(f->rev);
  fdwriter_free(f->w);
  close(f->fd);
  sbx_free(f);
}

static void fwd_end(struct fwd *f) {
  struct conn *c = f->c;
  fwd_free(f);
  conn_rpc_done(c);
}

static void fwd_check(struct fwd *f) {
  if (f->guest_eof && f->client_eof) fwd_end(f);
}

static void fwd_client_closed(struct fwd *f) {
  if (f->client_eof) return;
  f->client_eof = true;
  fwd_check(f);
}

static void on_guest(evutil_socket_t fd, short what, void *arg) {
  struct fwd *f = arg;
  static uint8_t buf[SILKD_BULK];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n < 0) {
    conn_send_error(f->c, SBX_ERR_INTERNAL, "read port %u: %s (os error %d)", f->port, strerror(errno), errno);
    fwd_end(f);
    return;
  }
  if (n == 0) {
    event_del(f->rev);
    f->guest_eof = true;
    conn_send_simple(f->c, SBX_RESP_DONE);
    fwd_check(f);
    return;
  }
  if (!conn_send_bulk(f->c, SBX_BULK_DATA, buf, (size_t)n)) {
    event_del(f->rev);
    return;
  }
  if (conn_out_len(f->c) >= SILKD_OUT_HIGH) {
    event_del(f->rev);
    conn_want_writable(f->c);
  }
}

static void fwd_writable(void *rpc) {
  struct fwd *f = rpc;
  if (!f->guest_eof) event_add(f->rev, NULL);
}

static void fwd_drained(void *arg, int err) {
  struct fwd *f = arg;
  conn_pause_input(f->c, false);
  if (fdwriter_failed(f->w)) fwd_client_closed(f);
}

static void fwd_shut(struct fwd *f) {
  fdwriter_close_when_done(f->w);
  fwd_client_closed(f);
}

static void fwd_input(void *rpc, sbx_wire_op op, const uint8_t *d, size_t n) {
  struct fwd *f = rpc;
  if (f->client_eof) return;
  switch (op) {
  case SBX_OP_DATA:
    if (fdwriter_write(f->w, d, n) > SILKD_STDIN_HIGH) conn_pause_input(f->c, true);
    if (fdwriter_failed(f->w)) fwd_client_closed(f);
    break;
  case SBX_OP_DATA_END:
    fwd_shut(f);
    break;
  default: /* stdin, stdin_close */
    if (!f->guest_eof)
      conn_send_error(f->c, SBX_ERR_BAD_REQUEST, "unexpected frame during port_forward");
    fwd_end(f);
    break;
  }
}

static void fwd_input_end(void *rpc) {
  struct fwd *f = rpc;
  if (!f->client_eof) fwd_shut(f);
}

static void fwd_abort(void *rpc) { fwd_end(rpc); }

static const struct rpc_ops fwd_ops = {
    .mode = SBX_INPUT_FED,
    .input = fwd_input,
    .input_end = fwd_input_end,
    .writable = fwd_writable,
    .abort = fwd_abort,
};

void verb_port_forward(struct conn *c, sbx_wire_req *req) {
  uint16_t port = req->u.port_forward.port;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  /* Loopback connects complete (or are refused) at once. */
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    conn_send_error(c, e == ECONNREFUSED ? SBX_ERR_NOT_FOUND : SBX_ERR_INTERNAL, "connect %u: %s (os error %d)",
                    port, strerror(e), e);
    return;
  }
  set_nonblock(fd);
  struct fwd *f = sbx_calloc(1, sizeof *f);
  f->c = c;
  f->fd = fd;
  f->port = port;
  f->rev = event_new(silkd.base, fd, EV_READ | EV_PERSIST, on_guest, f);
  f->w = fdwriter_new(fd, fwd_drained, f);
  fdwriter_set_shutdown(f->w);
  if (!conn_send_simple(c, SBX_RESP_READY)) {
    fwd_free(f);
    return;
  }
  event_add(f->rev, NULL);
  conn_rpc_begin(c, &fwd_ops, f);
}
