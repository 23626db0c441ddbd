/* http.h - the small HTTP/1.1 server of sandboxd.
 *
 * Our own on purpose, written on bufferevents rather than evhttp because
 * sandboxd needs three things libevent 2.1's evhttp makes awkward:
 * deadlines that cover only the request, not the answer (spec §3.1), taking a
 * connection over for an upgrade with the exact 101 bytes and the
 * pipelined bytes after the head (§4.21; the agent connection is handed to
 * silkd), and answers that arrive later from a worker (claims, exec).
 *
 * The parser (http_parse.c) works on byte buffers; the server (http.c)
 * reads sockets, bounds connections and deadlines, and answers. */
#ifndef SANDBOXD_HTTP_H
#define SANDBOXD_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include <sandbox/error.h>

#define HTTP_HEAD_MAX (64 * 1024)
#define HTTP_BODY_MAX (1024 * 1024)
#define HTTP_MAX_HEADERS 100

struct http_server;
struct http_conn;

struct http_header {
  char *name;
  char *value;
};

typedef void (*http_close_fn)(void *arg);

struct http_req {
  struct http_conn *conn;
  char method[16];
  char *path;  /* without the query */
  char *query; /* after '?', or NULL */
  struct http_header headers[HTTP_MAX_HEADERS];
  size_t nheaders;
  size_t content_length; /* what the head announced */
  char *body;
  size_t body_len;
  bool http10;
  bool keep_alive;
  bool replied;
  /* Called once if the client goes away before the answer (exec kills). */
  http_close_fn on_close;
  void *on_close_arg;
};

typedef void (*http_handler_fn)(struct http_req *req, void *arg);
/* Looks at a head whose body has not been read yet: true to read it, or
 * false once it has answered (the connection is then closed unread). */
typedef bool (*http_head_fn)(struct http_req *req, void *arg);

struct http_limits {
  /* Connections reading or waiting on a request at once; 0 derives it
   * from RLIMIT_NOFILE (http_default_max_conns). */
  size_t max_conns;
  int head_timeout_s; /* a started head must be complete within this */
  int body_timeout_s; /* and its body within this once the head is in */
};
#define HTTP_HEAD_TIMEOUT_S 5
#define HTTP_BODY_TIMEOUT_S 30
size_t http_default_max_conns(void);

struct http_server *http_server_new(struct event_base *base, http_handler_fn fn, void *arg);
/* Limits (a zero field keeps its default) and the head check, which is
 * called for every request that announces a body, before it is read. */
void http_server_configure(struct http_server *s, const struct http_limits *lim, http_head_fn head_fn);
/* Binds host:port (port 0 = any); returns the bound port or < 0. */
int http_server_listen(struct http_server *s, const char *host, int port, sbx_error *err);
/* Stop accepting; open connections are closed, pending requests answered
 * by nobody (their handlers are told through on_close). */
/* Serve the connected socket fd (non-blocking; the server owns it from now
 * on) as if accepted: how the listener hands a connection over, and how the
 * fuzz harness feeds the parser a socketpair without listening. 0, or -1
 * (fd closed). */
int http_server_adopt(struct http_server *s, evutil_socket_t fd);
void http_server_free(struct http_server *s);
size_t http_server_conns(const struct http_server *s);
/* Connections taken over by http_upgrade or http_detach whose Upgrade
 * header named proto ("silkd"; anything else counts as "tcp"). */
uint64_t http_server_upgrades(const struct http_server *s, const char *proto);
/* Requests answered with a status of class k (1 to 5: 1xx to 5xx); an
 * upgrade counts as 1xx. */
uint64_t http_server_answers(const struct http_server *s, int k);

const char *http_header(const struct http_req *req, const char *name);
/* Query parameter value (percent-decoded into buf), or NULL. */
const char *http_query(const struct http_req *req, const char *name, char *buf, size_t buflen);

/* Answer; safe to call after the client left (the answer is dropped).
 * extra_headers: "Name: value\r\n..." or NULL. */
void http_reply(struct http_req *req, int status, const char *ctype, const char *body, size_t len,
                const char *extra_headers);

/* Take the connection over: write head verbatim, stop all HTTP processing
 * and timeouts, and return the bufferevent (its input holds the bytes the
 * client pipelined after the request head; *eof says the client already
 * half-closed). The request is freed. NULL if the client is gone. */
struct bufferevent *http_upgrade(struct http_req *req, const char *head, size_t len, bool *eof);

/* Bytes the client sent after the request head, read so far. */
size_t http_pending_len(const struct http_req *req);
/* Like http_upgrade, but hand over a plain fd (O_CLOEXEC, the caller's to
 * close) and move the pipelined bytes into pipelined; nothing is written.
 * -1 if the client is gone. */
int http_detach(struct http_req *req, struct evbuffer *pipelined, bool *eof);

/* ---- http_parse.c: the parser on a byte buffer, no socket ---- */
/* One whole request (head and body) at the start of buf, as the server
 * reads it: the request (http_req_free) and *used, the bytes it took; or
 * NULL with *status 0 when more bytes are needed, else the status the
 * server answers before closing (400, 431). The entry point for fuzzing. */
struct http_req *http_parse(const char *buf, size_t len, size_t *used, int *status);
/* A complete head of len bytes (the request line through the blank line):
 * 0 and *out with content_length set, or the status with *why. */
int http_parse_head(const char *buf, size_t len, struct http_req **out, const char **why);
void http_req_free(struct http_req *r);
bool http_token_in_list(const char *list, const char *tok);

#endif
