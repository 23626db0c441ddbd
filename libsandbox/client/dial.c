/* The data plane: a raw HTTP/1.1 upgrade to the owner node (§9.5), never
 * through libcurl so nothing can negotiate HTTP/2, and the per-handle set
 * of parked proto-2 connections (§2.7 of the wire spec). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "client/client_priv.h"

#define HEAD_CAP (16 * 1024)
#define ERR_BODY_CAP (64 * 1024)

static int wait_fd(int fd, short ev, uint64_t deadline_ns, sbx_error *err) {
  for (;;) {
    uint64_t now = sbx_now_ns();
    if (now >= deadline_ns) return sbx_err(err, SBX_E_TIMEOUT, "dial: timed out");
    struct pollfd p = {fd, ev, 0};
    int r = poll(&p, 1, (int)((deadline_ns - now) / 1000000 + 1));
    if (r > 0) return 0;
    if (r < 0 && errno != EINTR) return sbx_err_os(err, errno, "dial: poll");
  }
}

static int connect_addr(const sbx_addr *a, int timeout_ms, int *out, sbx_error *err) {
  uint64_t deadline = sbx_now_ns() + (uint64_t)timeout_ms * 1000000;
  if (strcmp(a->scheme, "unix") == 0) {
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    if (strlen(a->host) >= sizeof sun.sun_path) return sbx_err(err, SBX_E_INVAL, "dial: socket path too long");
    strcpy(sun.sun_path, a->host);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return sbx_err_os(err, errno, "dial: socket");
    if (connect(fd, (struct sockaddr *)&sun, sizeof sun) < 0) {
      int e = errno;
      close(fd);
      return sbx_err_os(err, e, "dial %s", a->host);
    }
    *out = fd;
    return 0;
  }
  char port[8];
  snprintf(port, sizeof port, "%u", a->port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC}, *res = NULL;
  int g = getaddrinfo(a->host, port, &hints, &res);
  if (g != 0) return sbx_err(err, SBX_E_OS, "dial %s: %s", a->host, gai_strerror(g));
  int rc = SBX_E_OS;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      rc = sbx_err_os(err, errno, "dial: socket");
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
      rc = sbx_err_os(err, errno, "dial %s:%s", a->host, port);
      close(fd);
      continue;
    }
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if ((rc = wait_fd(fd, POLLOUT, deadline, err)) < 0 ||
        (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr != 0)) {
      if (rc == 0) rc = sbx_err_os(err, soerr, "dial %s:%s", a->host, port);
      close(fd);
      continue;
    }
    /* blocking again: sbx_agent polls before reading */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *out = fd;
    rc = 0;
    break;
  }
  freeaddrinfo(res);
  return rc;
}

static int send_all(int fd, const char *p, size_t n, sbx_error *err) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return sbx_err_os(err, errno, "dial: write");
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Read the answer to the upgrade request: the head, and for a non-101 its
 * body (Content-Length bounded, or up to EOF) to make the API error. */
int dial_read_upgrade(int fd, const char *verb, int timeout_ms, sbx_buf *pending, sbx_error *err) {
  uint64_t deadline = sbx_now_ns() + (uint64_t)timeout_ms * 1000000;
  sbx_buf in = SBX_BUF_INIT(HEAD_CAP + ERR_BODY_CAP);
  int rc;
  char *end = NULL;
  while (!end) {
    char *w;
    if ((rc = sbx_buf_reserve(&in, 4096, &w, err)) < 0) goto out;
    if ((rc = wait_fd(fd, POLLIN, deadline, err)) < 0) goto out;
    ssize_t n = recv(fd, w, 4096, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = sbx_err_os(err, errno, "%s: read", verb);
      goto out;
    }
    if (n == 0) {
      rc = sbx_err(err, SBX_E_PROTO, "%s: connection closed before the response head", verb);
      goto out;
    }
    sbx_buf_commit(&in, (size_t)n);
    end = memmem(in.ptr, in.len, "\r\n\r\n", 4);
    if (!end && in.len > HEAD_CAP) {
      rc = sbx_err(err, SBX_E_PROTO, "%s: response head over %d bytes", verb, HEAD_CAP);
      goto out;
    }
  }
  size_t head_len = (size_t)(end - in.ptr) + 4;
  int status = 0;
  if (sscanf(in.ptr, "HTTP/1.%*1[01] %3d", &status) != 1) {
    rc = sbx_err(err, SBX_E_PROTO, "%s: not an HTTP/1.1 response", verb);
    goto out;
  }
  if (status == 101) {
    rc = sbx_buf_add(pending, in.ptr + head_len, in.len - head_len, err);
    goto out;
  }
  /* an API error: collect the JSON body */
  long clen = -1;
  for (char *p = in.ptr; p < in.ptr + head_len;) {
    char *nl = memmem(p, (size_t)(in.ptr + head_len - p), "\r\n", 2);
    if (!nl) break;
    if (nl - p > 15 && strncasecmp(p, "Content-Length:", 15) == 0) clen = strtol(p + 15, NULL, 10);
    p = nl + 2;
  }
  if (clen > ERR_BODY_CAP) clen = ERR_BODY_CAP;
  while (clen < 0 || in.len - head_len < (size_t)clen) {
    char *w;
    if (sbx_buf_reserve(&in, 4096, &w, err) < 0 || wait_fd(fd, POLLIN, deadline, err) < 0) break;
    ssize_t n = recv(fd, w, 4096, 0);
    if (n <= 0) break;
    sbx_buf_commit(&in, (size_t)n);
  }
  if (in.ptr) {
    size_t blen = in.len - head_len;
    if (clen >= 0 && blen > (size_t)clen) blen = (size_t)clen;
    rc = http_api_error(err, verb, status, in.ptr + head_len, blen);
  } else {
    rc = http_api_error(err, verb, status, NULL, 0);
  }
out:
  sbx_buf_free(&in);
  return rc;
}

int dial_upgrade(sbx_sandbox *s, uint16_t port, const void *pipeline, size_t pipeline_len, int *out,
                 sbx_buf *pending, sbx_error *err) {
  sbx_client *c = s->client;
  int fd = -1;
  int rc = connect_addr(&s->owner, c->connect_timeout_ms, &fd, err);
  if (rc < 0) return rc;
  if (strcmp(s->owner.scheme, "https") == 0 &&
      (rc = tls_wrap(c, fd, s->owner.host, c->connect_timeout_ms, &fd, err)) < 0)
    return rc;
  if (strcmp(s->owner.scheme, "unix") == 0) { /* a local silkd: no HTTP in between */
    if (port) {
      close(fd);
      return sbx_err(err, SBX_E_UNSUPPORTED, "dial_port: not through a unix: address");
    }
    if (pipeline_len && (rc = send_all(fd, pipeline, pipeline_len, err)) < 0) {
      close(fd);
      return rc;
    }
    *out = fd;
    return 0;
  }
  char path[64];
  if (port) {
    snprintf(path, sizeof path, "ports/%u", port);
  } else {
    snprintf(path, sizeof path, "agent");
  }
  bool v6 = strchr(s->owner.host, ':') != NULL;
  sbx_buf req = SBX_BUF_INIT(HEAD_CAP + SBX_WIRE_FRAME_CAP);
  rc = sbx_buf_printf(&req, err,
                      "GET /v1/sandboxes/%s/%s HTTP/1.1\r\nHost: %s%s%s:%u\r\nConnection: Upgrade\r\n"
                      "Upgrade: %s\r\nAuthorization: Bearer %s\r\n\r\n",
                      s->id, path, v6 ? "[" : "", s->owner.host, v6 ? "]" : "", s->owner.port, port ? "tcp" : "silkd",
                      s->token);
  if (rc == 0 && pipeline_len) rc = sbx_buf_add(&req, pipeline, pipeline_len, err);
  if (rc == 0) rc = send_all(fd, req.ptr, req.len, err);
  sbx_buf_free(&req);
  if (rc == 0) rc = dial_read_upgrade(fd, port ? "dial_port" : "agent", c->connect_timeout_ms + c->request_timeout_ms,
                                 pending, err);
  if (rc < 0) {
    close(fd);
    return rc;
  }
  *out = fd;
  return 0;
}

/* Dial and learn the protocol version on the handle's first connection by
 * pipelining `info` behind the request head (§9.5). */
static int dial_agent(sbx_sandbox *s, bool want_info, sbx_agent **out, sbx_error *err) {
  sbx_buf info = SBX_BUF_INIT(4096);
  sbx_buf pending = SBX_BUF_INIT(AGENT_PENDING_CAP);
  int fd = -1, rc = 0;
  if (want_info) {
    sbx_wire_req r = {.op = SBX_OP_INFO};
    rc = sbx_wire_encode_req(&info, &r, err);
  }
  if (rc == 0) rc = dial_upgrade(s, 0, info.ptr, info.len, &fd, &pending, err);
  if (rc == 0) rc = sbx_agent_open_prefixed(fd, pending.ptr, pending.len, out, err);
  sbx_buf_free(&pending);
  sbx_buf_free(&info);
  if (rc < 0) return rc;
  if (s->client->agent_timeout_ms > 0) sbx_agent_set_timeout(*out, s->client->agent_timeout_ms);
  pthread_mutex_lock(&s->lock);
  s->dials++;
  pthread_mutex_unlock(&s->lock);
  if (want_info) {
    sbx_wire_resp resp;
    if ((rc = sbx_agent_recv(*out, &resp, err)) < 0) goto fail;
    int proto = 1;
    if (resp.type == SBX_RESP_INFO) {
      proto = resp.u.info.proto >= 2 ? (int)resp.u.info.proto : 1;
    } else if (resp.type != SBX_RESP_ERROR) { /* an old daemon may refuse info: then it is proto 1 */
      sbx_wire_resp_free(&resp);
      rc = sbx_err(err, SBX_E_PROTO, "agent: unexpected %s frame for info", sbx_wire_type_name(resp.type));
      goto fail;
    }
    sbx_wire_resp_free(&resp);
    pthread_mutex_lock(&s->lock);
    s->proto = proto;
    pthread_mutex_unlock(&s->lock);
    if (proto < 2) { /* a proto-1 daemon served its one RPC: this connection is spent */
      sbx_agent_close(*out);
      return dial_agent(s, false, out, err);
    }
  }
  return 0;
fail:
  sbx_agent_close(*out);
  *out = NULL;
  return rc;
}

/* A parked connection is alive when a non-blocking peek finds nothing: a 0
 * means the peer closed it, any byte means it is out of sync. */
static bool parked_alive(sbx_agent *a) {
  char c;
  ssize_t n = recv(sbx_agent_fd(a), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

int conn_get(sbx_sandbox *s, sbx_agent **out, sbx_error *err) {
  uint64_t now = sbx_now_ns();
  pthread_mutex_lock(&s->lock);
  bool first = s->proto == 0;
  while (s->nparked > 0) {
    parked p = s->park[--s->nparked]; /* most recent first: the likeliest alive */
    if (now - p.since_ns <= CLIENT_PARK_IDLE_NS && parked_alive(p.agent)) {
      pthread_mutex_unlock(&s->lock);
      *out = p.agent;
      return 0;
    }
    sbx_agent_close(p.agent);
  }
  pthread_mutex_unlock(&s->lock);
  return dial_agent(s, first, out, err);
}

int conn_dial(sbx_sandbox *s, sbx_agent **out, sbx_error *err) { return dial_agent(s, false, out, err); }

void conn_put(sbx_sandbox *s, sbx_agent *a) {
  if (!a) return;
  uint64_t now = sbx_now_ns();
  pthread_mutex_lock(&s->lock);
  /* expire the stale ones while here, so idle sockets do not pile up */
  size_t k = 0;
  for (size_t i = 0; i < s->nparked; i++) {
    if (now - s->park[i].since_ns > CLIENT_PARK_IDLE_NS) {
      sbx_agent_close(s->park[i].agent);
    } else {
      s->park[k++] = s->park[i];
    }
  }
  s->nparked = k;
  if (s->proto >= 2 && sbx_agent_idle(a) && s->nparked < CLIENT_PARK_MAX) {
    s->park[s->nparked++] = (parked){a, now};
    a = NULL;
  }
  pthread_mutex_unlock(&s->lock);
  sbx_agent_close(a);
}

void conn_drop_all(sbx_sandbox *s) {
  pthread_mutex_lock(&s->lock);
  for (size_t i = 0; i < s->nparked; i++) sbx_agent_close(s->park[i].agent);
  s->nparked = 0;
  pthread_mutex_unlock(&s->lock);
}
