/* relay_bev.c - the bufferevent relay of an agent upgrade: the fallback
 * when neither the handoff nor the fd relay can be had (no pipe, no
 * descriptor, SANDBOXD_NO_SPLICE), with backpressure (pace). */
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

void relay_bev_agent(struct sbxd *d, struct http_req *req, sbx_lease *l, int fd) {
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
