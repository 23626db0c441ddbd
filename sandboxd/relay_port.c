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
