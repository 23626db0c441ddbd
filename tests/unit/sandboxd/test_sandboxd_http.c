/* test_sandboxd_http: the HTTP/1.1 server of a real sandboxd against the
 * attacks it must refuse, byte for byte as an attacker sends them:
 * requests hidden behind a second Content-Length or behind
 * Transfer-Encoding, a token cut short by a NUL, a repeated Authorization,
 * control characters in a head, a body that never comes, and floods of
 * half-open connections against a daemon with 600 descriptors, after which
 * /healthz must still answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

#include <cmocka.h>
#include <jansson.h>

#include "sbxd_test.h"

#define ROOT "root-token-0123456789abcdef0123456789"

/* No pools: nothing here needs a sandbox. Short body deadline for the 408
 * test; the floods get their own daemon with long deadlines. */
static const char *CONFIG =
    "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\",\"api_token\":\"" ROOT "\","
    "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"body_timeout_seconds\":1}";

static struct sbxd_proc P;

static int setup(void **state) {
  sbxd_prepare(&P, CONFIG);
  return sbxd_start(&P);
}

/* A clean SIGTERM exit is part of every test (under ASan: no leaks). */
static int teardown(void **state) {
  int rc = sbxd_stop(&P, SIGTERM);
  sbxd_jail_cleanup(&P);
  if (rc != 0) fprintf(stderr, "sandboxd exited with %d\n", rc);
  return rc == 0 ? 0 : -1;
}

/* Send raw bytes, read until the server closes: the first answer's status,
 * and everything after its head in r->body (a second answer would be
 * there). The socket is shut for writing so a server waiting for more
 * bytes sees the end rather than hanging the test. */
static int raw(int port, const void *bytes, size_t len, struct http_resp *r) {
  int fd = sbxd_connect(port);
  assert_true(fd >= 0);
  assert_int_equal(write_all_fd(fd, bytes, len), 0);
  shutdown(fd, SHUT_WR);
  int rc = http_read_resp(fd, r);
  close(fd);
  return rc < 0 ? -1 : r->status;
}

#define RAW(bytes, r) raw(P.port, bytes, sizeof(bytes) - 1, r)

static bool draining(void) {
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "GET", "/v1/info", ROOT, NULL, &r), 0);
  assert_int_equal(r.status, 200);
  bool on = strstr(r.body, "\"draining\"") != NULL;
  http_resp_free(&r);
  return on;
}

/* The hidden request: it would cordon the node with the root token. */
#define HIDDEN "POST /v1/drain HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ROOT "\r\nContent-Length: 0\r\n\r\n"
#define HIDDEN_LEN "116"

/* Each refused with one 400 and the connection closed: the hidden request
 * is never answered, never executed. */
static void test_smuggled_requests(void **state) {
  static const char *const attacks[] = {
      /* two Content-Lengths, the first one 0: the body used to become the
       * next request */
      "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: " HIDDEN_LEN "\r\n\r\n" HIDDEN,
      "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: " HIDDEN_LEN "\r\nContent-Length: 0\r\n\r\n" HIDDEN,
      /* the same value twice is a repeat too */
      "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n" HIDDEN,
      /* a list, a sign, a space inside */
      "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0, " HIDDEN_LEN "\r\n\r\n" HIDDEN,
      "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: +0\r\n\r\n" HIDDEN,
      "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0 0\r\n\r\n" HIDDEN,
      /* Content-Length with Transfer-Encoding, in both orders */
      "POST /v1/claim HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" HIDDEN,
      "POST /v1/claim HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" HIDDEN,
      "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" HIDDEN,
  };
  assert_int_equal(strlen(HIDDEN), atoi(HIDDEN_LEN));
  for (size_t i = 0; i < sizeof attacks / sizeof *attacks; i++) {
    struct http_resp r;
    int st = raw(P.port, attacks[i], strlen(attacks[i]), &r);
    if (st != 400 || strstr(r.body, "HTTP/1.1")) fprintf(stderr, "attack %zu: %d %s\n", i, st, r.body);
    assert_int_equal(st, 400);
    assert_null(strstr(r.body, "HTTP/1.1"));
    http_resp_free(&r);
    assert_false(draining());
  }
  /* The same request sent on its own does cordon: the check above sees it. */
  struct http_resp r;
  assert_int_equal(RAW(HIDDEN, &r), 200);
  http_resp_free(&r);
  assert_true(draining());
}

/* A token cut by a NUL, two Authorization headers, control characters: 400,
 * never the root's 200. */
static void test_header_injection(void **state) {
  static const struct {
    const char *bytes;
    size_t len;
  } bad[] = {
#define B(s) {s, sizeof(s) - 1}
      B("GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ROOT "\0junk\r\n\r\n"),
      B("GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ROOT "\r\nAuthorization: Bearer junk\r\n\r\n"),
      B("GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer junk\r\nAuthorization: Bearer " ROOT "\r\n\r\n"),
      B("GET /v1/info HTTP/1.1\r\nHost: x\r\nauthorization: Bearer junk\r\nAUTHORIZATION: Bearer " ROOT "\r\n\r\n"),
      B("GET /v1/info HTTP/1.1\r\nHost: x\r\nHost: y\r\nAuthorization: Bearer " ROOT "\r\n\r\n"),
      /* control characters in a value: SOH, DEL, a lone CR, a lone LF */
      B("GET /v1/info HTTP/1.1\r\nHost: x\r\nX-A: a\x01z\r\nAuthorization: Bearer " ROOT "\r\n\r\n"),
      B("GET /v1/info HTTP/1.1\r\nHost: x\r\nX-A: a\x7fz\r\nAuthorization: Bearer " ROOT "\r\n\r\n"),
      B("GET /v1/info HTTP/1.1\r\nHost: x\r\nX-A: a\rAuthorization: Bearer junk\r\nAuthorization: Bearer " ROOT
        "\r\n\r\n"),
      B("GET /v1/info HTTP/1.1\r\nHost: x\r\nX-A: a\nAuthorization: Bearer " ROOT "\r\n\r\n"),
      /* in a name, in the request line, a folded line */
      B("GET /v1/info HTTP/1.1\r\nHost: x\r\nX\x01A: a\r\nAuthorization: Bearer " ROOT "\r\n\r\n"),
      B("GET /v1/info\0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ROOT "\r\n\r\n"),
      B("GET /v1/info\x01 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ROOT "\r\n\r\n"),
      B("GET /v1/info HTTP/1.1\nHost: x\r\nAuthorization: Bearer " ROOT "\r\n\r\n"),
      B("GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\n " ROOT "\r\n\r\n"),
      B("GET  /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ROOT "\r\n\r\n"),
#undef B
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    struct http_resp r;
    int st = raw(P.port, bad[i].bytes, bad[i].len, &r);
    if (st != 400) fprintf(stderr, "case %zu: %d %s\n", i, st, r.body);
    assert_int_equal(st, 400);
    http_resp_free(&r);
  }
  /* What the rules allow still works: HTAB and obs-text in a value. */
  struct http_resp r;
  assert_int_equal(RAW("GET /v1/info HTTP/1.1\r\nHost: x\r\nX-A: a\tb\xe2\x82\xac\r\nAuthorization: Bearer " ROOT
                       "\r\nConnection: close\r\n\r\n",
                       &r),
                   200);
  http_resp_free(&r);
}

/* Read one answer from fd, waiting at most a generous minute. */
static int read_answer(int fd, struct http_resp *r) {
  struct pollfd pf = {fd, POLLIN, 0};
  assert_int_equal(poll(&pf, 1, 60000), 1);
  return http_read_resp(fd, r) < 0 ? -1 : r->status;
}

/* A head that announces a body, and the body never (or half) sent. */
static int pending_body(int port, const char *method, const char *path, const char *token, const char *part) {
  int fd = sbxd_connect(port);
  if (fd < 0) return -1;
  char head[512];
  int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\n%s%s%sContent-Length: 100\r\n\r\n%s", method, path,
                   token ? "Authorization: Bearer " : "", token ? token : "", token ? "\r\n" : "", part);
  if (write_all_fd(fd, head, (size_t)n) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* A caller without a valid token is answered at the head, before its
 * body; an authorised body that does not come gets 408. */
static void test_head_auth_and_body_deadline(void **state) {
  static const struct {
    const char *method, *path, *token;
    int status;
    const char *text;
  } early[] = {
      {"POST", "/v1/claim", NULL, 401, "missing bearer token"},
      {"POST", "/v1/claim", "junk", 401, "invalid api token"},
      {"PUT", "/v1/pools", NULL, 401, "missing bearer token"},
      {"POST", "/v1/drain", "junk", 401, "invalid api token"},
      {"DELETE", "/v1/drain", NULL, 401, "missing bearer token"},
      {"POST", "/v1/sandboxes/sb_00000000000000ff/exec", NULL, 401, "missing bearer token"},
      {"POST", "/v1/sandboxes/sb_00000000000000ff/exec", "junk", 404, "unknown sandbox"},
      {"POST", "/v1/sandboxes/sb_00000000000000ff/release", "junk", 404, "unknown sandbox"},
      {"POST", "/v1/sandboxes/sb_00000000000000ff/renew", ROOT, 404, "unknown sandbox"},
  };
  for (size_t i = 0; i < sizeof early / sizeof *early; i++) {
    int fd = pending_body(P.port, early[i].method, early[i].path, early[i].token, "");
    assert_true(fd >= 0);
    struct http_resp r;
    assert_int_equal(read_answer(fd, &r), early[i].status); /* read to EOF: closed */
    assert_non_null(strstr(r.body, early[i].text));
    assert_non_null(strstr(r.head, "Connection: close\r\n"));
    http_resp_free(&r);
    close(fd);
  }
  int fd = pending_body(P.port, "POST", "/v1/claim", ROOT, "{\"template\":");
  assert_true(fd >= 0);
  struct http_resp r;
  assert_int_equal(read_answer(fd, &r), 408);
  assert_non_null(strstr(r.body, "request body timeout"));
  http_resp_free(&r);
  close(fd);
  /* The node still answers, and a whole claim body is still read. */
  assert_int_equal(sbxd_status(P.port, "GET", "/healthz", NULL, NULL), 200);
  assert_int_equal(sbxd_status(P.port, "POST", "/v1/claim", ROOT, "{\"template\":\"host\",\"size\":\"huge\"}"), 400);
}

static void raise_own_nofile(void) {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
}

/* Start a daemon whose RLIMIT_NOFILE (soft and hard) is nofile. */
static void start_limited(struct sbxd_proc *p, const char *config, rlim_t nofile) {
  sbxd_prepare(p, config);
  p->nofile = nofile;
  assert_int_equal(sbxd_start(p), 0);
}

enum { FLOOD = 500 };

/* Connections the server has closed (EOF or reset, seen within 10 s). */
static int closed_by_server(const int *fds, int n) {
  int closed = 0;
  for (int i = 0; i < n; i++) {
    struct pollfd pf = {fds[i], POLLIN, 0};
    if (poll(&pf, 1, closed ? 0 : 10000) != 1) continue;
    char buf[512];
    ssize_t r;
    while ((r = recv(fds[i], buf, sizeof buf, MSG_DONTWAIT)) > 0) {
    }
    if (r == 0 || (r < 0 && errno != EAGAIN)) closed++;
  }
  return closed;
}

static void close_all(int *fds, int n) {
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
}

static void healthz_ok(const struct sbxd_proc *p) {
  struct http_resp r;
  assert_int_equal(sbxd_http(p->port, "GET", "/healthz", NULL, NULL, &r), 0);
  assert_int_equal(r.status, 200);
  http_resp_free(&r);
}

/* The attack of the issue: 500 connections that promise a body without a
 * token, against 600 descriptors; then 500 that promise one with a token
 * and 500 heads that never end, both held by the server until evicted. */
static void test_flood_leaves_healthz(void **state) {
  raise_own_nofile();
  struct sbxd_proc q;
  start_limited(&q,
                "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\",\"api_token\":\"" ROOT
                "\",\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"head_timeout_seconds\":600,"
                "\"body_timeout_seconds\":600}",
                600);
  static int fds[FLOOD];
  for (int i = 0; i < FLOOD; i++) assert_true((fds[i] = pending_body(q.port, "POST", "/v1/claim", NULL, "")) >= 0);
  healthz_ok(&q);
  /* Each was answered 401 at its head, or closed to make room. */
  int answered = 0;
  for (int i = 0; i < FLOOD; i++) {
    struct http_resp r;
    int st = http_read_resp(fds[i], &r) < 0 ? -1 : r.status;
    if (st != 401) assert_int_equal(st, -1);
    answered += st == 401;
    if (st != -1) http_resp_free(&r);
  }
  fprintf(stderr, "flood without a token: %d of %d answered 401, the rest closed\n", answered, FLOOD);
  close_all(fds, FLOOD);

  for (int i = 0; i < FLOOD; i++) assert_true((fds[i] = pending_body(q.port, "POST", "/v1/claim", ROOT, "{")) >= 0);
  healthz_ok(&q);
  /* More than the bound (derived from 600) wait: the oldest made room. */
  assert_true(closed_by_server(fds, FLOOD) > 0);
  close_all(fds, FLOOD);

  for (int i = 0; i < FLOOD; i++) {
    assert_true((fds[i] = sbxd_connect(q.port)) >= 0);
    assert_int_equal(write_all_fd(fds[i], "GET /healthz HTTP/1.1\r\nHost: x\r\n", 32), 0);
  }
  healthz_ok(&q);
  assert_true(closed_by_server(fds, FLOOD) > 0);
  close_all(fds, FLOOD);
  healthz_ok(&q);
  assert_int_equal(sbxd_stop(&q, SIGTERM), 0);
  sbxd_jail_cleanup(&q);
}

/* max_connections set above what the descriptors allow: accept() meets
 * EMFILE, and the descriptor kept in reserve answers each new connection
 * 503 rather than leaving it in the backlog or spinning; once the flood
 * is gone /healthz is 200 again. */
static void test_emfile_sheds(void **state) {
  raise_own_nofile();
  struct sbxd_proc q;
  start_limited(&q,
                "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\",\"api_token\":\"" ROOT
                "\",\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"head_timeout_seconds\":600,"
                "\"max_connections\":5000}",
                600);
  enum { N = 700 };
  static int fds[N];
  for (int i = 0; i < N; i++) {
    assert_true((fds[i] = sbxd_connect(q.port)) >= 0);
    assert_int_equal(write_all_fd(fds[i], "GET /healthz HTTP/1.1\r\nHost: x\r\n", 32), 0);
  }
  struct http_resp r;
  assert_int_equal(sbxd_http(q.port, "GET", "/healthz", NULL, NULL, &r), 0);
  assert_int_equal(r.status, 503);
  assert_non_null(strstr(r.body, "too many connections"));
  http_resp_free(&r);
  close_all(fds, N);
  /* The daemon frees the flood's descriptors as it sees them close. */
  for (int i = 0;; i++) {
    int st = sbxd_status(q.port, "GET", "/healthz", NULL, NULL);
    if (st == 200) break;
    assert_int_equal(st, 503);
    assert_true(i < 600);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(sbxd_stop(&q, SIGTERM), 0);
  sbxd_jail_cleanup(&q);
}

/* The three keys are checked like every other: wrong type or range stops
 * the load naming the key. */
static void test_config_keys(void **state) {
  static const struct {
    const char *key, *value;
    int rc;
  } cases[] = {
      {"max_connections", "0", 0},         {"max_connections", "100000", 0}, {"head_timeout_seconds", "1", 0},
      {"body_timeout_seconds", "1", 0},    {"max_connections", "-1", 2},     {"max_connections", "\"64\"", 2},
      {"head_timeout_seconds", "0", 2},    {"body_timeout_seconds", "0", 2}, {"body_timeout_seconds", "1.5", 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char cfg[512], out[4096];
    snprintf(cfg, sizeof cfg, "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"%s\":%s}", cases[i].key,
             cases[i].value);
    assert_int_equal(sbxd_check_config(cfg, out, sizeof out), cases[i].rc);
    if (cases[i].rc) assert_non_null(strstr(out, cases[i].key));
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_smuggled_requests, setup, teardown),
      cmocka_unit_test_setup_teardown(test_header_injection, setup, teardown),
      cmocka_unit_test_setup_teardown(test_head_auth_and_body_deadline, setup, teardown),
      cmocka_unit_test(test_flood_leaves_healthz),
      cmocka_unit_test(test_emfile_sheds),
      cmocka_unit_test(test_config_keys),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
