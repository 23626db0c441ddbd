/* test_sandboxd_node: a real sandboxd with the real jail driver and silkd
 * (root), its node state: pools retuned and persisted, drain, metrics,
 * reaping and usage.jsonl, kill -9 recovery (also with sync_claims and its
 * group commit), open mode, pool warmup and SIGHUP reload. The HTTP API
 * proper is in test_sandboxd_api.c, failed sandboxes in
 * test_sandboxd_failed.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "sbxd_test.h"

#include "sbxd_api_fixture.h"

static void test_pools_and_drain(void **state) {
  assert_true(wait_warm("small", 2));
  /* Strict decoding and validation of PUT /v1/pools. */
  assert_int_equal(sbxd_status(P.port, "PUT", "/v1/pools", ROOT, "{\"pools\":[],\"x\":1}"), 400);
  assert_int_equal(sbxd_status(P.port, "PUT", "/v1/pools", ROOT, "{\"pools\":[{\"template\":\"a\",\"warmup\":[\"x\"]}]}"),
                   400);
  assert_int_equal(sbxd_status(P.port, "PUT", "/v1/pools", ROOT, "{\"pools\":[{\"template\":\"a\",\"warm\":-1}]}"), 400);
  assert_int_equal(
      sbxd_status(P.port, "PUT", "/v1/pools", ROOT, "{\"pools\":[{\"template\":\"a\"},{\"template\":\"a\"}]}"), 400);
  assert_int_equal(
      sbxd_status(P.port, "PUT", "/v1/pools", ROOT, "{\"pools\":[{\"template\":\"a\",\"warm\":1,\"warm\":2}]}"), 400);
  assert_int_equal(sbxd_status(P.port, "PUT", "/v1/pools", ROOT,
                               "{\"pools\":[{\"template\":\"a\",\"archive_after_seconds\":5}]}"),
                   400);
  /* Retune: host to 3, add "tools" with 1. */
  struct http_resp r;
  sbxd_http(P.port, "PUT", "/v1/pools", ROOT,
            "{\"pools\":[{\"template\":\"host\",\"warm\":3},{\"template\":\"host\",\"size\":\"medium\",\"warm\":1}]}",
            &r);
  assert_int_equal(r.status, 200);
  json_t *v = body_json(&r);
  assert_int_equal(json_array_size(json_object_get(v, "pools")), 2);
  json_decref(v);
  http_resp_free(&r);
  assert_true(wait_warm("small", 3));
  assert_true(wait_warm("medium", 1));
  char path[400];
  snprintf(path, sizeof path, "%s/data/pools.json", P.dir);
  json_error_t je;
  json_t *saved = json_load_file(path, 0, &je);
  assert_non_null(saved);
  assert_int_equal(json_array_size(json_object_get(saved, "pools")), 2);
  json_decref(saved);

  /* Drain: warm instances go, claims get 429, other verbs still work. */
  struct claim c;
  assert_int_equal(do_claim(ROOT, "{\"template\":\"host\"}", &c), 200);
  sbxd_http(P.port, "POST", "/v1/drain", ROOT, NULL, &r);
  assert_int_equal(r.status, 200);
  v = body_json(&r);
  assert_true(json_is_true(json_object_get(v, "draining")));
  json_decref(v);
  http_resp_free(&r);
  assert_true(wait_warm("small", 0));
  sbxd_http(P.port, "POST", "/v1/claim", ROOT, "{\"template\":\"host\"}", &r);
  assert_int_equal(r.status, 429);
  assert_non_null(strstr(r.body, "node draining"));
  http_resp_free(&r);
  char p_renew[128];
  snprintf(p_renew, sizeof p_renew, "/v1/sandboxes/%s/renew", c.id);
  assert_int_equal(sbxd_status(P.port, "POST", p_renew, c.token, "{\"ttl_seconds\":60}"), 200);
  assert_int_equal(sbxd_status(P.port, "POST", "/v1/drain", ROOT, NULL), 200); /* idempotent */
  assert_int_equal(sbxd_status(P.port, "DELETE", "/v1/drain", ROOT, NULL), 200);
  assert_true(wait_warm("small", 3));
  release(&c);

  /* Omitted keys drain; the persisted set survives a restart. */
  assert_int_equal(sbxd_status(P.port, "PUT", "/v1/pools", ROOT,
                               "{\"pools\":[{\"template\":\"host\",\"size\":\"medium\",\"warm\":2}]}"),
                   200);
  assert_int_equal(pool_warm("small"), -1);
  assert_int_equal(sbxd_stop(&P, SIGTERM), 0);
  assert_int_equal(sbxd_start(&P), 0);
  assert_int_equal(pool_warm("small"), -1);
  assert_true(wait_warm("medium", 2));
  /* Deleting pools.json hands the pools back to the config (next start). */
  snprintf(path, sizeof path, "%s/data/pools.json", P.dir);
  unlink(path);
  assert_int_equal(sbxd_stop(&P, SIGTERM), 0);
  assert_int_equal(sbxd_start(&P), 0);
  assert_true(wait_warm("small", 2));
}

/* A tiny Prometheus text parser: every sample line is name{labels} value,
 * every family has HELP and TYPE before its first sample. */
static void test_metrics(void **state) {
  struct claim c;
  assert_int_equal(do_claim(ACME, "{\"template\":\"host\"}", &c), 200);
  struct http_resp r;
  sbxd_http(P.port, "GET", "/metrics", ROOT, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.head, "Content-Type: text/plain; version=0.0.4"));
  char typed[128][64];
  int ntyped = 0;
  int samples = 0;
  char *save, *line;
  for (line = strtok_r(r.body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (strncmp(line, "# HELP ", 7) == 0) continue;
    if (strncmp(line, "# TYPE ", 7) == 0) {
      char name[64], type[16];
      assert_int_equal(sscanf(line + 7, "%63s %15s", name, type), 2);
      assert_true(strcmp(type, "gauge") == 0 || strcmp(type, "counter") == 0 || strcmp(type, "histogram") == 0);
      assert_true(ntyped + 3 <= 128);
      /* a histogram's samples are its _bucket, _sum and _count series */
      if (strcmp(type, "histogram") == 0)
        for (int i = 0; i < 3; i++) snprintf(typed[ntyped++], 64, "%.40s%s", name, (const char *[]){"_bucket", "_sum", "_count"}[i]);
      else snprintf(typed[ntyped++], 64, "%s", name);
      continue;
    }
    assert_true(line[0] != '#');
    char name[128];
    size_t k = strspn(line, "abcdefghijklmnopqrstuvwxyz_");
    assert_true(k > 0 && k < sizeof name);
    memcpy(name, line, k);
    name[k] = '\0';
    /* sandboxd's own series, and the process's under the client libraries' names */
    assert_true(strncmp(name, "sandboxd_", 9) == 0 || strncmp(name, "process_", 8) == 0);
    bool known = false;
    for (int i = 0; i < ntyped; i++) known |= strcmp(typed[i], name) == 0;
    assert_true(known);
    const char *rest = line + k;
    if (*rest == '{') {
      rest = strchr(rest, '}');
      assert_non_null(rest);
      rest++;
    }
    assert_true(*rest == ' ');
    char *end;
    strtod(rest + 1, &end);
    assert_true(*end == '\0' && end != rest + 1);
    samples++;
  }
  assert_true(samples >= 20);
  http_resp_free(&r);
  sbxd_http(P.port, "GET", "/metrics", ROOT, NULL, &r);
  assert_non_null(strstr(r.body, "sandboxd_tenant_claims{tenant=\"acme\"} 1\n"));
  assert_non_null(strstr(r.body, "sandboxd_claimed 1\n"));
  assert_non_null(strstr(r.body, "sandboxd_pool_warm{template=\"host\",net=\"none\",size=\"small\"}"));
  assert_non_null(strstr(r.body, "sandboxd_upgrades_total{protocol=\"silkd\"} 0\n"));
  http_resp_free(&r);
  /* One agent relay (an info round trip) counts one silkd upgrade. */
  int fd = sbxd_connect(P.port);
  char req[512];
  int n = snprintf(req, sizeof req,
                   "GET /v1/sandboxes/%s/agent HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: silkd\r\n"
                   "Authorization: Bearer %s\r\n\r\n{\"v\":1,\"op\":\"info\"}\n",
                   c.id, c.token);
  write_all_fd(fd, req, (size_t)n);
  char buf[4096];
  size_t got = 0;
  while (got < sizeof buf - 1) {
    ssize_t k = read(fd, buf + got, sizeof buf - 1 - got);
    assert_true(k > 0);
    got += (size_t)k;
    buf[got] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    if (body && strchr(body + 4, '\n')) break;
  }
  close(fd);
  assert_int_equal(strncmp(buf, "HTTP/1.1 101", 12), 0);
  sbxd_http(P.port, "GET", "/metrics", ROOT, NULL, &r);
  assert_non_null(strstr(r.body, "sandboxd_upgrades_total{protocol=\"silkd\"} 1\n"));
  http_resp_free(&r);
  release(&c);
}

static void test_reap_and_usage(void **state) {
  /* The key hash, as the usage journal shows it: sha256 of "tmpl|net|size",
   * the first 16 bytes in hex (spec §1.5's example is rt:24.04, a template
   * name the jail driver cannot hold on disk; host is the same recipe). */
  struct claim k;
  assert_int_equal(do_claim(ROOT, "{\"template\":\"host\",\"size\":\"medium\"}", &k), 200);
  release(&k);
  struct claim c;
  assert_int_equal(do_claim(ROOT, "{\"template\":\"host\",\"ttl_seconds\":1}", &c), 200);
  char p_get[128];
  snprintf(p_get, sizeof p_get, "/v1/sandboxes/%s", c.id);
  bool gone = false;
  for (int i = 0; i < 3000 && !gone; i++) {
    gone = sbxd_status(P.port, "GET", p_get, ROOT, NULL) == 404;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  assert_true(gone);
  char path[400];
  snprintf(path, sizeof path, "%s/data/usage.jsonl", P.dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[2048];
  bool claim = false, reap = false;
  while (fgets(line, sizeof line, f)) {
    json_error_t je;
    json_t *e = json_loads(line, 0, &je);
    assert_non_null(e);
    if (strcmp(json_string_value(json_object_get(e, "id")), k.id) == 0 &&
        strcmp(json_string_value(json_object_get(e, "ev")), "claim") == 0)
      assert_string_equal(json_string_value(json_object_get(e, "key")), "11b253caaf3b388575c1c3dfa49f1a27");
    if (strcmp(json_string_value(json_object_get(e, "id")), c.id) == 0) {
      const char *ev = json_string_value(json_object_get(e, "ev"));
      if (strcmp(ev, "claim") == 0 && strcmp(json_string_value(json_object_get(e, "ref")), "host") == 0) {
        claim = true;
        assert_int_equal(strlen(json_string_value(json_object_get(e, "key"))), 32);
        assert_string_equal(json_string_value(json_object_get(e, "ref")), "host");
      }
      reap |= strcmp(ev, "reap") == 0;
    }
    json_decref(e);
  }
  fclose(f);
  assert_true(claim);
  assert_true(reap);
  assert_int_equal(sbxd_status(P.port, "GET", "/metrics", ROOT, NULL), 200);
}

static void test_kill9_readopt(void **state) {
  struct claim keep, gone;
  /* A claim_ref that needs escaping: the journal's lines are formatted
   * by hand (journal.c) and must read back as they were. */
  assert_int_equal(do_claim(ACME,
                            "{\"template\":\"host\",\"ttl_seconds\":600,\"claim_ref\":\"q\\\"b\\\\s/\xc3\xa9\"}",
                            &keep),
                   200);
  assert_int_equal(do_claim(ROOT, "{\"template\":\"host\",\"size\":\"large\"}", &gone), 200);
  assert_true(wait_warm("small", 2));
  struct http_resp r;
  char p_get[128];
  snprintf(p_get, sizeof p_get, "/v1/sandboxes/%s", keep.id);
  sbxd_http(P.port, "GET", p_get, ROOT, NULL, &r);
  json_t *before = body_json(&r);
  http_resp_free(&r);

  assert_int_equal(sbxd_stop(&P, SIGKILL), 128 + SIGKILL);
  assert_int_equal(sbxd_start(&P), 0);
  /* Same id, token and deadline; still usable with its token. */
  sbxd_http(P.port, "GET", p_get, ROOT, NULL, &r);
  assert_int_equal(r.status, 200);
  json_t *after = body_json(&r);
  http_resp_free(&r);
  assert_string_equal(json_string_value(json_object_get(after, "token")), keep.token);
  assert_string_equal(json_string_value(json_object_get(after, "claim_ref")), "q\"b\\s/\xc3\xa9");
  assert_string_equal(json_string_value(json_object_get(after, "deadline")),
                      json_string_value(json_object_get(before, "deadline")));
  json_decref(before);
  json_decref(after);
  char p_renew[128];
  snprintf(p_renew, sizeof p_renew, "/v1/sandboxes/%s/renew", keep.id);
  assert_int_equal(sbxd_status(P.port, "POST", p_renew, keep.token, NULL), 200);
  /* Tenant accounting came back with it. */
  sbxd_http(P.port, "GET", "/v1/sandboxes", ACME, NULL, &r);
  json_t *l = body_json(&r);
  assert_int_equal(json_array_size(json_object_get(l, "sandboxes")), 1);
  json_decref(l);
  http_resp_free(&r);
  /* Old warm instances were destroyed and the pool rebuilt: only the two
   * claims' jails and two fresh warm ones remain running. */
  assert_true(wait_warm("small", 2));
  release(&keep);
  release(&gone);
  for (int i = 0; i < 3000; i++) {
    if (sbxd_count_sandboxes(&P) == 2) break;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    assert_true(i < 2999);
  }
}

/* A test's own daemon: cleaned up (its jails destroyed) even when an
 * assertion ends the test early. */
static struct sbxd_proc Q;

static int teardown_q(void **state) {
  if (Q.dir[0] && access(Q.dir, F_OK) == 0) sbxd_jail_cleanup(&Q);
  memset(&Q, 0, sizeof Q);
  return 0;
}

static void test_open_mode(void **state) {
  sbxd_prepare(&Q, "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                   "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"pools\":[]}");
  assert_int_equal(sbxd_start(&Q), 0);
  assert_int_equal(sbxd_status(Q.port, "GET", "/v1/info", NULL, NULL), 200);
  assert_int_equal(sbxd_status(Q.port, "GET", "/metrics", "anything", NULL), 200);
  struct http_resp r;
  sbxd_http(Q.port, "POST", "/v1/claim", NULL, "{\"template\":\"host\"}", &r);
  assert_int_equal(r.status, 200);
  json_t *v = body_json(&r);
  const char *id = json_string_value(json_object_get(v, "id"));
  const char *tok = json_string_value(json_object_get(v, "token"));
  char p_get[128], p_rel[128];
  snprintf(p_get, sizeof p_get, "/v1/sandboxes/%s", id);
  snprintf(p_rel, sizeof p_rel, "/v1/sandboxes/%s/release", id);
  http_resp_free(&r);
  /* Sandbox tokens still apply; the row never shows the token. */
  sbxd_http(Q.port, "GET", p_get, NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_null(strstr(r.body, "token"));
  http_resp_free(&r);
  assert_int_equal(sbxd_status(Q.port, "POST", p_rel, NULL, NULL), 401);
  assert_int_equal(sbxd_status(Q.port, "POST", p_rel, "wrong", NULL), 404);
  assert_int_equal(sbxd_status(Q.port, "POST", p_rel, tok, NULL), 204);
  json_decref(v);
  assert_int_equal(sbxd_stop(&Q, SIGTERM), 0);
  sbxd_jail_cleanup(&Q);
}

/* A pool's warmup argv runs once in its golden's builder: what it writes
 * is in every sandbox of that pool, and not in an unpooled key's. */
static void test_pool_warmup(void **state) {
  sbxd_prepare(&Q, "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                   "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},"
                   "\"pools\":[{\"template\":\"host\",\"size\":\"medium\",\"warm\":1,"
                   "\"warmup\":[\"/bin/sh\",\"-c\",\"echo warmed > /warmup.txt\"]}]}");
  assert_int_equal(sbxd_start(&Q), 0);
  const char *bodies[] = {"{\"template\":\"host\",\"size\":\"medium\"}", "{\"template\":\"host\"}"};
  const char *want[] = {"warmed\n", "none\n"};
  for (int i = 0; i < 2; i++) {
    struct http_resp r;
    sbxd_http(Q.port, "POST", "/v1/claim", NULL, bodies[i], &r);
    if (r.status != 200) {
      fprintf(stderr, "claim %s: %d %s\n", bodies[i], r.status, r.body);
      sbxd_drain_log(&Q);
      sbxd_dump_log(&Q);
    }
    assert_int_equal(r.status, 200);
    json_t *v = body_json(&r);
    http_resp_free(&r);
    char p_exec[128], p_rel[128];
    snprintf(p_exec, sizeof p_exec, "/v1/sandboxes/%s/exec", json_string_value(json_object_get(v, "id")));
    snprintf(p_rel, sizeof p_rel, "/v1/sandboxes/%s/release", json_string_value(json_object_get(v, "id")));
    const char *tok = json_string_value(json_object_get(v, "token"));
    sbxd_http(Q.port, "POST", p_exec, tok, "{\"argv\":[\"sh\",\"-c\",\"cat /warmup.txt 2>/dev/null || echo none\"]}", &r);
    assert_int_equal(r.status, 200);
    json_t *e = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(e, "stdout")), want[i]);
    json_decref(e);
    http_resp_free(&r);
    assert_int_equal(sbxd_status(Q.port, "POST", p_rel, tok, NULL), 204);
    json_decref(v);
  }
  assert_int_equal(sbxd_stop(&Q, SIGTERM), 0);
  sbxd_jail_cleanup(&Q);
}

/* sync_claims: answers wait for the group commit of claims.log. Claims
 * sent together on separate connections all get their answer, and every
 * acknowledged claim survives kill -9. */
static void test_sync_claims(void **state) {
  sbxd_prepare(&Q, "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                   "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"sync_claims\":true,"
                   "\"pools\":[{\"template\":\"host\",\"warm\":4}]}");
  assert_int_equal(sbxd_start(&Q), 0);
  enum { N = 6 };
  int fds[N];
  const char req[] = "POST /v1/claim HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 19\r\n\r\n"
                     "{\"template\":\"host\"}";
  for (int i = 0; i < N; i++) {
    fds[i] = sbxd_connect(Q.port);
    assert_true(fds[i] >= 0);
    write_all_fd(fds[i], req, sizeof req - 1);
  }
  struct claim c[N];
  for (int i = 0; i < N; i++) {
    struct http_resp r;
    assert_int_equal(http_read_resp(fds[i], &r), 0);
    close(fds[i]);
    assert_int_equal(r.status, 200);
    json_t *v = body_json(&r);
    snprintf(c[i].id, sizeof c[i].id, "%s", json_string_value(json_object_get(v, "id")));
    snprintf(c[i].token, sizeof c[i].token, "%s", json_string_value(json_object_get(v, "token")));
    json_decref(v);
    http_resp_free(&r);
  }
  char path[640]; /* gcc bounds c[i].id by the whole array c */
  snprintf(path, sizeof path, "/v1/sandboxes/%s/renew", c[0].id);
  assert_int_equal(sbxd_status(Q.port, "POST", path, c[0].token, "{\"ttl_seconds\":600}"), 200);
  snprintf(path, sizeof path, "/v1/sandboxes/%s/release", c[N - 1].id);
  assert_int_equal(sbxd_status(Q.port, "POST", path, c[N - 1].token, NULL), 204);
  assert_int_equal(sbxd_stop(&Q, SIGKILL), 128 + SIGKILL);
  assert_int_equal(sbxd_start(&Q), 0);
  for (int i = 0; i < N; i++) {
    snprintf(path, sizeof path, "/v1/sandboxes/%s", c[i].id);
    assert_int_equal(sbxd_status(Q.port, "GET", path, NULL, NULL), i == N - 1 ? 404 : 200);
  }
  for (int i = 0; i < N - 1; i++) {
    snprintf(path, sizeof path, "/v1/sandboxes/%s/release", c[i].id);
    assert_int_equal(sbxd_status(Q.port, "POST", path, c[i].token, NULL), 204);
  }
  assert_int_equal(sbxd_stop(&Q, SIGTERM), 0);
  sbxd_jail_cleanup(&Q);
}

static void test_sighup_reload(void **state) {
  struct claim c;
  assert_int_equal(do_claim(ACME, "{\"template\":\"host\"}", &c), 200);
  sbxd_write_config(&P, "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                        "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},"
                        "\"api_token\":\"new-root\",\"tenants\":[{\"name\":\"acme\",\"token\":\"new-acme\"}],"
                        "\"pools\":[{\"template\":\"host\",\"warm\":1},{\"template\":\"host\",\"size\":\"xlarge\",\"warm\":1}]}");
  kill(P.pid, SIGHUP);
  int s = 0;
  for (int i = 0; i < 3000 && s != 200; i++) {
    s = sbxd_status(P.port, "GET", "/v1/info", "new-root", NULL);
    if (s != 200) usleep(10000);
  }
  assert_int_equal(s, 200);
  assert_int_equal(sbxd_status(P.port, "GET", "/v1/info", ROOT, NULL), 401);
  assert_int_equal(sbxd_status(P.port, "GET", "/v1/sandboxes", "new-acme", NULL), 200);
  assert_int_equal(sbxd_status(P.port, "GET", "/v1/sandboxes", BETA, NULL), 401);
  /* Pools reloaded; the live claim untouched and still the tenant's. */
  struct http_resp r;
  sbxd_http(P.port, "GET", "/v1/sandboxes", "new-acme", NULL, &r);
  assert_non_null(strstr(r.body, c.id));
  http_resp_free(&r);
  sbxd_http(P.port, "GET", "/v1/info", "new-root", NULL, &r);
  assert_non_null(strstr(r.body, "\"xlarge\""));
  http_resp_free(&r);
  release(&c);
  /* A broken file keeps the running config. */
  sbxd_write_config(&P, "{\"bogus\":true}");
  kill(P.pid, SIGHUP);
  usleep(200 * 1000);
  assert_int_equal(sbxd_status(P.port, "GET", "/v1/info", "new-root", NULL), 200);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pools_and_drain, setup, teardown),
      cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reap_and_usage, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kill9_readopt, setup, teardown),
      cmocka_unit_test_teardown(test_open_mode, teardown_q),
      cmocka_unit_test_teardown(test_pool_warmup, teardown_q),
      cmocka_unit_test_teardown(test_sync_claims, teardown_q),
      cmocka_unit_test_setup_teardown(test_sighup_reload, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
