/* relay_port.c - the port relay: raw bytes <-> port_forward frames (spec
 * §4.22), through bufferevents with backpressure (pace). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "relay.h"

#define PF_CHUNK (192 * 1024) /* raw bytes per data frame (256 KiB base64) */

/* Client bytes as data frames, each encoded straight into the guest's
 * output buffer. */
static void pf_send_data(struct relay *r, struct evbuffer *in) {
  struct evbuffer *out = bufferevent_get_output(r->guest);
  while (evbuffer_get_length(in)) {
    size_t n = evbuffer_get_length(in);
    if (n > PF_CHUNK) n = PF_CHUNK;
    unsigned char *p = evbuffer_pullup(in, (ssize_t)n);
    size_t fl = sbx_wire_bulk_frame_len(SBX_BULK_REQ_DATA, n);
    struct evbuffer_iovec v;
    if (evbuffer_reserve_space(out, (ssize_t)fl, &v, 1) < 1) break; /* out of memory: the relay stalls */
    v.iov_len = sbx_wire_bulk_encode_into(v.iov_base, SBX_BULK_REQ_DATA, p, n);
    evbuffer_commit_space(out, &v, 1);
    evbuffer_drain(in, n);
  }
}

static void pf_client_read(struct bufferevent *bev, void *arg) {
  struct relay *r = arg;
  if (!r->ready) return;
  pf_send_data(r, bufferevent_get_input(bev));
  pace(bev, r->guest);
}

/* Shut toward the client once the guest is done and what it sent is
 * flushed; the relay ends when both directions have ended. Returns true
 * if the relay is gone. */
static bool pf_check(struct relay *r) {
  if (r->guest_eof && !r->client_shut && r->client &&
      evbuffer_get_length(bufferevent_get_output(r->client)) == 0) {
    shutdown(bufferevent_getfd(r->client), SHUT_WR);
    r->client_shut = true;
  }
  if (r->client_eof && r->client_shut) {
    relay_free(r);
    return true;
  }
  return false;
}

static void pf_client_written(struct bufferevent *bev, void *arg) {
  struct relay *r = arg;
  if (pf_check(r)) return;
  pace(r->guest, bev);
}

static void pf_client_event(struct bufferevent *bev, short what, void *arg) {
  struct relay *r = arg;
  if (what & BEV_EVENT_ERROR) {
    relay_free(r);
    return;
  }
  if (what & BEV_EVENT_EOF) {
    pf_send_data(r, bufferevent_get_input(bev));
    sbx_wire_req end = {.op = SBX_OP_DATA_END};
    frame_send(bufferevent_get_output(r->guest), &end, NULL);
    r->client_eof = true;
    bufferevent_disable(bev, EV_READ);
    pf_check(r);
  }
}

/* false when the relay is gone (the client could not be upgraded). */
static bool pf_become_relay(struct relay *r) {
  r->ready = true;
  evtimer_del(r->timer);
  struct http_req *req = r->req;
  r->req = NULL;
  bool eof;
  r->client = http_upgrade(req, TCP_101, sizeof TCP_101 - 1, &eof);
  if (!r->client) {
    relay_free(r);
    return false;
  }
  relay_io_size(r->client);
  bufferevent_setcb(r->client, pf_client_read, pf_client_written, pf_client_event, r);
  bufferevent_enable(r->client, EV_READ | EV_WRITE);
  if (evbuffer_get_length(bufferevent_get_input(r->client))) pf_client_read(r->client, r);
  if (eof) pf_client_event(r->client, BEV_EVENT_EOF | BEV_EVENT_READING, r);
  return true;
}

/* A data frame in canonical shape: its payload decoded straight into the
 * client's output buffer. 1 if it was one (bad base64 drops it, as a full
 * decode would), 0 for any other frame. */
static int pf_bulk_to_client(struct relay *r, const char *line, size_t len) {
  struct evbuffer *out = bufferevent_get_output(r->client);
  struct evbuffer_iovec v;
  if (evbuffer_reserve_space(out, (ssize_t)sbx_b64_decoded_max(len) + 1, &v, 1) < 1) return 0;
  sbx_wire_bulk kind;
  size_t got = 0;
  int rc = sbx_wire_bulk_decode(line, len, &kind, v.iov_base, v.iov_len, &got, NULL);
  if (rc == 0 || (rc == 1 && kind != SBX_BULK_DATA)) return 0; /* nothing committed */
  v.iov_len = rc == 1 ? got : 0;
  evbuffer_commit_space(out, &v, 1);
  return 1;
}

/* One frame from the guest once ready: false when the relay is gone. */
static bool pf_guest_frame(struct relay *r, struct bufferevent *bev, const char *line, size_t len) {
  if (pf_bulk_to_client(r, line, len)) {
    pace(bev, r->client);
    return !pf_check(r);
  }
  sbx_wire_resp f;
  if (sbx_wire_decode_resp(line, len, &f, NULL) < 0) return !pf_check(r); /* ignored, as any stray frame */
  sbx_wire_type type = f.type;
  if (type == SBX_RESP_DATA) {
    bufferevent_write(r->client, f.u.data.data.ptr, f.u.data.data.len);
    pace(bev, r->client);
  } else if (type == SBX_RESP_DONE) {
    r->guest_eof = true;
  }
  sbx_wire_resp_free(&f);
  if (type == SBX_RESP_ERROR) {
    relay_free(r);
    return false;
  }
  return !pf_check(r);
}

/* Before ready: the frame must be `ready` (else 502), then the upgrade. */
static bool pf_guest_ready(struct relay *r, const char *line, size_t len) {
  sbx_wire_resp f;
  bool ok = false;
  if (sbx_wire_decode_resp(line, len, &f, NULL) == 0) {
    ok = f.type == SBX_RESP_READY;
    sbx_wire_resp_free(&f);
  }
  if (!ok) {
    relay_free(r); /* answers 502 */
    return false;
  }
  return pf_become_relay(r);
}

static void pf_guest_read(struct bufferevent *bev, void *arg) {
  struct relay *r = arg;
  struct evbuffer *in = bufferevent_get_input(bev);
  const char *line;
  size_t len;
  int got;
  while ((got = frame_next(in, 8 * 1024 * 1024, &line, &len)) == 1) {
    bool alive = r->ready ? pf_guest_frame(r, bev, line, len) : pf_guest_ready(r, line, len);
    if (!alive) return;
    evbuffer_drain(in, len + 1);
  }
  if (got < 0) relay_free(r);
}

static void pf_guest_written(struct bufferevent *bev, void *arg) {
  struct relay *r = arg;
  if (r->ready && !r->client_eof) pace(r->client, bev);
}

static void pf_guest_event(struct bufferevent *bev, short what, void *arg) {
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) relay_free(arg);
}

static void pf_ready_timeout(evutil_socket_t fd, short what, void *arg) { relay_free(arg); }

void h_port(struct sbxd *d, struct http_req *req, const char *id, const char *port) {
  if (!has_bearer(req)) {
    reply_error(req, 401, "missing bearer token");
    return;
  }
  long pn = 0;
  size_t pl = strlen(port);
  bool ok = pl >= 1 && pl <= 5;
  for (size_t i = 0; ok && i < pl; i++) ok = port[i] >= '0' && port[i] <= '9';
  if (ok) pn = strtol(port, NULL, 10);
  if (!ok || pn < 1 || pn > 65535) {
    reply_error(req, 400, "invalid port");
    return;
  }
  int fd;
  sbx_lease *l = upgrade_open(d, req, id, "tcp", &fd);
  if (!l) return;
  struct relay *r = relay_new(d, l, fd, true);
  r->port = (int)pn;
  r->req = req;
  r->timer = evtimer_new(d->base, pf_ready_timeout, r);
  struct timeval tv = {15, 0};
  evtimer_add(r->timer, &tv);
  bufferevent_setcb(r->guest, pf_guest_read, pf_guest_written, pf_guest_event, r);
  bufferevent_enable(r->guest, EV_READ | EV_WRITE);
  sbx_wire_req pf = {.op = SBX_OP_PORT_FORWARD, .u.port_forward.port = (uint16_t)pn};
  frame_send(bufferevent_get_output(r->guest), &pf, NULL);
}
