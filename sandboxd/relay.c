/* relay.c - upgraded connections: a byte relay to silkd (spec §4.21) and
 * a framed relay to a guest TCP port through port_forward (§4.22).
 *
 * The silkd relay normally works on the raw fds (splice one way, a reused
 * buffer the other, see "the fd relay" below); the port relay, and the
 * silkd relay when no pipe or descriptor can be had, use bufferevents with
 * backpressure: a side stops reading while the other side has more than
 * RELAY_HIGH bytes queued. When the agent channel is a Unix socket the
 * client's socket is handed to silkd instead (see "the handoff" below).
 * Every relay and handoff is on d->relays so a release or a shutdown can
 * force-close it. */
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

#define RELAY_BUF (1024 * 1024) /* guest -> client staging buffer of the fd relay */
/* Toward silkd: a deep Unix send buffer lets a whole burst of frames go in
 * one splice, with fewer wakeups of either side. */
#define RELAY_GUEST_SNDBUF (4 * 1024 * 1024)
#define RELAY_BUF_SPARE 4

/* Guest -> client buffers are taken when bytes arrive and given back when
 * the direction goes idle, so a parked connection holds none; a few spare
 * ones save the allocation on every RPC. The relays run on the event loop
 * thread only. */
static char *spare_bufs[RELAY_BUF_SPARE];
static int nspare;

static char *buf_get(void) { return nspare > 0 ? spare_bufs[--nspare] : sbx_malloc(RELAY_BUF); }

static void buf_put(char *b) {
  if (!b) return;
  if (nspare < RELAY_BUF_SPARE) {
    spare_bufs[nspare++] = b;
  } else {
    sbx_free(b);
  }
}

static void bufs_free_spare(void) {
  while (nspare > 0) sbx_free(spare_bufs[--nspare]);
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
  /* Fd relay: plain fds; client -> guest through a pipe with splice,
   * guest -> client through a user-space buffer (see below). */
  bool spliced;
  struct sdir {
    int in, out;
    int pipe[2];  /* -1 in the buffered direction */
    char *buf;    /* buffered direction: held only while bytes move */
    size_t off;   /* buffered: first byte not yet written */
    size_t held;  /* bytes waiting in the pipe or the buffer */
    size_t cap;
    bool in_eof;
    bool in_dry;  /* the last read was short and small: the input is drained */
    struct event *rev, *wev;
  } c2g, g2c;
  /* Handoff: silkd serves the client socket; we keep a duplicate of it and
   * the carrier it went over, whose EOF says silkd is done with it. */
  bool handoff;
  int hfd, carrier;
  struct event *hev; /* the carrier's EOF, then the drain reads on hfd */
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
      buf_put(dirs[i]->buf);
      if (dirs[i]->pipe[0] >= 0) close(dirs[i]->pipe[0]);
      if (dirs[i]->pipe[1] >= 0) close(dirs[i]->pipe[1]);
    }
    close(r->c2g.in);
    close(r->c2g.out);
  }
  if (r->handoff) {
    if (r->hev) event_free(r->hev);
    /* silkd's copy of the socket ends with ours: a release or a shutdown
     * must cut the client off, not just drop a reference. */
    shutdown(r->hfd, SHUT_RDWR);
    close(r->hfd);
    close(r->carrier);
  }
  sbx_lease *l = sbx_lease_find(d->leases, r->id);
  if (l && l->holds > 0) l->holds--;
  sbx_free(r);
}

/* A blank relay of the lease's sandbox, on the node's list: it holds the
 * lease until relay_free. */
static struct relay *relay_link(struct sbxd *d, sbx_lease *l) {
  struct relay *r = sbx_calloc(1, sizeof *r);
  r->d = d;
  snprintf(r->id, sizeof r->id, "%s", l->id);
  r->next = d->relays;
  if (d->relays) d->relays->prev = r;
  d->relays = r;
  l->holds++;
  return r;
}

static struct relay *relay_new(struct sbxd *d, sbx_lease *l, int fd, bool framed) {
  struct relay *r = relay_link(d, l);
  r->framed = framed;
  evutil_make_socket_nonblocking(fd);
  r->guest = bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE);
  relay_io_size(r->guest);
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
  bufs_free_spare();
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

/* ---- the fd relay ----
 * Both ends are plain sockets, so the relay works on the fds, not on
 * bufferevents. Client -> guest moves TCP -> pipe -> Unix socket with
 * splice(2): no copy through user space. Guest -> client goes through a
 * user-space buffer instead (read, then send): splicing into TCP hands it
 * the pipe's page pieces as skb fragments, which cost more on both ends of
 * the loopback leg than the copy (bench/rpc, docs/performance.md). The 101
 * head and the pipelined bytes are put into the pipe and the buffer first,
 * so they go out ahead of everything else with no special case. */

#define RELAY_PIPE (1024 * 1024) /* F_SETPIPE_SZ; the default 64 KiB means 16x the splices */
/* A read shorter than what was asked and than this found the input empty:
 * one RPC frame. The read that would only say EAGAIN is skipped (epoll is
 * level-triggered, so bytes that come later still wake the relay). Bulk
 * reads are larger and keep looping, as more is likely queued behind them. */
#define RELAY_SMALL (16 * 1024)

static void fd_client_read(evutil_socket_t fd, short what, void *arg);
static void fd_guest_read(evutil_socket_t fd, short what, void *arg);
static void fd_client_write(evutil_socket_t fd, short what, void *arg);
static void fd_guest_write(evutil_socket_t fd, short what, void *arg);

static ssize_t take_in(struct sdir *s) {
  if (s->pipe[1] >= 0) return splice(s->in, NULL, s->pipe[1], NULL, s->cap - s->held, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
  if (!s->buf) s->buf = buf_get();
  return read(s->in, s->buf + s->off + s->held, s->cap - s->off - s->held);
}

static ssize_t give_out(struct sdir *s) {
  if (s->pipe[0] >= 0) return splice(s->pipe[0], NULL, s->out, NULL, s->held, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
  ssize_t n = send(s->out, s->buf + s->off, s->held, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n > 0) s->off = (size_t)n == s->held ? 0 : s->off + (size_t)n;
  return n;
}

/* Move what can move: read while there is room, write while bytes are
 * held, until neither makes progress (the buffer or pipe is held and
 * refilled in one loop, so input overlaps output). 1 when the input ended and
 * everything went out, -1 on an error, 0 when waiting for readiness. */
static int pump(struct sdir *s) {
  for (;;) {
    bool moved = false;
    if (s->buf && s->off > 0 && s->off + s->held == s->cap) { /* room only at the front */
      memmove(s->buf, s->buf + s->off, s->held);
      s->off = 0;
    }
    if (!s->in_eof && !s->in_dry && s->off + s->held < s->cap) {
      size_t room = s->cap - s->off - s->held;
      ssize_t n = take_in(s);
      if (n > 0) {
        s->held += (size_t)n;
        moved = true;
        s->in_dry = (size_t)n < room && (size_t)n < RELAY_SMALL;
      } else if (n == 0) {
        s->in_eof = true;
      } else if (errno != EAGAIN && errno != EINTR) {
        return -1;
      }
    }
    if (s->held > 0) {
      ssize_t n = give_out(s);
      if (n > 0) {
        s->held -= (size_t)n;
        moved = true;
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        return -1;
      }
    }
    if (moved) continue;
    s->in_dry = false;
    if (s->held == 0 && s->buf) { /* idle: give the buffer back */
      buf_put(s->buf);
      s->buf = NULL;
      s->off = 0;
    }
    /* Here the output, if bytes are held, said EAGAIN: wait for it alone,
     * as every pump tries the input again anyway. Waiting for input too
     * would spin when a pipe is full by its slot count before its byte
     * size (EAGAIN with room left) while the input stays readable. With
     * nothing held, wait for input (not at EOF: that fd stays readable).
     * libevent skips the epoll_ctl when an event is already as wanted. */
    if (s->held > 0) {
      event_del(s->rev);
      event_add(s->wev, NULL);
    } else {
      event_del(s->wev);
      if (s->in_eof) {
        event_del(s->rev);
      } else {
        event_add(s->rev, NULL);
      }
    }
    return s->in_eof && s->held == 0 ? 1 : 0;
  }
}

static void fd_c2g(struct relay *r) {
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

static void fd_g2c(struct relay *r) {
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

static void fd_client_read(evutil_socket_t fd, short what, void *arg) { fd_c2g(arg); }
static void fd_guest_write(evutil_socket_t fd, short what, void *arg) { fd_c2g(arg); }
static void fd_guest_read(evutil_socket_t fd, short what, void *arg) { fd_g2c(arg); }
static void fd_client_write(evutil_socket_t fd, short what, void *arg) { fd_g2c(arg); }

/* ---- the handoff ----
 * With a Unix agent channel the client's TCP socket itself goes to silkd
 * (SCM_RIGHTS) after the 101, and silkd serves it like any connection:
 * sandboxd leaves the data path, so an RPC wakes only the client and
 * silkd. The carrier is one sendmsg on the fresh agent connection: the fd,
 * a marker byte 0x00 (never the start of a frame) and the pipelined bytes,
 * then SHUT_WR, which ends the pipelined bytes for silkd. sandboxd keeps a
 * duplicate of the socket and the carrier: silkd keeps its end of the
 * carrier until it is done with the client, so the carrier's EOF is the
 * "guest ended" of §4.21 (half-close, discard during the drain grace)
 * with no wakeup per RPC; a release or a shutdown shuts the socket down,
 * which ends silkd's copy too. */
#define HANDOFF_MAX (64 * 1024) /* pipelined bytes one carrier takes; silkd's cap */

static bool agent_is_unix(int fd) {
  int dom = 0;
  socklen_t len = sizeof dom;
  return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) == 0 && dom == AF_UNIX;
}

static void ho_drain_read(evutil_socket_t fd, short what, void *arg) {
  struct relay *r = arg;
  char buf[16384];
  ssize_t n;
  while ((n = recv(r->hfd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
  }
  if (n == 0 || (errno != EAGAIN && errno != EINTR)) relay_free(r);
}

static void ho_carrier_read(evutil_socket_t fd, short what, void *arg) {
  struct relay *r = arg;
  char b[64];
  ssize_t n = recv(r->carrier, b, sizeof b, MSG_DONTWAIT);
  if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) return; /* silkd sends nothing here */
  /* silkd is done with the client: from here on it is the relay's drain. */
  event_free(r->hev);
  shutdown(r->hfd, SHUT_WR);
  r->hev = event_new(r->d->base, r->hfd, EV_READ | EV_PERSIST, ho_drain_read, r);
  event_add(r->hev, NULL);
  struct timeval tv = {DRAIN_GRACE_S, 0};
  evtimer_add(r->timer, &tv);
  ho_drain_read(r->hfd, EV_READ, r);
}

/* 0: the connection went to silkd (or is gone); 1: use the fd relay, with
 * the first *head_sent bytes of the 101 already out. */
static int handoff(struct sbxd *d, sbx_lease *l, int cfd, int gfd, struct evbuffer *pipelined, size_t *head_sent) {
  ssize_t w = send(cfd, AGENT_101, sizeof AGENT_101 - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w < 0 && errno != EAGAIN && errno != EINTR) goto drop; /* the client is gone */
  *head_sent = w > 0 ? (size_t)w : 0;
  if (*head_sent != sizeof AGENT_101 - 1) return 1;
  static const char mark = 0;
  size_t n = evbuffer_get_length(pipelined);
  struct iovec iov[2] = {{(void *)&mark, 1}, {n ? evbuffer_pullup(pipelined, (ssize_t)n) : NULL, n}};
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(sizeof(int))];
  } u;
  memset(&u, 0, sizeof u);
  struct msghdr m = {.msg_iov = iov, .msg_iovlen = n ? 2 : 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
  struct cmsghdr *h = CMSG_FIRSTHDR(&m);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(h), &cfd, sizeof cfd);
  /* A fresh Unix socket takes 64 KiB in one skb: all or nothing. */
  ssize_t s = sendmsg(gfd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (s < 0) return 1;
  if ((size_t)s != n + 1) {
    sbx_warn("agent %s: handoff carrier cut short (%zd of %zu bytes)", l->id, s, n + 1);
    shutdown(cfd, SHUT_RDWR);
    goto drop;
  }
  shutdown(gfd, SHUT_WR);
  struct relay *r = relay_link(d, l);
  r->handoff = true;
  r->hfd = cfd;
  r->carrier = gfd;
  r->hev = event_new(d->base, gfd, EV_READ | EV_PERSIST, ho_carrier_read, r);
  r->timer = evtimer_new(d->base, drain_timeout, r);
  event_add(r->hev, NULL);
  return 0;
drop:
  close(cfd);
  close(gfd);
  return 0;
}

static bool relay_pipe(int cp[2], size_t pending) {
  if (pipe2(cp, O_CLOEXEC | O_NONBLOCK) < 0) return false;
  fcntl(cp[1], F_SETPIPE_SZ, RELAY_PIPE); /* a smaller pipe only means more splices */
  /* The pipelined bytes must fit in the client->guest pipe. */
  int cap = fcntl(cp[1], F_GETPIPE_SZ);
  if (cap < 0 || pending > (size_t)cap) {
    close(cp[0]), close(cp[1]);
    return false;
  }
  return true;
}

/* Take the connection over: hand it to silkd, else splice it; false
 * (nothing done) when neither can be done, so the caller uses
 * bufferevents. */
static bool agent_splice(struct sbxd *d, struct http_req *req, sbx_lease *l, int gfd) {
  if (getenv("SANDBOXD_NO_SPLICE")) return false;
  bool ho = d->cfg->relay_handoff && http_pending_len(req) <= HANDOFF_MAX && agent_is_unix(gfd);
  /* The handoff needs no pipe; its fallback makes one then (the pipelined
   * bytes, at most HANDOFF_MAX, fit any pipe). */
  int cp[2] = {-1, -1};
  if (!ho && !relay_pipe(cp, http_pending_len(req))) return false;
  /* http_detach dups the client fd and closes the connection if that
   * fails, with no answer. Out of descriptors, fall back to bufferevents
   * (which need none) instead: the dup gets the one held here. */
  int spare = fcntl(gfd, F_DUPFD_CLOEXEC, 0);
  if (spare < 0) {
    if (cp[0] >= 0) close(cp[0]), close(cp[1]);
    return false;
  }
  close(spare);
  struct evbuffer *pipelined = evbuffer_new();
  bool eof = false;
  int cfd = http_detach(req, pipelined, &eof);
  if (cfd < 0) {
    evbuffer_free(pipelined);
    if (cp[0] >= 0) close(cp[0]), close(cp[1]);
    close(gfd);
    return true; /* the client is gone: nothing more to do */
  }
  evutil_make_socket_nonblocking(cfd);
  size_t head_sent = 0;
  /* A client that already ended its stream gets the relay, which sends its
   * bytes and then closes the guest connection (§4.21). */
  if (ho && !eof && handoff(d, l, cfd, gfd, pipelined, &head_sent) == 0) {
    evbuffer_free(pipelined);
    return true;
  }
  if (cp[0] < 0 && !relay_pipe(cp, evbuffer_get_length(pipelined))) {
    evbuffer_free(pipelined);
    shutdown(cfd, SHUT_RDWR);
    close(cfd);
    close(gfd);
    return true;
  }
  int cap = fcntl(cp[1], F_GETPIPE_SZ);
  evutil_make_socket_nonblocking(gfd);
  int sb = RELAY_GUEST_SNDBUF; /* FORCE passes net.core.wmem_max (root); else capped there */
  if (setsockopt(gfd, SOL_SOCKET, SO_SNDBUFFORCE, &sb, sizeof sb) < 0)
    setsockopt(gfd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
  struct relay *r = relay_link(d, l);
  r->spliced = true;
  r->c2g = (struct sdir){.in = cfd, .out = gfd, .pipe = {cp[0], cp[1]}, .cap = (size_t)cap};
  r->g2c = (struct sdir){.in = gfd, .out = cfd, .pipe = {-1, -1}, .cap = RELAY_BUF};
  r->c2g.rev = event_new(d->base, cfd, EV_READ | EV_PERSIST, fd_client_read, r);
  r->c2g.wev = event_new(d->base, gfd, EV_WRITE | EV_PERSIST, fd_guest_write, r);
  r->g2c.rev = event_new(d->base, gfd, EV_READ | EV_PERSIST, fd_guest_read, r);
  r->g2c.wev = event_new(d->base, cfd, EV_WRITE | EV_PERSIST, fd_client_write, r);
  r->timer = evtimer_new(d->base, drain_timeout, r);
  r->g2c.buf = buf_get();
  memcpy(r->g2c.buf, AGENT_101 + head_sent, sizeof AGENT_101 - 1 - head_sent);
  r->g2c.held = sizeof AGENT_101 - 1 - head_sent;
  size_t n = evbuffer_get_length(pipelined);
  int rc = 0;
  for (size_t off = 0; rc == 0 && off < n;) {
    ssize_t w = write(cp[1], evbuffer_pullup(pipelined, (ssize_t)n) + off, n - off);
    if (w > 0) {
      off += (size_t)w;
      r->c2g.held += (size_t)w;
    } else {
      rc = -1;
    }
  }
  evbuffer_free(pipelined);
  if (rc < 0) {
    relay_free(r);
    return true;
  }
  /* Client EOF: its bytes still go first, then the relay ends. */
  r->c2g.in_eof = eof;
  fd_g2c(r);
  /* fd_g2c cannot free r before the guest said anything. */
  fd_c2g(r);
  return true;
}

/* The checks every upgrade shares, in the spec's order (bearer, Upgrade
 * token, the sandbox), then a connection to its agent. Answers the error
 * itself and returns NULL when any of them fails. */
static sbx_lease *upgrade_open(struct sbxd *d, struct http_req *req, const char *id, const char *proto, int *fd) {
  if (!upgrade_token(req, proto)) {
    upgrade_required(req, proto);
    return NULL;
  }
  sbx_lease *l = auth_sbx(d, req, id, false, "unknown sandbox");
  if (!l || lease_touch(d, req, l) < 0) return NULL; /* a hibernated sandbox wakes (§5.6) */
  sbx_error err;
  if (!l->inst || inst_connect(l->inst, fd, &err) < 0) {
    if (l->inst) sbx_warn("%s upgrade %s: %s", proto, l->id, err.msg);
    reply_error(req, 502, "guest agent unreachable");
    return NULL;
  }
  return l;
}

void h_agent(struct sbxd *d, struct http_req *req, const char *id) {
  if (!has_bearer(req)) {
    reply_error(req, 401, "missing bearer token");
    return;
  }
  int fd;
  sbx_lease *l = upgrade_open(d, req, id, "silkd", &fd);
  if (!l) return;
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
  evbuffer_add_printf(bufferevent_get_output(r->guest), "{\"v\":1,\"op\":\"port_forward\",\"port\":%ld}\n", pn);
}
