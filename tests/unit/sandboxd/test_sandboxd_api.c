/* test_sandboxd_api: a real sandboxd over HTTP with the real jail driver
 * and silkd (root): config validation, routes, the auth matrices, claim
 * validation and errors, the body cap, caps and claim storms, head
 * timeouts and keep-alive. Node state (pools, drain, metrics, reaping,
 * recovery, reload) is in test_sandboxd_node.c. Keys differ by size where a
 * test needs several ("host" is the template every node has). A daemon that
 * cannot start its driver fails the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "sbxd_test.h"

#include "sbxd_api_fixture.h"

static void test_version_and_bad_configs(void **state) {
  char out[4096];
  const char *v[] = {"--version", NULL};
  assert_int_equal(sbxd_run_once(v, out, sizeof out), 0);
  assert_non_null(strstr(out, "sandboxd "));

  static const struct {
    const char *json, *needle;
  } bad[] = {
      {"{\"listen\":\"127.0.0.1:0\",\"bogus\":1}", "bogus"},
      {"{\"bridge\":\"br0\"}", "bridge"},
      {"{\"max_claims\":-1}", "max_claims"},
      {"{\"max_claims\":1.5}", "max_claims"},
      {"{\"listen\":\"nonsense\"}", "listen"},
      {"{\"tenants\":[{\"name\":\"a\",\"token\":\"t\"}]}", "api_token"},
      {"{\"api_token\":\"r\",\"tenants\":[{\"name\":\"a\",\"token\":\"t\"},{\"name\":\"a\",\"token\":\"u\"}]}",
       "duplicate"},
      {"{\"pools\":[{\"template\":\"host\",\"size\":\"huge\"}]}", "size"},
      {"{\"pools\":[{\"template\":\"host\",\"warm\":4,\"warm_max\":2}]}", "warm_max"},
      {"{\"pools\":[{\"template\":\"host\",\"colour\":\"red\"}]}", "colour"},
      {"{\"pools\":[{\"template\":\"host\"},{\"template\":\"host\"}]}", "duplicate"},
      /* The builder runs argv[0] without a PATH search. */
      {"{\"pools\":[{\"template\":\"host\",\"warmup\":[\"sh\",\"-c\",\"true\"]}]}",
       "pools[0].warmup[0]: must be an absolute path"},
      {"{\"driver\":\"xen\"}", "driver"},
      {"{\"reserve_claim_cpu\":1}", "reserve_claim_cpu"},
      {"{\"relay_handoff\":\"yes\"}", "relay_handoff"},
      {"{\"listen\":\"127.0.0.1:0\"} trailing", "line"},
      {"{\"a\":1,\"a\":2}", "duplicate"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(sbxd_check_config(bad[i].json, out, sizeof out), 2);
    if (!strstr(out, bad[i].needle)) fprintf(stderr, "config %s: no \"%s\" in: %s\n", bad[i].json, bad[i].needle, out);
    assert_non_null(strstr(out, bad[i].needle));
  }
  const char *missing[] = {"--config", "/nonexistent/sandboxd.json", NULL};
  assert_int_equal(sbxd_run_once(missing, out, sizeof out), 2);
}

/* No listen binds loopback; open mode (no api_token) off loopback is
 * refused unless allow_open_mode says so, and then warned about. */
static void test_listen_and_open_mode(void **state) {
  char out[4096];
  static const struct {
    const char *json;
    int rc;
    const char *needle;
  } cases[] = {
      {"{}", 0, "listen 127.0.0.1:7777, open mode"},
      {"{\"api_token\":\"t\"}", 0, "listen 127.0.0.1:7777, token mode"},
      {"{\"listen\":\"[::1]:7000\"}", 0, "listen [::1]:7000, open mode"},
      {"{\"listen\":\"0.0.0.0:7777\"}", 2, "set api_token, listen on 127.0.0.1, or set allow_open_mode: true"},
      {"{\"listen\":\":7777\"}", 2, "open mode (no api_token) on every address"},
      {"{\"listen\":\"10.1.2.3:7777\"}", 2, "open mode (no api_token) on 10.1.2.3"},
      {"{\"listen\":\"0.0.0.0:7777\",\"api_token\":\"t\"}", 0, "listen 0.0.0.0:7777, token mode"},
      {"{\"listen\":\"0.0.0.0:7777\",\"allow_open_mode\":true}", 0, "open mode on every address (allow_open_mode)"},
      {"{\"allow_open_mode\":\"yes\"}", 2, "allow_open_mode: must be true or false"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    assert_int_equal(sbxd_check_config(cases[i].json, out, sizeof out), cases[i].rc);
    if (!strstr(out, cases[i].needle)) fprintf(stderr, "config %s: no \"%s\" in: %s\n", cases[i].json, cases[i].needle, out);
    assert_non_null(strstr(out, cases[i].needle));
  }
  /* The token-less loopback default says nothing; allowed open mode warns. */
  assert_int_equal(sbxd_check_config("{}", out, sizeof out), 0);
  assert_null(strstr(out, "allow_open_mode"));
  /* A daemon refused at start, and one allowed, warning in its log. */
  struct sbxd_proc q;
  sbxd_prepare(&q, "{\"listen\":\"0.0.0.0:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\",\"pools\":[]}");
  const char *args[] = {"--config", q.config, NULL};
  assert_int_equal(sbxd_run_once(args, out, sizeof out), 2);
  assert_non_null(strstr(out, "allow_open_mode"));
  sbxd_write_config(&q, "{\"listen\":\"0.0.0.0:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                        "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"allow_open_mode\":true,\"pools\":[]}");
  assert_int_equal(sbxd_start(&q), 0);
  assert_int_equal(sbxd_status(q.port, "GET", "/v1/info", NULL, NULL), 200);
  assert_int_equal(sbxd_stop(&q, SIGTERM), 0);
  char path[320];
  static char log[65536];
  snprintf(path, sizeof path, "%s/daemon.log", q.dir);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(log, 1, sizeof log - 1, f) : 0;
  log[n] = '\0';
  if (f) fclose(f);
  assert_non_null(strstr(log, "open mode on every address (allow_open_mode)"));
  /* A reload is checked against the address in use: dropping api_token
   * from a node on every address is refused, even if the file now says
   * loopback (listen changes need a restart). */
  sbxd_write_config(&q, "{\"listen\":\"0.0.0.0:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                        "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"api_token\":\"t\",\"pools\":[]}");
  assert_int_equal(sbxd_start(&q), 0);
  sbxd_write_config(&q, "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                        "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"pools\":[]}");
  kill(q.pid, SIGHUP);
  bool refused = false;
  for (int i = 0; i < 3000 && !refused; i++) {
    usleep(10000);
    sbxd_drain_log(&q);
    f = fopen(path, "r");
    n = f ? fread(log, 1, sizeof log - 1, f) : 0;
    log[n] = '\0';
    if (f) fclose(f);
    refused = strstr(log, "SIGHUP: reload refused") != NULL;
  }
  assert_true(refused);
  assert_int_equal(sbxd_status(q.port, "GET", "/v1/info", NULL, NULL), 401);
  assert_int_equal(sbxd_stop(&q, SIGTERM), 0);
  sbxd_jail_cleanup(&q);
}

static void test_healthz_and_routes(void **state) {
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "GET", "/healthz", NULL, NULL, &r), 0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, "ok\n");
  assert_non_null(strstr(r.head, "Content-Type: text/plain"));
  http_resp_free(&r);
  assert_int_equal(sbxd_status(P.port, "GET", "/nope", ROOT, NULL), 404);
  assert_int_equal(sbxd_status(P.port, "DELETE", "/v1/claim", ROOT, NULL), 405);
  assert_int_equal(sbxd_status(P.port, "GET", "/v1/peers", ACME, NULL), 200);
  /* Lifecycle verbs of an unknown sandbox: 404, as for any other verb. */
  assert_int_equal(sbxd_status(P.port, "POST", "/v1/sandboxes/sb_0123456789abcdef/hibernate", ROOT, NULL), 404);
  assert_int_equal(sbxd_status(P.port, "POST", "/v1/sandboxes/sb_0123456789abcdef/fork", ROOT, "{}"), 404);
  assert_int_equal(sbxd_status(P.port, "GET", "/v1/checkpoints", ROOT, NULL), 200);
  assert_int_equal(sbxd_status(P.port, "DELETE", "/v1/templates?template=x", ROOT, NULL), 404);
}

static void test_node_auth_matrix(void **state) {
  /* root-class endpoints: root 200, tenant 403, wrong 401, missing 401 */
  const char *root_paths[] = {"/v1/info", "/metrics"};
  for (size_t i = 0; i < 2; i++) {
    assert_int_equal(sbxd_status(P.port, "GET", root_paths[i], ROOT, NULL), 200);
    assert_int_equal(sbxd_status(P.port, "GET", root_paths[i], ACME, NULL), 403);
    assert_int_equal(sbxd_status(P.port, "GET", root_paths[i], "wrong", NULL), 401);
    assert_int_equal(sbxd_status(P.port, "GET", root_paths[i], NULL, NULL), 401);
  }
  assert_int_equal(sbxd_status(P.port, "POST", "/v1/drain", ACME, NULL), 403);
  assert_int_equal(sbxd_status(P.port, "PUT", "/v1/pools", ACME, "{\"pools\":[]}"), 403);
  /* node-class: root and tenant 200 */
  assert_int_equal(sbxd_status(P.port, "GET", "/v1/sandboxes", ACME, NULL), 200);
  assert_int_equal(sbxd_status(P.port, "GET", "/v1/sandboxes", ROOT, NULL), 200);
  assert_int_equal(sbxd_status(P.port, "GET", "/v1/sandboxes", "nope", NULL), 401);
  assert_int_equal(sbxd_status(P.port, "GET", "/v1/sandboxes", NULL, NULL), 401);
  /* The scheme word is case-insensitive. */
  int fd = sbxd_connect(P.port);
  const char req[] = "GET /v1/info HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: bEaReR   " ROOT
                     "  \r\n\r\n";
  write_all_fd(fd, req, sizeof req - 1);
  struct http_resp r;
  http_read_resp(fd, &r);
  close(fd);
  assert_int_equal(r.status, 200);
  http_resp_free(&r);
}

static void test_sandbox_auth_matrix(void **state) {
  struct claim c, other;
  assert_int_equal(do_claim(ACME, "{\"template\":\"host\",\"claim_ref\":\"team/job-1\"}", &c), 200);
  assert_int_equal(do_claim(BETA, "{\"template\":\"host\"}", &other), 200);
  assert_int_equal(strlen(c.token), 32);
  assert_int_equal(strlen(c.id), 19);
  char p_renew[128], p_owner[128], p_get[128], p_stats[128], p_exec[128];
  snprintf(p_renew, sizeof p_renew, "/v1/sandboxes/%s/renew", c.id);
  snprintf(p_owner, sizeof p_owner, "/v1/sandboxes/%s/owner", c.id);
  snprintf(p_get, sizeof p_get, "/v1/sandboxes/%s", c.id);
  snprintf(p_stats, sizeof p_stats, "/v1/sandboxes/%s/stats", c.id);
  snprintf(p_exec, sizeof p_exec, "/v1/sandboxes/%s/exec", c.id);

  /* sbx/root: sandbox token and root work; tenant, other sandbox's
   * token and garbage all get the same 404; missing is 401. */
  assert_int_equal(sbxd_status(P.port, "POST", p_renew, c.token, NULL), 200);
  assert_int_equal(sbxd_status(P.port, "POST", p_renew, ROOT, NULL), 200);
  struct http_resp r1, r2, r3;
  sbxd_http(P.port, "POST", p_renew, ACME, NULL, &r1);
  sbxd_http(P.port, "POST", p_renew, other.token, NULL, &r2);
  sbxd_http(P.port, "POST", "/v1/sandboxes/sb_00000000000000ff/renew", c.token, NULL, &r3);
  assert_int_equal(r1.status, 404);
  assert_string_equal(r1.body, r2.body);
  assert_string_equal(r1.body, r3.body);
  assert_string_equal(r1.head, r2.head);
  assert_string_equal(r1.head, r3.head);
  http_resp_free(&r1);
  http_resp_free(&r2);
  http_resp_free(&r3);
  assert_int_equal(sbxd_status(P.port, "POST", "/v1/sandboxes/..%2f..%2fetc/renew", c.token, NULL), 404);
  assert_int_equal(sbxd_status(P.port, "POST", p_renew, NULL, NULL), 401);

  /* sbx only: owner and exec refuse root acting by id. */
  assert_int_equal(sbxd_status(P.port, "GET", p_owner, c.token, NULL), 200);
  struct http_resp r;
  sbxd_http(P.port, "GET", p_owner, ROOT, NULL, &r);
  assert_int_equal(r.status, 404);
  assert_non_null(strstr(r.body, "not owned here"));
  http_resp_free(&r);
  assert_int_equal(sbxd_status(P.port, "POST", p_exec, ROOT, "{\"argv\":[\"true\"]}"), 404);
  /* exec order: 401, 404, body 400, then dial (the real silkd runs it) */
  assert_int_equal(sbxd_status(P.port, "POST", p_exec, NULL, "{}"), 401);
  assert_int_equal(sbxd_status(P.port, "POST", p_exec, c.token, "{\"argv\":[\"true\"],\"bogus\":1}"), 400);
  assert_int_equal(sbxd_status(P.port, "POST", p_exec, c.token, "{\"argv\":[]}"), 400);
  assert_int_equal(sbxd_status(P.port, "POST", p_exec, c.token, "{\"argv\":[\"a\"],\"argv\":[\"b\"]}"), 400);
  assert_int_equal(sbxd_status(P.port, "POST", p_exec, c.token, "{\"argv\":[\"a\"],\"timeout_seconds\":-1}"), 400);
  sbxd_http(P.port, "POST", p_exec, c.token, "{\"argv\":[\"true\"]}", &r);
  assert_int_equal(r.status, 200);
  json_t *ex = body_json(&r);
  assert_int_equal(json_integer_value(json_object_get(ex, "exit_code")), 0);
  json_decref(ex);
  http_resp_free(&r);

  /* root-only by id: GET row (with token for root), stats */
  sbxd_http(P.port, "GET", p_get, ROOT, NULL, &r);
  assert_int_equal(r.status, 200);
  json_t *row = body_json(&r);
  assert_string_equal(json_string_value(json_object_get(row, "token")), c.token);
  assert_string_equal(json_string_value(json_object_get(row, "claim_ref")), "team/job-1");
  json_decref(row);
  http_resp_free(&r);
  assert_int_equal(sbxd_status(P.port, "GET", p_get, ACME, NULL), 403);
  assert_int_equal(sbxd_status(P.port, "GET", p_stats, ROOT, NULL), 200);
  assert_int_equal(sbxd_status(P.port, "GET", p_stats, c.token, NULL), 401);

  /* Listings are scoped and never carry tokens. */
  sbxd_http(P.port, "GET", "/v1/sandboxes", ACME, NULL, &r);
  json_t *l = body_json(&r);
  json_t *rows = json_object_get(l, "sandboxes");
  assert_int_equal(json_array_size(rows), 1);
  assert_null(json_object_get(json_array_get(rows, 0), "token"));
  json_decref(l);
  http_resp_free(&r);
  sbxd_http(P.port, "GET", "/v1/sandboxes?claim_ref=team%2Fjob-1", ROOT, NULL, &r);
  l = body_json(&r);
  assert_int_equal(json_array_size(json_object_get(l, "sandboxes")), 1);
  json_decref(l);
  http_resp_free(&r);

  /* Upgrade endpoints: 401, then 426 with the Upgrade header, then 404. */
  char p_agent[128];
  snprintf(p_agent, sizeof p_agent, "/v1/sandboxes/%s/agent", c.id);
  assert_int_equal(sbxd_status(P.port, "GET", p_agent, NULL, NULL), 401);
  sbxd_http(P.port, "GET", p_agent, c.token, NULL, &r);
  assert_int_equal(r.status, 426);
  assert_non_null(strstr(r.head, "Upgrade: silkd\r\n"));
  http_resp_free(&r);
  char p_port[128];
  snprintf(p_port, sizeof p_port, "/v1/sandboxes/%s/ports/0", c.id);
  assert_int_equal(sbxd_status(P.port, "GET", p_port, c.token, NULL), 400);
  snprintf(p_port, sizeof p_port, "/v1/sandboxes/%s/ports/65536", c.id);
  assert_int_equal(sbxd_status(P.port, "GET", p_port, c.token, NULL), 400);
  snprintf(p_port, sizeof p_port, "/v1/sandboxes/%s/ports/8080", c.id);
  sbxd_http(P.port, "GET", p_port, c.token, NULL, &r);
  assert_int_equal(r.status, 426);
  assert_non_null(strstr(r.head, "Upgrade: tcp\r\n"));
  http_resp_free(&r);

  /* Release: wrong token 404, right one 204, then 404 for everyone. */
  char p_rel[128];
  snprintf(p_rel, sizeof p_rel, "/v1/sandboxes/%s/release", c.id);
  assert_int_equal(sbxd_status(P.port, "POST", p_rel, other.token, NULL), 404);
  release(&c);
  assert_int_equal(sbxd_status(P.port, "POST", p_rel, c.token, NULL), 404);
  assert_int_equal(sbxd_status(P.port, "POST", p_renew, ROOT, NULL), 404);
  snprintf(p_rel, sizeof p_rel, "/v1/sandboxes/%s/release", other.id);
  assert_int_equal(sbxd_status(P.port, "POST", p_rel, ROOT, NULL), 204);
}

static void test_claim_validation(void **state) {
  static const struct {
    const char *body;
    int status;
    const char *needle;
  } cases[] = {
      {"{}", 400, "template"},
      {"{\"template\":\"../etc\"}", 400, "template"},
      {"{\"template\":\"host\",\"size\":\"huge\"}", 400, "size"},
      {"{\"template\":\"host\",\"size\":\"Small\"}", 400, "size"},
      {"{\"template\":\"host\",\"net\":\"wifi\"}", 400, "net"},
      {"{\"template\":\"host\",\"net\":\"egress\"}", 409, "egress"},
      {"{\"template\":\"host\",\"ttl_seconds\":-5}", 400, "ttl"},
      {"{\"template\":\"host\",\"ttl_seconds\":1.5}", 400, "ttl"},
      {"{\"template\":\"host\",\"ttl_seconds\":99999999999999999999999}", 400, "invalid request body"},
      {"{\"template\":5}", 400, "template"},
      {"{\"template\":\"host\"} x", 400, "invalid request body"},
      {"[1]", 400, "invalid request body"},
      {"{\"template\":\"host\",\"volumes\":[{},{},{},{},{},{},{},{},{}]}", 400, "volumes"},
      {"{\"template\":\"host\",\"volumes\":[{\"name\":\"data\"}]}", 400, "volume"},
      {"{\"template\":\"host\",\"require_promoted\":true}", 404, "unknown template"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    struct http_resp r;
    assert_int_equal(sbxd_http(P.port, "POST", "/v1/claim", ROOT, cases[i].body, &r), 0);
    if (r.status != cases[i].status || !strstr(r.body, cases[i].needle))
      fprintf(stderr, "claim %s -> %d %s\n", cases[i].body, r.status, r.body);
    assert_int_equal(r.status, cases[i].status);
    assert_non_null(strstr(r.body, cases[i].needle));
    http_resp_free(&r);
  }
  /* Lenient: unknown fields ignored, the last duplicate wins, null = absent. */
  struct claim c;
  assert_int_equal(do_claim(ROOT, "{\"template\":\"nope/x\",\"template\":\"host\",\"future\":1,\"size\":null}", &c),
                   200);
  release(&c);
  /* ttl above 24 h is clamped. */
  struct http_resp r;
  sbxd_http(P.port, "POST", "/v1/claim", ROOT, "{\"template\":\"host\",\"ttl_seconds\":999999}", &r);
  assert_int_equal(r.status, 200);
  json_t *v = body_json(&r);
  struct claim c2;
  snprintf(c2.id, sizeof c2.id, "%s", json_string_value(json_object_get(v, "id")));
  snprintf(c2.token, sizeof c2.token, "%s", json_string_value(json_object_get(v, "token")));
  struct tm tm = {0};
  strptime(json_string_value(json_object_get(v, "deadline")), "%Y-%m-%dT%H:%M:%SZ", &tm);
  long left = (long)(timegm(&tm) - time(NULL));
  assert_true(left <= 86400 && left > 86000);
  json_decref(v);
  http_resp_free(&r);
  release(&c2);
}

static void test_body_cap(void **state) {
  size_t n = 1024 * 1024 + 10;
  char *big = malloc(n + 1);
  memset(big, ' ', n);
  memcpy(big, "{\"template\":\"host\"}", 19);
  big[n] = '\0';
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "POST", "/v1/claim", ROOT, big, &r), 0);
  assert_int_equal(r.status, 400);
  assert_non_null(strstr(r.body, "invalid request body"));
  http_resp_free(&r);
  free(big);
  /* Just under the cap is decoded. */
  n = 1024 * 1024;
  big = malloc(n + 1);
  memset(big, ' ', n);
  memcpy(big, "{\"template\":\"host\"}", 19);
  big[n] = '\0';
  struct claim c;
  assert_int_equal(do_claim(ROOT, big, &c), 200);
  release(&c);
  free(big);
}

static void test_caps_and_storm(void **state) {
  /* acme max 3, node max 6. */
  struct claim cs[8];
  int ok = 0, busy = 0;
  for (int i = 0; i < 5; i++) {
    int s = do_claim(ACME, "{\"template\":\"host\"}", &cs[ok]);
    if (s == 200) ok++;
    else if (s == 429) busy++;
  }
  assert_int_equal(ok, 3);
  assert_int_equal(busy, 2);
  struct http_resp r;
  sbxd_http(P.port, "POST", "/v1/claim", ACME, "{\"template\":\"host\"}", &r);
  assert_int_equal(r.status, 429);
  assert_non_null(strstr(r.body, "tenant at capacity"));
  http_resp_free(&r);
  for (int i = 0; i < 6; i++) {
    int s = do_claim(ROOT, "{\"template\":\"host\",\"size\":\"medium\"}", &cs[ok]);
    if (s == 200) ok++;
    else assert_int_equal(s, 429);
  }
  assert_int_equal(ok, 6);
  sbxd_http(P.port, "POST", "/v1/claim", BETA, "{\"template\":\"host\"}", &r);
  assert_int_equal(r.status, 429);
  assert_non_null(strstr(r.body, "node at capacity"));
  http_resp_free(&r);
  for (int i = 0; i < ok; i++) release(&cs[i]);
  /* Nothing leaked: the index is empty and claims work again. */
  sbxd_http(P.port, "GET", "/v1/info", ROOT, NULL, &r);
  json_t *v = body_json(&r);
  assert_int_equal(json_integer_value(json_object_get(v, "claimed")), 0);
  json_decref(v);
  http_resp_free(&r);
  assert_int_equal(do_claim(ACME, "{\"template\":\"host\"}", &cs[0]), 200);
  release(&cs[0]);
}

/* Many claims in flight at once (most provisioned on workers): the caps
 * hold because admission reserves, and nothing leaks afterwards. */
static void test_concurrent_storm(void **state) {
  enum { N = 24 };
  int fds[N];
  const char body[] = "{\"template\":\"host\",\"size\":\"large\"}";
  char req[512];
  int n = snprintf(req, sizeof req,
                   "POST /v1/claim HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer " ROOT
                   "\r\nContent-Length: %zu\r\n\r\n%s",
                   sizeof body - 1, body);
  for (int i = 0; i < N; i++) {
    fds[i] = sbxd_connect(P.port);
    write_all_fd(fds[i], req, (size_t)n);
  }
  struct claim got[N];
  int ok = 0, busy = 0;
  for (int i = 0; i < N; i++) {
    struct http_resp r;
    assert_int_equal(http_read_resp(fds[i], &r), 0);
    close(fds[i]);
    if (r.status == 200) {
      json_t *v = body_json(&r);
      snprintf(got[ok].id, sizeof got[ok].id, "%s", json_string_value(json_object_get(v, "id")));
      snprintf(got[ok].token, sizeof got[ok].token, "%s", json_string_value(json_object_get(v, "token")));
      json_decref(v);
      ok++;
    } else {
      assert_int_equal(r.status, 429);
      busy++;
    }
    http_resp_free(&r);
  }
  assert_int_equal(ok, 6); /* the node cap */
  assert_int_equal(busy, N - 6);
  for (int i = 0; i < ok; i++) release(&got[i]);
  struct http_resp r;
  sbxd_http(P.port, "GET", "/metrics", ROOT, NULL, &r);
  assert_non_null(strstr(r.body, "sandboxd_claimed 0\n"));
  http_resp_free(&r);
  /* Only the warm pool's jails are left running once the destroys have run. */
  for (int i = 0;; i++) {
    if (sbxd_count_sandboxes(&P) == 2) break;
    assert_true(i < 3000);
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

static void test_head_timeout_and_keepalive(void **state) {
  /* Two requests on one keep-alive connection. */
  int fd = sbxd_connect(P.port);
  const char two[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  write_all_fd(fd, two, sizeof two - 1);
  char buf[1024];
  size_t got = 0;
  ssize_t n;
  while ((n = read(fd, buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)n;
  buf[got] = '\0';
  close(fd);
  char *second = strstr(buf + 1, "HTTP/1.1 200");
  assert_non_null(strstr(buf, "HTTP/1.1 200"));
  assert_non_null(second);
  /* A started head that never ends is cut (the server closes). */
  fd = sbxd_connect(P.port);
  write_all_fd(fd, "GET /healthz HTTP/1.1\r\n", 23);
  n = read(fd, buf, sizeof buf);
  assert_true(n <= 0);
  close(fd);
  /* Garbage is a 400, not a crash. */
  fd = sbxd_connect(P.port);
  write_all_fd(fd, "NOT HTTP\r\n\r\n", 12);
  struct http_resp r;
  http_read_resp(fd, &r);
  close(fd);
  assert_int_equal(r.status, 400);
  http_resp_free(&r);
}


int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version_and_bad_configs),
      cmocka_unit_test(test_listen_and_open_mode),
      cmocka_unit_test_setup_teardown(test_healthz_and_routes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_node_auth_matrix, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sandbox_auth_matrix, setup, teardown),
      cmocka_unit_test_setup_teardown(test_claim_validation, setup, teardown),
      cmocka_unit_test_setup_teardown(test_body_cap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_caps_and_storm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_storm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_head_timeout_and_keepalive, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
