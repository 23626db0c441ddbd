/* relay.h - what the relay's parts share (relay*.c): the relay object,
 * its life on the node's list and the constants of every mechanism.
 *   relay.c          the list: create, link, free, close, pacing
 *   relay_upgrade.c  the checks every upgrade shares, and h_agent
 *   relay_handoff.c  the client socket handed to silkd
 *   relay_fd.c       the fd relay (splice one way, a buffer the other)
 *   relay_bev.c      the bufferevent relay (the fallback)
 *   relay_port.c     the port relay through port_forward frames */
#ifndef SANDBOXD_RELAY_H
#define SANDBOXD_RELAY_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "sandboxd.h"

#define RELAY_HIGH (1024 * 1024)
#define DRAIN_GRACE_S 30
/* libevent reads and writes at most 4 KiB per call by default; bulk silkd
 * frames are 43-350 KB, so relays move bigger slices per syscall. */
#define RELAY_IO (256 * 1024)

#define HANDOFF_MAX (64 * 1024) /* pipelined bytes one carrier takes; silkd's cap */

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

/* relay.c */
void relay_io_size(struct bufferevent *bev);
void relay_free(struct relay *r);
/* A blank relay of the lease's sandbox, on the node's list: it holds the
 * lease until relay_free. */
struct relay *relay_link(struct sbxd *d, sbx_lease *l);
struct relay *relay_new(struct sbxd *d, sbx_lease *l, int fd, bool framed);
/* Read from src only while dst has room. */
void pace(struct bufferevent *src, struct bufferevent *dst);
void drain_timeout(evutil_socket_t fd, short what, void *arg);

/* relay_upgrade.c: the checks every upgrade shares, then a connection to
 * the sandbox's agent; NULL (answered) when one fails. */
sbx_lease *upgrade_open(struct sbxd *d, struct http_req *req, const char *id, const char *proto, int *fd);

/* relay_fd.c */
char *buf_get(void);
void buf_put(char *b);
void bufs_free_spare(void);
/* Take the connection over: hand it to silkd, else splice it; false
 * (nothing done) when neither can be done. */
bool agent_splice(struct sbxd *d, struct http_req *req, sbx_lease *l, int gfd);

/* relay_handoff.c */
bool agent_is_unix(int fd);
/* 0: the connection went to silkd (or is gone); 1: use the fd relay, with
 * the first *head_sent bytes of the 101 already out. */
int handoff(struct sbxd *d, sbx_lease *l, int cfd, int gfd, struct evbuffer *pipelined, size_t *head_sent);

/* relay_bev.c: relay an agent upgrade through bufferevents. */
void relay_bev_agent(struct sbxd *d, struct http_req *req, sbx_lease *l, int fd);

#endif
