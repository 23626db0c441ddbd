/* relay_fd.c - the fd relay. Both ends are plain sockets, so the relay works on the fds, not on
 * bufferevents. Client -> guest moves TCP -> pipe -> Unix socket with
 * splice(2): no copy through user space. Guest -> client goes through a
 * user-space buffer instead (read, then send): splicing into TCP hands it
 * the pipe's page pieces as skb fragments, which cost more on both ends of
 * the loopback leg than the copy (bench/rpc, docs/performance.md). The 101
 * head and the pipelined bytes are put into the pipe and the buffer first,
 * so they go out ahead of everything else with no special case. */
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

char *buf_get(void) { return nspare > 0 ? spare_bufs[--nspare] : sbx_malloc(RELAY_BUF); }

void buf_put(char *b) {
  if (!b) return;
  if (nspare < RELAY_BUF_SPARE) {
    spare_bufs[nspare++] = b;
  } else {
    sbx_free(b);
  }
}

void bufs_free_spare(void) {
  while (nspare > 0) sbx_free(spare_bufs[--nspare]);
}

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

static void pipe_close(int cp[2]) {
  if (cp[0] >= 0) close(cp[0]), close(cp[1]);
}

/* http_detach dups the client fd and closes the connection if that fails,
 * with no answer. Out of descriptors, fall back to bufferevents (which need
 * none) instead: true when one is to spare for the dup. */
static bool fd_to_spare(int gfd) {
  int spare = fcntl(gfd, F_DUPFD_CLOEXEC, 0);
  if (spare < 0) return false;
  close(spare);
  return true;
}

/* The fd relay of a detached client: both directions and their events, on
 * the node's list; it owns cfd, gfd and the client->guest pipe from here. */
static struct relay *fd_relay_new(struct sbxd *d, sbx_lease *l, int cfd, int gfd, const int cp[2]) {
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
  return r;
}

/* What goes first: the rest of the 101 toward the client, the pipelined
 * bytes toward the guest. -1 when the pipe took less than all of them. */
static int fd_relay_prime(struct relay *r, size_t head_sent, struct evbuffer *pipelined) {
  r->g2c.buf = buf_get();
  memcpy(r->g2c.buf, AGENT_101 + head_sent, sizeof AGENT_101 - 1 - head_sent);
  r->g2c.held = sizeof AGENT_101 - 1 - head_sent;
  size_t n = evbuffer_get_length(pipelined);
  for (size_t off = 0; off < n;) {
    ssize_t w = write(r->c2g.pipe[1], evbuffer_pullup(pipelined, (ssize_t)n) + off, n - off);
    if (w <= 0) return -1;
    off += (size_t)w;
    r->c2g.held += (size_t)w;
  }
  return 0;
}

/* Run the fd relay of a detached client. */
static void fd_relay_start(struct sbxd *d, sbx_lease *l, int cfd, int gfd, const int cp[2], size_t head_sent,
                           struct evbuffer *pipelined, bool eof) {
  struct relay *r = fd_relay_new(d, l, cfd, gfd, cp);
  if (fd_relay_prime(r, head_sent, pipelined) < 0) {
    relay_free(r);
    return;
  }
  /* Client EOF: its bytes still go first, then the relay ends. */
  r->c2g.in_eof = eof;
  fd_g2c(r);
  /* fd_g2c cannot free r before the guest said anything. */
  fd_c2g(r);
}

/* The detached client: to silkd when the handoff is on and works, else to
 * the fd relay (closed when no pipe can be had). */
static void take_detached(struct sbxd *d, sbx_lease *l, int cfd, int gfd, int cp[2], struct evbuffer *pipelined,
                          bool eof, bool ho) {
  evutil_make_socket_nonblocking(cfd);
  size_t head_sent = 0;
  /* A client that already ended its stream gets the relay, which sends its
   * bytes and then closes the guest connection (§4.21). */
  if (ho && !eof && handoff(d, l, cfd, gfd, pipelined, &head_sent) == 0) return;
  if (cp[0] < 0 && !relay_pipe(cp, evbuffer_get_length(pipelined))) {
    shutdown(cfd, SHUT_RDWR);
    close(cfd);
    close(gfd);
    return;
  }
  fd_relay_start(d, l, cfd, gfd, cp, head_sent, pipelined, eof);
}

/* Take the connection over: hand it to silkd, else splice it; false
 * (nothing done) when neither can be done, so the caller uses
 * bufferevents. */
bool agent_splice(struct sbxd *d, struct http_req *req, sbx_lease *l, int gfd) {
  if (getenv("SANDBOXD_NO_SPLICE")) return false;
  bool ho = d->cfg->relay_handoff && http_pending_len(req) <= HANDOFF_MAX && agent_is_unix(gfd);
  /* The handoff needs no pipe; its fallback makes one then (the pipelined
   * bytes, at most HANDOFF_MAX, fit any pipe). */
  int cp[2] = {-1, -1};
  if (!ho && !relay_pipe(cp, http_pending_len(req))) return false;
  if (!fd_to_spare(gfd)) {
    pipe_close(cp);
    return false;
  }
  struct evbuffer *pipelined = evbuffer_new();
  bool eof = false;
  int cfd = http_detach(req, pipelined, &eof);
  if (cfd >= 0) {
    take_detached(d, l, cfd, gfd, cp, pipelined, eof, ho);
  } else { /* the client is gone: nothing more to do */
    pipe_close(cp);
    close(gfd);
  }
  evbuffer_free(pipelined);
  return true;
}
