/* relay.c - upgraded connections: a byte relay to silkd (spec §4.21) and
 * a framed relay to a guest TCP port through port_forward (§4.22); this
 * file keeps them on the node's list.
 *
 * The silkd relay normally works on the raw fds (splice one way, a reused
 * buffer the other: relay_fd.c); the port relay (relay_port.c), and the
 * silkd relay when no pipe or descriptor can be had (relay_bev.c), use
 * bufferevents with backpressure: a side stops reading while the other
 * side has more than RELAY_HIGH bytes queued. When the agent channel is a
 * Unix socket the client's socket is handed to silkd instead
 * (relay_handoff.c). Every relay and handoff is on d->relays so a release
 * or a shutdown can force-close it. */
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

void relay_io_size(struct bufferevent *bev) {
  bufferevent_set_max_single_read(bev, RELAY_IO);
  bufferevent_set_max_single_write(bev, RELAY_IO);
}

void relay_free(struct relay *r) {
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

struct relay *relay_link(struct sbxd *d, sbx_lease *l) {
  struct relay *r = sbx_calloc(1, sizeof *r);
  r->d = d;
  snprintf(r->id, sizeof r->id, "%s", l->id);
  r->next = d->relays;
  if (d->relays) d->relays->prev = r;
  d->relays = r;
  l->holds++;
  return r;
}

struct relay *relay_new(struct sbxd *d, sbx_lease *l, int fd, bool framed) {
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

void pace(struct bufferevent *src, struct bufferevent *dst) {
  if (!src || !dst) return;
  if (evbuffer_get_length(bufferevent_get_output(dst)) > RELAY_HIGH) bufferevent_disable(src, EV_READ);
  else bufferevent_enable(src, EV_READ);
}

void drain_timeout(evutil_socket_t fd, short what, void *arg) { relay_free(arg); }
