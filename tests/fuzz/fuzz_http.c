/* tests/fuzz/fuzz_http.c - libFuzzer target for sandboxd's HTTP/1.1 server:
 * request heads, bodies, keep-alive and pipelining, as a client's bytes.
 *
 * The input is what a client sends on one connection. The harness hands the
 * server one end of a socketpair (http_server_adopt, the listener's own
 * hand-over, so nothing listens), writes the input into the other end in
 * pieces, half-closes it, and runs the event loop until the server has
 * closed the connection. The handler answers every request at once (200
 * echoing the path and body length), taking the connection over for an
 * Upgrade as sandboxd's relay does. Checked: the server closes the connection in the
 * end, every request it hands the handler has a method, a path starting
 * with '/', at most HTTP_MAX_HEADERS headers and a body within
 * HTTP_BODY_MAX; and every byte the server writes is an HTTP/1.1 answer. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "fuzz_util.h"
#include "http.h"

static int requests;

static void handler(struct http_req *req, void *arg) {
  requests++;
  FUZZ_CHECK(req->method[0] != '\0', "empty method");
  FUZZ_CHECK(req->path && req->path[0] == '/', "path %s", req->path ? req->path : "(null)");
  FUZZ_CHECK(req->nheaders <= HTTP_MAX_HEADERS, "%zu headers", req->nheaders);
  FUZZ_CHECK(req->body_len <= HTTP_BODY_MAX, "body of %zu bytes", req->body_len);
  FUZZ_CHECK(req->body_len == 0 || req->body, "body length without a body");
  char qbuf[256];
  (void)http_query(req, "id", qbuf, sizeof qbuf);
  (void)http_pending_len(req);
  if (http_header(req, "Upgrade")) {
    bool eof = false;
    static const char head[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: silkd\r\nConnection: Upgrade\r\n\r\n";
    struct bufferevent *bev = http_upgrade(req, head, sizeof head - 1, &eof);
    if (bev) bufferevent_free(bev);
    return;
  }
  char body[128];
  int n = snprintf(body, sizeof body, "{\"path_len\":%zu,\"body_len\":%zu}", strlen(req->path), req->body_len);
  http_reply(req, 200, "application/json", body, (size_t)n, NULL);
}

/* The client's end: what the server answered, drained as it comes. */
typedef struct {
  size_t got;
  char first[16];
} client_side;

static void drain_client(int fd, client_side *cs) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      if (cs->got < sizeof cs->first) {
        size_t k = sizeof cs->first - cs->got < (size_t)n ? sizeof cs->first - cs->got : (size_t)n;
        memcpy(cs->first + cs->got, buf, k);
      }
      cs->got += (size_t)n;
      continue;
    }
    return; /* EAGAIN, or the server's EOF */
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* a socketpair holds a few hundred KiB: more would block the writer,
   * and the server caps a head at 64 KiB anyway */
  if (size > 200 * 1024) return 0;
  int sv[2];
  FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0, "socketpair: %s",
             strerror(errno));
  int one = 256 * 1024;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &one, sizeof one);
  struct event_base *base = event_base_new();
  struct http_server *srv = http_server_new(base, handler, NULL);
  FUZZ_CHECK(http_server_adopt(srv, sv[0]) == 0, "adopt failed");
  requests = 0;

  size_t off = 0;
  client_side cs = {0};
  bool shut = false;
  /* The bytes arrive in pieces, a loop turn apart, so heads and bodies are
   * also parsed as they trickle in; the piece size comes from the input's
   * last byte (1 to 512 bytes). */
  size_t piece = size ? 1 + (size_t)data[size - 1] * 7 % 512 : 1;
  /* Bounded: a server that never closes is a finding (libFuzzer's -timeout
   * would catch a spin, this catches a connection left open). */
  /* The client's EOF is not the end: after an error answer the server
   * half-closes and lingers until it sees the client's own EOF. */
  for (size_t turn = 0; turn < size + 10000; turn++) {
    if (off < size) {
      ssize_t w = write(sv[1], data + off, size - off < piece ? size - off : piece);
      if (w > 0) off += (size_t)w;
    }
    if (off == size && !shut) {
      shutdown(sv[1], SHUT_WR);
      shut = true;
    }
    event_base_loop(base, EVLOOP_NONBLOCK);
    drain_client(sv[1], &cs);
    if (http_server_conns(srv) == 0) {
      /* closed or taken over: the socket's last bytes are on their way */
      event_base_loop(base, EVLOOP_NONBLOCK);
      drain_client(sv[1], &cs);
      break;
    }
  }
  FUZZ_CHECK(http_server_conns(srv) == 0, "the server still holds the connection after %zu bytes and EOF", size);
  FUZZ_CHECK(cs.got == 0 || memcmp(cs.first, "HTTP/1.1 ", cs.got < 9 ? cs.got : 9) == 0,
             "the server wrote something that is not an HTTP/1.1 answer");
  http_server_free(srv);
  event_base_free(base);
  close(sv[1]);
  return 0;
}
