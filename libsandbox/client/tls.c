/* TLS for the data plane (§9.5): the upgrade to an https:// owner runs
 * over OpenSSL with ALPN forced to http/1.1, so no front proxy can move it
 * to HTTP/2. The agent speaks plain bytes on a file descriptor, so the TLS
 * stream is bridged to one end of a socketpair by a small thread that owns
 * the SSL object (OpenSSL objects must not be used from two threads); the
 * caller gets the other end. Closing that end ends the bridge, and the
 * bridge closing it is what a parked connection's MSG_PEEK check sees. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "client/client_priv.h"

#define BRIDGE_BUF (64 * 1024)

static int ssl_fail(sbx_error *err, const char *what) {
  char buf[256] = "unknown TLS error";
  unsigned long e = ERR_get_error();
  if (e) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return sbx_err(err, SBX_E_OS, "%s: %s", what, buf);
}

static SSL_CTX *client_ctx(sbx_client *c, sbx_error *err) {
  pthread_mutex_lock(&c->lock);
  SSL_CTX *ctx = c->ssl_ctx;
  if (!ctx) {
    ctx = SSL_CTX_new(TLS_client_method());
    if (ctx) {
      SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
      static const unsigned char alpn[] = "\x08http/1.1";
      SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn - 1);
      SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
      if (c->tls_insecure) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
      } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        int ok = c->tls_ca_file ? SSL_CTX_load_verify_locations(ctx, c->tls_ca_file, NULL)
                                : SSL_CTX_set_default_verify_paths(ctx);
        if (!ok) {
          SSL_CTX_free(ctx);
          ctx = NULL;
        }
      }
      c->ssl_ctx = ctx;
    }
  }
  pthread_mutex_unlock(&c->lock);
  if (!ctx) ssl_fail(err, "tls: context");
  return ctx;
}

void tls_client_free(sbx_client *c) {
  if (c->ssl_ctx) SSL_CTX_free(c->ssl_ctx);
  c->ssl_ctx = NULL;
}

typedef struct bridge {
  SSL *ssl;
  int net, local;
} bridge;

/* Moves bytes both ways until either side ends. Non-blocking throughout,
 * so a peer that stops reading in one direction never stalls the other. */
static void *bridge_run(void *arg) {
  bridge *b = arg;
  char *in = sbx_malloc(BRIDGE_BUF), *out = sbx_malloc(BRIDGE_BUF);
  size_t in_len = 0, in_off = 0, out_len = 0;
  bool read_wants_write = false, write_wants_read = false, local_eof = false;
  for (;;) {
    /* TLS -> local */
    if (in_len == 0) {
      int n = SSL_read(b->ssl, in, BRIDGE_BUF);
      read_wants_write = false;
      if (n > 0) {
        in_len = (size_t)n;
        in_off = 0;
      } else {
        int e = SSL_get_error(b->ssl, n);
        if (e == SSL_ERROR_WANT_WRITE) {
          read_wants_write = true;
        } else if (e != SSL_ERROR_WANT_READ) {
          break; /* close_notify, reset or error: the stream is over */
        }
      }
    }
    while (in_len > 0) {
      ssize_t w = send(b->local, in + in_off, in_len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EAGAIN) break;
      if (w < 0) goto done;
      in_off += (size_t)w;
      in_len -= (size_t)w;
    }
    /* local -> TLS */
    if (out_len == 0 && !local_eof) {
      ssize_t r = recv(b->local, out, BRIDGE_BUF, MSG_DONTWAIT);
      if (r == 0) local_eof = true;
      if (r > 0) out_len = (size_t)r;
      if (r < 0 && errno != EAGAIN && errno != EINTR) break;
    }
    if (out_len > 0) {
      int n = SSL_write(b->ssl, out, (int)out_len);
      write_wants_read = false;
      if (n > 0) {
        memmove(out, out + n, out_len - (size_t)n);
        out_len -= (size_t)n;
      } else {
        int e = SSL_get_error(b->ssl, n);
        if (e == SSL_ERROR_WANT_READ) {
          write_wants_read = true;
        } else if (e != SSL_ERROR_WANT_WRITE) {
          break;
        }
      }
    }
    if (local_eof && out_len == 0) break; /* the caller closed its end */
    if (SSL_pending(b->ssl) > 0 && in_len == 0) continue;
    short net_ev = 0;
    if (in_len == 0 || write_wants_read) net_ev |= POLLIN;
    if (out_len > 0 || read_wants_write) net_ev |= POLLOUT;
    short local_ev = 0;
    if (out_len == 0 && !local_eof) local_ev |= POLLIN;
    if (in_len > 0) local_ev |= POLLOUT;
    struct pollfd pf[2] = {{b->net, net_ev, 0}, {b->local, local_ev, 0}};
    if (poll(pf, 2, -1) < 0 && errno != EINTR) break;
    if ((pf[0].revents & (POLLERR | POLLNVAL)) || (pf[1].revents & (POLLERR | POLLNVAL))) break;
  }
done:
  SSL_shutdown(b->ssl); /* best effort close_notify */
  SSL_free(b->ssl);
  close(b->net);
  close(b->local);
  sbx_free(in);
  sbx_free(out);
  sbx_free(b);
  return NULL;
}

int tls_wrap(sbx_client *c, int fd, const char *host, int timeout_ms, int *out, sbx_error *err) {
  SSL_CTX *ctx = client_ctx(c, err);
  if (!ctx) {
    close(fd);
    return SBX_E_OS;
  }
  SSL *ssl = SSL_new(ctx);
  int rc = 0;
  struct in6_addr ip;
  bool is_ip = inet_pton(AF_INET, host, &ip) == 1 || inet_pton(AF_INET6, host, &ip) == 1;
  if (!ssl || !SSL_set_fd(ssl, fd)) {
    rc = ssl_fail(err, "tls: setup");
    goto fail;
  }
  if (!is_ip) SSL_set_tlsext_host_name(ssl, host);
  if (!c->tls_insecure) {
    int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) : SSL_set1_host(ssl, host);
    if (!ok) {
      rc = ssl_fail(err, "tls: peer name");
      goto fail;
    }
  }
  /* the handshake runs blocking, bounded by the connect timeout */
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000}, zero = {0, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (SSL_connect(ssl) != 1) {
    long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK) {
      rc = sbx_err(err, SBX_E_AUTH, "tls %s: certificate: %s", host, X509_verify_cert_error_string(v));
    } else {
      rc = ssl_fail(err, "tls: handshake");
    }
    goto fail;
  }
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &zero, sizeof zero);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &zero, sizeof zero);
  const unsigned char *proto = NULL;
  unsigned plen = 0;
  SSL_get0_alpn_selected(ssl, &proto, &plen);
  if (plen && (plen != 8 || memcmp(proto, "http/1.1", 8) != 0)) {
    rc = sbx_err(err, SBX_E_PROTO, "tls %s: server chose ALPN %.*s, not http/1.1", host, (int)plen, proto);
    goto fail;
  }
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
    rc = sbx_err_os(err, errno, "tls: socketpair");
    goto fail;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  bridge *b = sbx_calloc(1, sizeof *b);
  *b = (bridge){ssl, fd, sp[1]};
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int e = pthread_create(&th, &attr, bridge_run, b);
  pthread_attr_destroy(&attr);
  if (e != 0) {
    sbx_free(b);
    close(sp[0]);
    close(sp[1]);
    rc = sbx_err_os(err, e, "tls: thread");
    goto fail;
  }
  *out = sp[0];
  return 0;
fail:
  if (ssl) SSL_free(ssl);
  close(fd);
  return rc;
}
