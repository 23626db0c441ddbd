/* sbxd_api_fixture.h - the daemon, tokens and claim helpers shared by
 * test_sandboxd_api.c and test_sandboxd_node.c: one sandboxd per test with
 * a root token, two tenants (acme capped at 3 claims) and a warm pool of 2.
 * Include after <cmocka.h>, <jansson.h> and "sbxd_test.h". */
#ifndef SBXD_API_FIXTURE_H
#define SBXD_API_FIXTURE_H

#define ROOT "root-token-0123456789abcdef0123456789"
#define ACME "acme-token-0123456789abcdef0123456789"
#define BETA "beta-token-0123456789abcdef0123456789"

__attribute__((unused)) static const char *CONFIG =
    "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\",\"api_token\":\"" ROOT "\","
    "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"tenants\":[{\"name\":\"acme\",\"token\":\"" ACME "\",\"max_claims\":3},"
    "{\"name\":\"beta\",\"token\":\"" BETA "\"}],"
    "\"max_claims\":6,\"pools\":[{\"template\":\"host\",\"warm\":2}]}";

static struct sbxd_proc P;

__attribute__((unused)) static int setup(void **state) {
  sbxd_prepare(&P, CONFIG);
  return sbxd_start(&P);
}

/* A clean SIGTERM exit is part of every test: under ASan it also means
 * the daemon ran without memory errors or leaks. */
__attribute__((unused)) static int teardown(void **state) {
  int rc = sbxd_stop(&P, SIGTERM);
  sbxd_jail_cleanup(&P);
  if (rc != 0) fprintf(stderr, "sandboxd exited with %d\n", rc);
  return rc == 0 ? 0 : -1;
}

__attribute__((unused)) static json_t *body_json(struct http_resp *r) {
  json_error_t je;
  json_t *v = json_loads(r->body, 0, &je);
  if (!v) fprintf(stderr, "not JSON (%d): %s\n", r->status, r->body);
  return v;
}

struct claim {
  char id[32], token[64];
};

__attribute__((unused)) static int do_claim(const char *token, const char *body, struct claim *c) {
  struct http_resp r;
  if (sbxd_http(P.port, "POST", "/v1/claim", token, body, &r) < 0) return -1;
  int s = r.status;
  if (s == 200 && c) {
    json_t *v = body_json(&r);
    snprintf(c->id, sizeof c->id, "%s", json_string_value(json_object_get(v, "id")));
    snprintf(c->token, sizeof c->token, "%s", json_string_value(json_object_get(v, "token")));
    json_decref(v);
  }
  http_resp_free(&r);
  return s;
}

__attribute__((unused)) static void release(const struct claim *c) {
  char path[128];
  snprintf(path, sizeof path, "/v1/sandboxes/%.64s/release", c->id); /* ids are shorter */
  assert_int_equal(sbxd_status(P.port, "POST", path, c->token, NULL), 204);
}

/* Warm count of the pool of template "host" and this size; -1 if none. */
__attribute__((unused)) static int pool_warm(const char *size) {
  struct http_resp r;
  sbxd_http(P.port, "GET", "/v1/info", ROOT, NULL, &r);
  json_t *v = body_json(&r);
  int warm = -1;
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(v, "pools"), i, p) {
    json_t *k = json_object_get(p, "key");
    if (strcmp(json_string_value(json_object_get(k, "template")), "host") == 0 &&
        strcmp(json_string_value(json_object_get(k, "size")), size) == 0)
      warm = (int)json_integer_value(json_object_get(p, "warm"));
  }
  json_decref(v);
  http_resp_free(&r);
  return warm;
}

/* Poll until cond or the guard runs out (a hang guard, not a threshold). */
__attribute__((unused)) static bool wait_warm(const char *size, int want) {
  for (int i = 0; i < 3000; i++) {
    if (pool_warm(size) == want) return true;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return false;
}

#endif
