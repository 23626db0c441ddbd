/* The client against scripted HTTP nodes on free ports: the §9.2 claim
 * redirect algorithm (candidates in order, no_redirect/require_promoted on
 * the retry, a second redirect is an error, the transient fallback to the
 * entry), API errors with status and text, the agent upgrade (only 101
 * succeeds; bytes after the 101 head belong to the stream), lookup through
 * peers, and that a token is replayed to every node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/ssl.h>

#include <sandbox/client.h>

#define MAX_REQS 32

typedef struct node node;
/* Writes the whole answer for one request to fd. */
typedef void (*handler)(node *n, int fd, const char *method, const char *path, const char *body);

struct node {
  int lfd;
  int port;
  pthread_t th;
  handler h;
  pthread_mutex_t lock;
  int nreq;
  char paths[MAX_REQS][16 + 128]; /* method, space, path */
  char bodies[MAX_REQS][512];
  char auth[MAX_REQS][128];
  const char *answer; /* JSON for simple handlers */
  int status;
};

static void send_str(int fd, const char *s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static void reply(int fd, int status, const char *json) {
  char head[256];
  snprintf(head, sizeof head,
           "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
           status, strlen(json));
  send_str(fd, head);
  send_str(fd, json);
}

static void *serve(void *arg) {
  node *n = arg;
  for (;;) {
    int fd = accept(n->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    char buf[8192];
    size_t got = 0;
    char *end = NULL;
    while (!end && got < sizeof buf - 1) {
      ssize_t r = recv(fd, buf + got, sizeof buf - 1 - got, 0);
      if (r <= 0) break;
      got += (size_t)r;
      buf[got] = 0;
      end = strstr(buf, "\r\n\r\n");
    }
    if (!end) {
      close(fd);
      continue;
    }
    size_t hlen = (size_t)(end - buf) + 4;
    const char *cl = strcasestr(buf, "Content-Length:");
    size_t blen = cl && cl < end ? (size_t)atoi(cl + 15) : 0;
    while (got < hlen + blen && got < sizeof buf - 1) {
      ssize_t r = recv(fd, buf + got, sizeof buf - 1 - got, 0);
      if (r <= 0) break;
      got += (size_t)r;
    }
    buf[got] = 0;
    char method[16] = {0}, path[128] = {0};
    sscanf(buf, "%15s %127s", method, path);
    const char *auth = strcasestr(buf, "Authorization: Bearer ");
    pthread_mutex_lock(&n->lock);
    int i = n->nreq < MAX_REQS ? n->nreq++ : MAX_REQS - 1;
    snprintf(n->paths[i], sizeof n->paths[i], "%s %s", method, path);
    snprintf(n->bodies[i], sizeof n->bodies[i], "%s", buf + hlen);
    n->auth[i][0] = 0;
    if (auth && auth < end) sscanf(auth + 22, "%127[^\r]", n->auth[i]);
    pthread_mutex_unlock(&n->lock);
    n->h(n, fd, method, path, buf + hlen);
    shutdown(fd, SHUT_WR);
    char sink[256];
    while (recv(fd, sink, sizeof sink, 0) > 0) {
    }
    close(fd);
  }
}

static void node_start(node *n, handler h) {
  memset(n, 0, sizeof *n);
  pthread_mutex_init(&n->lock, NULL);
  n->h = h;
  n->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(n->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t sl = sizeof sa;
  getsockname(n->lfd, (struct sockaddr *)&sa, &sl);
  n->port = ntohs(sa.sin_port);
  assert_int_equal(listen(n->lfd, 16), 0);
  pthread_create(&n->th, NULL, serve, n);
}

static void node_stop(node *n) {
  shutdown(n->lfd, SHUT_RDWR);
  close(n->lfd);
  pthread_join(n->th, NULL);
  pthread_mutex_destroy(&n->lock);
}

static void canned(node *n, int fd, const char *m, const char *p, const char *b) { reply(fd, n->status, n->answer); }

/* ---- claim redirects ---- */
static node entry, cand_a, cand_b;

static void entry_redirects(node *n, int fd, const char *m, const char *p, const char *b) {
  char json[256];
  if (strstr(b, "\"no_redirect\":true")) { /* the §9.2 step 4 fallback */
    reply(fd, 200, "{\"id\":\"sb_00000000000000e0\",\"token\":\"0123456789abcdef0123456789abcdef\"}");
    return;
  }
  snprintf(json, sizeof json, "{\"redirect\":[\"127.0.0.1:%d\",\"http://127.0.0.1:%d\"],\"require_promoted\":true}",
           cand_a.port, cand_b.port);
  reply(fd, 200, json);
}

static void test_claim_follows_redirect(void **state) {
  (void)state;
  node_start(&cand_a, canned);
  cand_a.status = 429;
  cand_a.answer = "{\"error\":\"node at capacity\"}";
  node_start(&cand_b, canned);
  cand_b.status = 200;
  cand_b.answer = "{\"id\":\"sb_00000000000000b0\",\"token\":\"0123456789abcdef0123456789abcdef\","
                  "\"deadline\":\"2026-01-01T00:00:00Z\",\"owner_addr\":\"\"}";
  node_start(&entry, entry_redirects);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", entry.port);
  sbx_client_opts o = SBX_CLIENT_OPTS_INIT(.addr = addr, .token = "node-token");
  sbx_client *c;
  sbx_sandbox *s;
  sbx_error err;
  assert_int_equal(sbx_client_new(&o, &c, &err), 0);
  sbx_claim_opts co = SBX_CLAIM_OPTS_INIT(.template_ = "host", .ttl_seconds = 60);
  if (sbx_client_claim(c, &co, &s, &err) < 0) fail_msg("claim: %s", err.msg);
  assert_string_equal(sbx_sandbox_id(s), "sb_00000000000000b0");
  char want[64];
  snprintf(want, sizeof want, "http://127.0.0.1:%d", cand_b.port); /* empty owner_addr: who answered */
  assert_string_equal(sbx_sandbox_owner(s), want);
  assert_string_equal(sbx_sandbox_deadline(s), "2026-01-01T00:00:00Z");
  sbx_sandbox_free(s);
  assert_int_equal(entry.nreq, 1);
  assert_null(strstr(entry.bodies[0], "no_redirect"));
  assert_int_equal(cand_a.nreq, 1);
  assert_int_equal(cand_b.nreq, 1);
  /* the retry body: original fields, no_redirect and the echoed flag */
  assert_non_null(strstr(cand_a.bodies[0], "\"no_redirect\":true"));
  assert_non_null(strstr(cand_a.bodies[0], "\"require_promoted\":true"));
  assert_non_null(strstr(cand_a.bodies[0], "\"ttl_seconds\":60"));
  /* the token that authorized the first call is replayed everywhere */
  assert_string_equal(entry.auth[0], "node-token");
  assert_string_equal(cand_a.auth[0], "node-token");
  assert_string_equal(cand_b.auth[0], "node-token");

  /* every candidate fails transiently (429, then a redirect = error, but
   * the last error is what counts) -> one retry at the entry */
  cand_b.status = 503;
  cand_b.answer = "{\"error\":\"busy\"}";
  if (sbx_client_claim(c, &co, &s, &err) < 0) fail_msg("claim: %s", err.msg);
  assert_string_equal(sbx_sandbox_id(s), "sb_00000000000000e0");
  assert_int_equal(entry.nreq, 3);
  assert_non_null(strstr(entry.bodies[2], "\"no_redirect\":true"));
  sbx_sandbox_free(s);

  /* a non-transient last error (400) is returned as the API error */
  cand_b.status = 400;
  cand_b.answer = "{\"error\":\"invalid size\"}";
  assert_int_equal(sbx_client_claim(c, &co, &s, &err), SBX_E_REMOTE);
  assert_int_equal(sbx_client_error_kind(&err), SBX_CLIENT_ERR_API);
  assert_int_equal(err.detail, 400);
  assert_non_null(strstr(err.msg, "invalid size"));
  assert_int_equal(entry.nreq, 4); /* no fallback this time */

  /* a redirect from a candidate is an error ("unexpected redirect") */
  cand_b.status = 200;
  cand_b.answer = "{\"redirect\":[\"127.0.0.1:1\"]}";
  cand_a.status = 200;
  cand_a.answer = "{\"redirect\":[\"127.0.0.1:1\"]}";
  assert_true(sbx_client_claim(c, &co, &s, &err) < 0);
  assert_non_null(strstr(err.msg, "unexpected redirect"));

  sbx_client_free(c);
  node_stop(&entry);
  node_stop(&cand_a);
  node_stop(&cand_b);
}

/* ---- errors, release 404, lookup through peers ---- */
static node peer;
static void entry_misc(node *n, int fd, const char *m, const char *p, const char *b) {
  char json[128];
  if (strstr(p, "/release")) {
    reply(fd, 404, "{\"error\":\"unknown sandbox\"}");
  } else if (strstr(p, "/hibernate")) {
    reply(fd, 501, "{\"error\":\"hibernate is not implemented on this node yet\"}");
  } else if (strstr(p, "/owner")) {
    reply(fd, 404, "{\"error\":\"not owned here\"}");
  } else if (strcmp(p, "/v1/peers") == 0) {
    snprintf(json, sizeof json, "{\"peers\":[\"127.0.0.1:1\",\"127.0.0.1:%d\"]}", peer.port);
    reply(fd, 200, json);
  } else {
    reply(fd, 500, "not json at all");
  }
}

static void test_errors_and_lookup(void **state) {
  (void)state;
  node_start(&peer, canned);
  peer.status = 200;
  peer.answer = "{\"owner_addr\":\"http://10.9.8.7:7777\"}";
  node_start(&entry, entry_misc);
  char addr[64];
  snprintf(addr, sizeof addr, "http://127.0.0.1:%d", entry.port);
  sbx_client_opts o = SBX_CLIENT_OPTS_INIT(.addr = addr, .token = "node-token");
  sbx_client *c;
  sbx_sandbox *s;
  sbx_error err;
  assert_int_equal(sbx_client_new(&o, &c, &err), 0);
  assert_int_equal(sbx_client_attach(c, "sb_0000000000000001", "tok", NULL, &s, &err), 0);
  assert_int_equal(sbx_sandbox_release(s, &err), 0); /* 404 counts as released */
  assert_int_equal(sbx_sandbox_hibernate(s, &err), SBX_E_REMOTE);
  assert_int_equal(err.detail, 501);
  assert_non_null(strstr(err.msg, "not implemented"));
  sbx_node_info ni;
  assert_int_equal(sbx_client_info(c, &ni, &err), SBX_E_REMOTE);
  assert_int_equal(err.detail, 500);
  assert_non_null(strstr(err.msg, "not json at all"));
  sbx_sandbox_free(s);
  /* lookup: not at the entry, found at the second peer (the first is dead) */
  assert_int_equal(sbx_client_lookup(c, "sb_0000000000000002", "sbx-token", &s, &err), 0);
  assert_string_equal(sbx_sandbox_owner(s), "http://10.9.8.7:7777");
  assert_string_equal(peer.auth[0], "sbx-token");
  sbx_sandbox_free(s);
  sbx_client_free(c);
  node_stop(&entry);
  node_stop(&peer);
}

/* ---- the agent upgrade ---- */
static const char *upgrade_mode;
static void agent_node(node *n, int fd, const char *m, const char *p, const char *b) {
  if (strcmp(upgrade_mode, "refuse") == 0) {
    reply(fd, 404, "{\"error\":\"unknown sandbox\"}");
    return;
  }
  /* 101 and, in the same write, the answers to the pipelined info and to
   * the stat that follows: all of it must reach the agent */
  char buf[4096];
  snprintf(buf, sizeof buf,
           "HTTP/1.1 101 Switching Protocols\r\nUpgrade: silkd\r\nConnection: Upgrade\r\n\r\n"
           "{\"type\":\"info\",\"version\":\"mock\",\"proto\":2,\"uptime_secs\":1,\"procs\":0,\"sessions\":0}\n"
           "{\"type\":\"stat\",\"info\":{\"kind\":\"file\",\"size\":5,\"mode\":420,\"mtime_epoch_secs\":1}}\n");
  send_str(fd, buf);
}

static void test_agent_upgrade(void **state) {
  (void)state;
  node_start(&entry, agent_node);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", entry.port);
  sbx_client_opts o = SBX_CLIENT_OPTS_INIT(.addr = addr);
  sbx_client *c;
  sbx_sandbox *s;
  sbx_error err;
  assert_int_equal(sbx_client_new(&o, &c, &err), 0);
  assert_int_equal(sbx_client_attach(c, "sb_0000000000000003", "sbx-token", NULL, &s, &err), 0);
  upgrade_mode = "refuse";
  sbx_wire_file_info fi;
  assert_int_equal(sbx_sandbox_stat(s, "/x", &fi, &err), SBX_E_REMOTE);
  assert_int_equal(sbx_client_error_kind(&err), SBX_CLIENT_ERR_API);
  assert_int_equal(err.detail, 404);
  assert_non_null(strstr(err.msg, "unknown sandbox"));
  upgrade_mode = "ok";
  if (sbx_sandbox_stat(s, "/x", &fi, &err) < 0) fail_msg("stat: %s", err.msg);
  assert_int_equal(fi.size, 5);
  assert_int_equal(fi.mode, 0644);
  /* the request head as §9.5 writes it */
  assert_string_equal(entry.paths[1], "GET /v1/sandboxes/sb_0000000000000003/agent");
  assert_string_equal(entry.auth[1], "sbx-token");
  sbx_sandbox_free(s);
  sbx_client_free(c);
  node_stop(&entry);
}

/* ---- https: the control plane through libcurl, the upgrade through
 * OpenSSL with ALPN http/1.1 only ---- */
typedef struct tls_node {
  int lfd, port;
  pthread_t th;
  SSL_CTX *ctx;
  char alpn_offered[64];
  int handshakes;
} tls_node;

static int alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in, unsigned inlen,
                   void *arg) {
  tls_node *t = arg;
  size_t n = inlen < sizeof t->alpn_offered - 1 ? inlen : sizeof t->alpn_offered - 1;
  memcpy(t->alpn_offered, in, n);
  t->alpn_offered[n] = 0;
  for (unsigned i = 0; i + 1 < inlen; i += 1 + in[i]) {
    if (in[i] == 8 && i + 9 <= inlen && memcmp(in + i + 1, "http/1.1", 8) == 0) {
      *out = in + i + 1;
      *outlen = 8;
      return SSL_TLSEXT_ERR_OK;
    }
  }
  return SSL_TLSEXT_ERR_NOACK;
}

static void ssl_send(SSL *ssl, const char *s) { SSL_write(ssl, s, (int)strlen(s)); }

static void *tls_serve(void *arg) {
  tls_node *t = arg;
  for (;;) {
    int fd = accept(t->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    SSL *ssl = SSL_new(t->ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) == 1) {
      t->handshakes++;
      char buf[8192];
      size_t got = 0;
      while (got < sizeof buf - 1) {
        int r = SSL_read(ssl, buf + got, (int)(sizeof buf - 1 - got));
        if (r <= 0) break;
        got += (size_t)r;
        buf[got] = 0;
        if (strstr(buf, "\r\n\r\n")) break;
      }
      if (strstr(buf, "/agent HTTP/1.1")) {
        ssl_send(ssl, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: silkd\r\nConnection: Upgrade\r\n\r\n"
                      "{\"type\":\"info\",\"version\":\"tls\",\"proto\":2,\"uptime_secs\":1,\"procs\":0,\"sessions\":0}\n"
                      "{\"type\":\"stat\",\"info\":{\"kind\":\"dir\",\"size\":7,\"mode\":493,\"mtime_epoch_secs\":1}}\n");
        while (SSL_read(ssl, buf, sizeof buf) > 0) {
        }
      } else {
        const char *body = "{\"pools\":[],\"claimed\":7,\"hibernated\":0,\"archived\":0}";
        char head[200];
        snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                 strlen(body));
        ssl_send(ssl, head);
        ssl_send(ssl, body);
      }
      SSL_shutdown(ssl);
    }
    SSL_free(ssl);
    close(fd);
  }
}

static void test_https(void **state) {
  (void)state;
  char dir[] = "/tmp/sbx-client-tls-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char cmd[1024], cert[128], key[128];
  snprintf(cert, sizeof cert, "%s/cert.pem", dir);
  snprintf(key, sizeof key, "%s/key.pem", dir);
  snprintf(cmd, sizeof cmd,
           "openssl req -x509 -newkey rsa:2048 -nodes -keyout %s -out %s -days 2 -subj /CN=localhost "
           "-addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
           key, cert);
  if (system(cmd) != 0) fail_msg("openssl req failed");
  tls_node t = {0};
  t.ctx = SSL_CTX_new(TLS_server_method());
  assert_int_equal(SSL_CTX_use_certificate_file(t.ctx, cert, SSL_FILETYPE_PEM), 1);
  assert_int_equal(SSL_CTX_use_PrivateKey_file(t.ctx, key, SSL_FILETYPE_PEM), 1);
  SSL_CTX_set_alpn_select_cb(t.ctx, alpn_cb, &t);
  t.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(t.lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t sl = sizeof sa;
  getsockname(t.lfd, (struct sockaddr *)&sa, &sl);
  t.port = ntohs(sa.sin_port);
  assert_int_equal(listen(t.lfd, 16), 0);
  pthread_create(&t.th, NULL, tls_serve, &t);

  char addr[64];
  snprintf(addr, sizeof addr, "https://127.0.0.1:%d", t.port);
  sbx_client_opts o = SBX_CLIENT_OPTS_INIT(.addr = addr, .tls_ca_file = cert);
  sbx_client *c;
  sbx_sandbox *s;
  sbx_error err;
  assert_int_equal(sbx_client_new(&o, &c, &err), 0);
  sbx_node_info ni;
  if (sbx_client_info(c, &ni, &err) < 0) fail_msg("info over https: %s", err.msg);
  assert_int_equal(ni.claimed, 7);
  sbx_node_info_free(&ni);
  assert_int_equal(sbx_client_attach(c, "sb_0000000000000004", "tok", NULL, &s, &err), 0);
  sbx_wire_file_info fi;
  if (sbx_sandbox_stat(s, "/", &fi, &err) < 0) fail_msg("stat over https: %s", err.msg);
  assert_int_equal(fi.kind, SBX_FILE_DIR);
  assert_int_equal(fi.size, 7);
  /* the data plane offered exactly http/1.1 */
  assert_string_equal(t.alpn_offered, "\x08http/1.1");
  sbx_sandbox_free(s);
  sbx_client_free(c);

  /* without the CA the certificate is refused, on both planes */
  sbx_client_opts o2 = SBX_CLIENT_OPTS_INIT(.addr = addr);
  assert_int_equal(sbx_client_new(&o2, &c, &err), 0);
  assert_true(sbx_client_info(c, &ni, &err) < 0);
  assert_int_equal(sbx_client_attach(c, "sb_0000000000000004", "tok", NULL, &s, &err), 0);
  assert_int_equal(sbx_sandbox_stat(s, "/", &fi, &err), SBX_E_AUTH);
  sbx_sandbox_free(s);
  sbx_client_free(c);

  shutdown(t.lfd, SHUT_RDWR);
  close(t.lfd);
  pthread_join(t.th, NULL);
  SSL_CTX_free(t.ctx);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_claim_follows_redirect),
      cmocka_unit_test(test_errors_and_lookup),
      cmocka_unit_test(test_agent_upgrade),
      cmocka_unit_test(test_https),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
