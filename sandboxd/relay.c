/* relay.c - upgraded connections: a byte relay to silkd (spec §4.21) and
 * a framed relay to a guest TCP port through port_forward (§4.22).
 *
 * Both use bufferevents with backpressure: a side stops reading while the
 * other side has more than RELAY_HIGH bytes queued. Every relay is on
 * d->relays so a release or a shutdown can force-close it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "sandboxd.h"

#define RELAY_HIGH (1024 * 1024)
#define DRAIN_GRACE_S 30
#define PF_CHUNK (192 * 1024) /* raw bytes per data frame (256 KiB base64) */
/* libevent reads and writes at most 4 KiB per call by default; bulk silkd
 * frames are 43-350 KB, so relays move bigger slices per syscall. */
#define RELAY_IO (256 * 1024)

static void relay_io_size(struct bufferevent *bev) {
  bufferevent_set_max_single_read(bev, RELAY_IO);
  bufferevent_set_max_single_write(bev, RELAY_IO);
}

static const char AGENT_101[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: silkd\r\nConnection: Upgrade\r\n\r\n";
static const char TCP_101[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: tcp\r\nConnection: Upgrade\r\n\r\n";

struct relay {
  struct relay *prev, *next;
  struct sbxd *d;
  char id[SBX_LEASE_ID_LEN + 1];
  bool framed;          /* ports: silkd frames on the guest side */
  struct bufferevent *client, *guest;
  struct event *timer;  /* drain grace, or the port_forward ready wait */
  bool draining;        /* guest ended; waiting for the client to close */
  bool ready;           /* framed: port_forward answered ready */
  bool client_eof, guest_eof;
  bool client_shut;     /* framed: write side toward the client shut */
  struct http_req *req; /* framed, until ready */
  int port;
  /* Spliced raw relay: plain fds and one pipe per direction. */
  bool spliced;
  struct sdir {
    int in, out;
    int pipe[2];
    size_t inpipe; /* bytes waiting in the pipe */
    bool in_eof;
    struct event *rev, *wev;
  } c2g, g2c;
};

static void relay_free(struct relay *r) {
  struct sbxd *d = r->d;
  if (r->prev) r->prev->next = r->next;
  else d->relays = r->next;
  if (r->next) r->next->prev = r->prev;
  if (r->req) reply_error(r->req, 502, "guest agent unreachable");
  if (r->client) bufferevent_free(r->client);
  if (r->guest) bufferevent_free(r->guest);
  if (r->timer) event_free(r->timer);
  if (r->spliced) {
    struct sdir *dirs[2] = {&r->c2g, &r->g2c};
    for (int i = 0; i < 2; i++) {
      if (dirs[i]->rev) event_free(dirs[i]->rev);
      if (dirs[i]->wev) event_free(dirs[i]->wev);
      close(dirs[i]->pipe[0]);
      close(dirs[i]->pipe[1]);
    }
    close(r->c2g.in);
    close(r->c2g.out);
  }
  sbx_lease *l = sbx_lease_find(d->leases, r->id);
  if (l && l->holds > 0) l->holds--;
  sbx_free(r);
}

static struct relay *relay_new(struct sbxd *d, sbx_lease *l, int fd, bool framed) {
  struct relay *r = sbx_calloc(1, sizeof *r);
  r->d = d;
  r->framed = framed;
  snprintf(r->id, sizeof r->id, "%s", l->id);
  evutil_make_socket_nonblocking(fd);
  r->guest = bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE);
  relay_io_size(r->guest);
  r->next = d->relays;
  if (d->relays) d->relays->prev = r;
  d->relays = r;
  l->holds++;
  return r;
}

void relays_close_for(struct sbxd *d, const char *id) {
  for (struct relay *r = d->relays, *n; r; r = n) {
    n = r->next;
    if (strcmp(r->id, id) == 0) relay_free(r);
  }
}

void relays_close_all(struct sbxd *d) {
  while (d->relays) relay_free(d->relays);
}

size_t relays_count(struct sbxd *d) {
  size_t n = 0;
  for (struct relay *r = d->relays; r; r = r->next) n++;
  return n;
}

/* Read from src only while dst has room. */
static void pace(struct bufferevent *src, struct bufferevent *dst) {
  if (!src || !dst) return;
  if (evbuffer_get_length(bufferevent_get_output(dst)) > RELAY_HIGH) bufferevent_disable(src, EV_READ);
  else bufferevent_enable(src, EV_READ);
}

static void drain_timeout(evutil_socket_t fd, short what, void *arg) { relay_free(arg); }

/* ---- the raw silkd relay ---- */

static void raw_client_read(struct bufferevent *bev, void *arg) {
  struct relay *r = arg;
  if (r->draining) {
    /* After the guest ended, client bytes are discarded (§4.21 step 6). */
    evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
    return;
  }
  bufferevent_write_buffer(r->guest, bufferevent_get_input(bev));
  pace(bev, r->guest);
}

static void raw_guest_read(struct bufferevent *bev, void *arg) {
  struct relay *r = arg;
  bufferevent_write_buffer(r->client, bufferevent_get_input(bev));
  pace(bev, r->client);
}

static void shut_client_when_flushed(struct bufferevent *bev, void *arg) {
  struct relay *r = arg;
  if (evbuffer_get_length(bufferevent_get_output(bev)) == 0 && r->guest_eof && !r->draining) {
    r->draining = true;
    shutdown(bufferevent_getfd(bev), SHUT_WR);
    struct timeval tv = {DRAIN_GRACE_S, 0};
    evtimer_add(r->timer, &tv);
  }
}

static void raw_client_written(struct bufferevent *bev, void *arg) {
  struct relay *r = arg;
  if (r->guest_eof) shut_client_when_flushed(bev, r);
  else pace(r->guest, bev);
}

static void raw_guest_written(struct bufferevent *bev, void *arg) {
  struct relay *r = arg;
  pace(r->client, bev);
}

static void raw_client_event(struct bufferevent *bev, short what, void *arg) {
  /* Client EOF or error: the guest connection is closed completely. */
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) relay_free(arg);
}

static void raw_guest_event(struct bufferevent *bev, short what, void *arg) {
  struct relay *r = arg;
  if (what & BEV_EVENT_ERROR) {
    relay_free(r);
    return;
  }
  if (what & BEV_EVENT_EOF) {
    r->guest_eof = true;
    bufferevent_disable(bev, EV_READ);
    bufferevent_enable(r->client, EV_READ);
    shut_client_when_flushed(r->client, r);
  }
}

static bool upgrade_token(struct http_req *req, const char *want) {
  const char *h = http_header(req, "Upgrade");
  if (!h) return false;
  size_t wl = strlen(want);
  for (const char *p = h; *p;) {
    while (*p == ' ' || *p == '\t' || *p == ',') p++;
    const char *e = p;
    while (*e && *e != ',' && *e != ' ' && *e != '\t' && *e != '/') e++;
    if ((size_t)(e - p) == wl && strncasecmp(p, want, wl) == 0) return true;
    while (*e && *e != ',') e++;
    p = e;
  }
  return false;
}

static void upgrade_required(struct http_req *req, const char *proto) {
  char hdr[64];
  snprintf(hdr, sizeof hdr, "Upgrade: %s\r\n", proto);
  const char body[] = "{\"error\":\"upgrade required\"}\n";
  http_reply(req, 426, "application/json", body, sizeof body - 1, hdr);
}

/* ---- the spliced raw relay ----
 * Both ends are sockets, so bytes can move socket -> pipe -> socket in the
 * kernel with splice(2) instead of being copied through user space. The
 * 101 head and the pipelined bytes are written into the pipes first, so
 * they go out ahead of everything else with no special case. */

#define PIPE_SIZE (256 * 1024)

static void splice_client_read(evutil_socket_t fd, short what, void *arg);
static void splice_guest_read(evutil_socket_t fd, short what, void *arg);
static void splice_client_write(evutil_socket_t fd, short what, void *arg);
static void splice_guest_write(evutil_socket_t fd, short what, void *arg);

/* Move what can move; 1 when the input ended and everything went out,
 * -1 on an error, 0 when waiting for readiness. While the pipe holds
 * bytes the input is not read (backpressure). */
static int pump(struct sdir *s) {
  for (;;) {
    if (s->inpipe > 0) {
      ssize_t n = splice(s->pipe[0], NULL, s->out, NULL, s->inpipe, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
      if (n > 0) {
        s->inpipe -= (size_t)n;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) {
        event_del(s->rev);
        event_add(s->wev, NULL);
        return 0;
      }
      return -1;
    }
    event_del(s->wev);
    if (s->in_eof) return 1;
    ssize_t n = splice(s->in, NULL, s->pipe[1], NULL, PIPE_SIZE, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
    if (n > 0) {
      s->inpipe += (size_t)n;
      continue;
    }
    if (n == 0) {
      s->in_eof = true;
      event_del(s->rev); /* an fd at EOF stays readable */
      return 1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      event_add(s->rev, NULL);
      return 0;
    }
    return -1;
  }
}

static void splice_c2g(struct relay *r) {
  if (r->draining) {
    /* After the guest ended, client bytes are discarded (§4.21 step 6). */
    char buf[16384];
    ssize_t n;
    while ((n = read(r->c2g.in, buf, sizeof buf)) > 0) {
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) relay_free(r);
    return;
  }
  int rc = pump(&r->c2g);
  /* Client EOF (after its bytes went out) or an error ends the relay. */
  if (rc != 0) relay_free(r);
}

static void splice_g2c(struct relay *r) {
  int rc = pump(&r->g2c);
  if (rc < 0) {
    relay_free(r);
  } else if (rc == 1 && !r->draining) {
    /* Guest ended and all of it is out: half-close toward the client and
     * wait for it to close, discarding what it sends (§4.21). */
    r->draining = true;
    shutdown(r->g2c.out, SHUT_WR);
    event_del(r->c2g.wev);
    event_add(r->c2g.rev, NULL);
    struct timeval tv = {DRAIN_GRACE_S, 0};
    evtimer_add(r->timer, &tv);
  }
}

static void splice_client_read(evutil_socket_t fd, short what, void *arg) { splice_c2g(arg); }
static void splice_guest_write(evutil_socket_t fd, short what, void *arg) { splice_c2g(arg); }
static void splice_guest_read(evutil_socket_t fd, short what, void *arg) { splice_g2c(arg); }
static void splice_client_write(evutil_socket_t fd, short what, void *arg) { splice_g2c(arg); }

static int pipe_big(int p[2]) {
  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) return -1;
  fcntl(p[1], F_SETPIPE_SZ, PIPE_SIZE); /* a smaller pipe only means more splices */
  return 0;
}

static int write_to_pipe(struct sdir *s, const void *p, size_t n) {
  while (n) {
    ssize_t w = write(s->pipe[1], p, n);
    if (w <= 0) return -1;
    s->inpipe += (size_t)w;
    p = (const char *)p + w;
    n -= (size_t)w;
  }
  return 0;
}

/* Take the connection over with splice; false (nothing done) when this
 * relay cannot be spliced, so the caller uses bufferevents. */
static bool agent_splice(struct sbxd *d, struct http_req *req, sbx_lease *l, int gfd) {
  if (getenv("SANDBOXD_NO_SPLICE")) return false;
  int cp[2], gp[2];
  if (pipe_big(cp) < 0) return false;
  if (pipe_big(gp) < 0) {
    close(cp[0]);
    close(cp[1]);
    return false;
  }
  /* The pipelined bytes must fit in the client->guest pipe. */
  int cap = fcntl(cp[1], F_GETPIPE_SZ);
  if (cap < 0 || http_pending_len(req) > (size_t)cap) {
    close(cp[0]), close(cp[1]), close(gp[0]), close(gp[1]);
    return false;
  }
  struct evbuffer *pipelined = evbuffer_new();
  bool eof = false;
  int cfd = http_detach(req, pipelined, &eof);
  if (cfd < 0) {
    evbuffer_free(pipelined);
    close(cp[0]), close(cp[1]), close(gp[0]), close(gp[1]);
    close(gfd);
    return true; /* the client is gone: nothing more to do */
  }
  evutil_make_socket_nonblocking(cfd);
  evutil_make_socket_nonblocking(gfd);
  struct relay *r = sbx_calloc(1, sizeof *r);
  r->d = d;
  r->spliced = true;
  snprintf(r->id, sizeof r->id, "%s", l->id);
  r->c2g = (struct sdir){.in = cfd, .out = gfd, .pipe = {cp[0], cp[1]}};
  r->g2c = (struct sdir){.in = gfd, .out = cfd, .pipe = {gp[0], gp[1]}};
  r->c2g.rev = event_new(d->base, cfd, EV_READ | EV_PERSIST, splice_client_read, r);
  r->c2g.wev = event_new(d->base, gfd, EV_WRITE | EV_PERSIST, splice_guest_write, r);
  r->g2c.rev = event_new(d->base, gfd, EV_READ | EV_PERSIST, splice_guest_read, r);
  r->g2c.wev = event_new(d->base, cfd, EV_WRITE | EV_PERSIST, splice_client_write, r);
  r->timer = evtimer_new(d->base, drain_timeout, r);
  r->next = d->relays;
  if (d->relays) d->relays->prev = r;
  d->relays = r;
  l->holds++;
  size_t n = evbuffer_get_length(pipelined);
  int rc = write_to_pipe(&r->g2c, AGENT_101, sizeof AGENT_101 - 1);
  if (rc == 0 && n) rc = write_to_pipe(&r->c2g, evbuffer_pullup(pipelined, (ssize_t)n), n);
  evbuffer_free(pipelined);
  if (rc < 0) {
    relay_free(r);
    return true;
  }
  /* Client EOF: its bytes still go first, then the relay ends. */
  r->c2g.in_eof = eof;
  splice_g2c(r);
  /* splice_g2c cannot free r before the guest said anything. */
  splice_c2g(r);
  return true;
}

void h_agent(struct sbxd *d, struct http_req *req, const char *id) {
  if (!has_bearer(req)) {
    reply_error(req, 401, "missing bearer token");
    return;
  }
  if (!upgrade_token(req, "silkd")) {
    upgrade_required(req, "silkd");
    return;
  }
  sbx_lease *l = auth_sbx(d, req, id, false, "unknown sandbox");
  if (!l) return;
  int fd;
  sbx_error err;
  if (!l->inst || inst_connect(l->inst, &fd, &err) < 0) {
    if (l->inst) sbx_warn("agent %s: %s", l->id, err.msg);
    reply_error(req, 502, "guest agent unreachable");
    return;
  }
  if (agent_splice(d, req, l, fd)) return;
  struct relay *r = relay_new(d, l, fd, false);
  r->timer = evtimer_new(d->base, drain_timeout, r);
  bool eof;
  r->client = http_upgrade(req, AGENT_101, sizeof AGENT_101 - 1, &eof);
  if (!r->client) {
    relay_free(r);
    return;
  }
  relay_io_size(r->client);
  bufferevent_setcb(r->client, raw_client_read, raw_client_written, raw_client_event, r);
  bufferevent_setcb(r->guest, raw_guest_read, raw_guest_written, raw_guest_event, r);
  bufferevent_enable(r->client, EV_READ | EV_WRITE);
  bufferevent_enable(r->guest, EV_READ | EV_WRITE);
  /* Pipelined bytes already read with the head go first. */
  if (evbuffer_get_length(bufferevent_get_input(r->client))) raw_client_read(r->client, r);
  /* Client EOF closes the guest connection completely (§4.21). */
  if (eof) relay_free(r);
}

/* ---- the port relay: raw bytes <-> port_forward frames ---- */

static void pf_send_data(struct relay *r, struct evbuffer *in) {
  struct evbuffer *out = bufferevent_get_output(r->guest);
  char *b64 = sbx_malloc(sbx_b64_encoded_len(PF_CHUNK) + 1);
  while (evbuffer_get_length(in)) {
    size_t n = evbuffer_get_length(in);
    if (n > PF_CHUNK) n = PF_CHUNK;
    unsigned char *p = evbuffer_pullup(in, (ssize_t)n);
    size_t el = sbx_b64_encode(b64, p, n);
    evbuffer_add_printf(out, "{\"v\":1,\"op\":\"data\",\"data\":\"%.*s\"}\n", (int)el, b64);
    evbuffer_drain(in, n);
  }
  sbx_free(b64);
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
    evbuffer_add_printf(bufferevent_get_output(r->guest), "{\"v\":1,\"op\":\"data_end\"}\n");
    r->client_eof = true;
    bufferevent_disable(bev, EV_READ);
    pf_check(r);
  }
}

static void pf_become_relay(struct relay *r) {
  r->ready = true;
  evtimer_del(r->timer);
  struct http_req *req = r->req;
  r->req = NULL;
  bool eof;
  r->client = http_upgrade(req, TCP_101, sizeof TCP_101 - 1, &eof);
  if (!r->client) {
    relay_free(r);
    return;
  }
  relay_io_size(r->client);
  bufferevent_setcb(r->client, pf_client_read, pf_client_written, pf_client_event, r);
  bufferevent_enable(r->client, EV_READ | EV_WRITE);
  if (evbuffer_get_length(bufferevent_get_input(r->client))) pf_client_read(r->client, r);
  if (eof) pf_client_event(r->client, BEV_EVENT_EOF | BEV_EVENT_READING, r);
}

static void pf_guest_read(struct bufferevent *bev, void *arg) {
  struct relay *r = arg;
  struct evbuffer *in = bufferevent_get_input(bev);
  for (;;) {
    struct evbuffer_ptr nl = evbuffer_search(in, "\n", 1, NULL);
    if (nl.pos < 0) {
      if (evbuffer_get_length(in) > 8 * 1024 * 1024) relay_free(r);
      return;
    }
    size_t len = (size_t)nl.pos;
    json_error_t je;
    json_t *f = json_loadb((const char *)evbuffer_pullup(in, (ssize_t)len + 1), len, 0, &je);
    evbuffer_drain(in, len + 1);
    const char *type = f ? json_string_value(json_object_get(f, "type")) : NULL;
    type = type ? type : "";
    if (!r->ready) {
      bool ok = strcmp(type, "ready") == 0;
      json_decref(f);
      if (!ok) {
        relay_free(r); /* answers 502 */
        return;
      }
      pf_become_relay(r);
      continue;
    }
    if (strcmp(type, "data") == 0) {
      json_t *dv = json_object_get(f, "data");
      size_t bl = json_string_length(dv);
      char *raw = sbx_malloc(sbx_b64_decoded_max(bl) + 1);
      size_t got;
      if (json_is_string(dv) && sbx_b64_decode(raw, json_string_value(dv), bl, &got, NULL) == 0)
        bufferevent_write(r->client, raw, got);
      sbx_free(raw);
      pace(bev, r->client);
    } else if (strcmp(type, "done") == 0) {
      r->guest_eof = true;
    } else if (strcmp(type, "error") == 0) {
      json_decref(f);
      relay_free(r);
      return;
    }
    json_decref(f);
    if (pf_check(r)) return;
  }
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
  if (!upgrade_token(req, "tcp")) {
    upgrade_required(req, "tcp");
    return;
  }
  sbx_lease *l = auth_sbx(d, req, id, false, "unknown sandbox");
  if (!l) return;
  int fd;
  sbx_error err;
  if (!l->inst || inst_connect(l->inst, &fd, &err) < 0) {
    reply_error(req, 502, "guest agent unreachable");
    return;
  }
  struct relay *r = relay_new(d, l, fd, true);
  r->port = (int)pn;
  r->req = req;
  r->timer = evtimer_new(d->base, pf_ready_timeout, r);
  struct timeval tv = {15, 0};
  evtimer_add(r->timer, &tv);
  bufferevent_setcb(r->guest, pf_guest_read, pf_guest_written, pf_guest_event, r);
  bufferevent_enable(r->guest, EV_READ | EV_WRITE);
  evbuffer_add_printf(bufferevent_get_output(r->guest), "{\"v\":1,\"op\":\"port_forward\",\"port\":%ld}\n", pn);
}
