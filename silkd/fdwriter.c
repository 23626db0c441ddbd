/* fdwriter.c - queue bytes for a non-blocking pipe or socket (child stdin,
 * pty master, forwarded socket, tar worker pipe). The owner bounds the queue
 * by watching fdwriter_pending and pausing its own input.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "silkd.h"

struct fdwriter {
  int fd;
  struct event *ev;
  struct evbuffer *q;
  fdwriter_cb cb;
  void *arg;
  bool failed;
  bool close_when_done;
  bool shutdown_only; /* sockets: SHUT_WR instead of close */
  bool closed;
};

static void fdw_close(struct fdwriter *w) {
  if (w->closed) return;
  w->closed = true;
  event_del(w->ev);
  if (w->shutdown_only) shutdown(w->fd, SHUT_WR);
  else close(w->fd);
}

static void fdw_flush(struct fdwriter *w) {
  while (!w->failed && !w->closed && evbuffer_get_length(w->q) > 0) {
    int n = evbuffer_write(w->q, w->fd);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      event_add(w->ev, NULL);
      return;
    }
    /* EPIPE and friends: discard everything from now on (§5.2). */
    w->failed = true;
    evbuffer_drain(w->q, evbuffer_get_length(w->q));
  }
  if (w->close_when_done && evbuffer_get_length(w->q) == 0) fdw_close(w);
}

static void on_writable(evutil_socket_t fd, short what, void *arg) {
  struct fdwriter *w = arg;
  fdw_flush(w);
  if (evbuffer_get_length(w->q) == 0 && w->cb) w->cb(w->arg, w->failed ? EPIPE : 0);
}

struct fdwriter *fdwriter_new(int fd, fdwriter_cb cb, void *arg) {
  struct fdwriter *w = sbx_calloc(1, sizeof *w);
  w->fd = fd;
  set_nonblock(fd);
  w->ev = event_new(silkd.base, fd, EV_WRITE, on_writable, w);
  w->q = evbuffer_new();
  w->cb = cb;
  w->arg = arg;
  return w;
}

size_t fdwriter_write(struct fdwriter *w, const void *p, size_t n) {
  if (w->failed || w->closed || w->close_when_done) return 0;
  /* Nothing queued: write straight from the caller's bytes and queue only
   * what the fd refused, instead of copying everything through the queue. */
  if (evbuffer_get_length(w->q) == 0) {
    const uint8_t *s = p;
    while (n > 0) {
      ssize_t k = write(w->fd, s, n);
      if (k > 0) {
        s += k;
        n -= (size_t)k;
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      w->failed = true; /* EPIPE and friends: discard from now on (§5.2) */
      return 0;
    }
    p = s;
  }
  if (n > 0) {
    evbuffer_add(w->q, p, n);
    fdw_flush(w);
  }
  return evbuffer_get_length(w->q);
}

size_t fdwriter_pending(const struct fdwriter *w) { return evbuffer_get_length(w->q); }
bool fdwriter_failed(const struct fdwriter *w) { return w->failed; }
void fdwriter_set_shutdown(struct fdwriter *w) { w->shutdown_only = true; }

void fdwriter_close_when_done(struct fdwriter *w) {
  w->close_when_done = true;
  fdw_flush(w);
}

void fdwriter_free(struct fdwriter *w) {
  if (!w) return;
  event_del(w->ev);
  /* A shutdown-only writer shares its socket with a reader that closes it. */
  if (!w->closed && !w->shutdown_only) close(w->fd);
  event_free(w->ev);
  evbuffer_free(w->q);
  sbx_free(w);
}
