/* relay_handoff.c - the handoff.
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

bool agent_is_unix(int fd) {
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

int handoff(struct sbxd *d, sbx_lease *l, int cfd, int gfd, struct evbuffer *pipelined, size_t *head_sent) {
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
