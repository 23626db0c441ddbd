/* test_sandboxd_durability: a real sandboxd (jail driver, root) whose
 * data_dir is a small tmpfs filled to the last byte. Renew, release and a
 * warm claim then answer 500 and change nothing (the sandbox keeps its
 * deadline and keeps running, no claim is added); /v1/info and /metrics say the journal fails; once space
 * is freed both work again; and after kill -9 and a restart the state is
 * exactly what was acknowledged: no renewal lost, no released sandbox
 * back. With and without sync_claims.
 *
 * tmpfs hands out whole pages, so the last page of each journal file may
 * still take a record or two after the fill: the test renews, then
 * releases, until the first refusal (each bounded), and holds every
 * answer given before it to what the restart shows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mount.h>

#include <cmocka.h>
#include <jansson.h>

#include "sbxd_test.h"

#include "sbxd_api_fixture.h"

enum { N = 8 }; /* c[0] is renewed, the others released */

static struct sbxd_proc Q;
static bool mounted;

static void data_path(char *out, size_t len, const char *name) {
  snprintf(out, len, "%s/data%s%s", Q.dir, name[0] ? "/" : "", name);
}

static int teardown_q(void **state) {
  if (!Q.dir[0]) return 0;
  sbxd_jail_destroy_all(&Q);
  char data[320];
  data_path(data, sizeof data, "");
  if (mounted) umount2(data, MNT_DETACH);
  mounted = false;
  sbxd_cleanup(&Q);
  sbxd_remove_cgroup_parent(&Q);
  memset(&Q, 0, sizeof Q);
  return 0;
}

/* Write until the filesystem refuses even one more byte. */
static void fill(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  static char buf[65536];
  for (size_t chunk = sizeof buf; chunk > 0; chunk /= 2)
    while (write(fd, buf, chunk) == (ssize_t)chunk) {
    }
  assert_int_equal(errno, ENOSPC);
  close(fd);
}

static json_t *get_json(const char *path) {
  struct http_resp r;
  assert_int_equal(sbxd_http(Q.port, "GET", path, ROOT, NULL, &r), 0);
  json_t *v = r.status == 200 ? body_json(&r) : NULL;
  http_resp_free(&r);
  return v;
}

static void deadline_of(const struct claim *c, char *out, size_t len) {
  char path[1024];
  snprintf(path, sizeof path, "/v1/sandboxes/%s", c->id);
  json_t *row = get_json(path);
  assert_non_null(row);
  snprintf(out, len, "%s", json_string_value(json_object_get(row, "deadline")));
  json_decref(row);
}

/* Renew with ttl: the status, and the granted deadline when 200. */
static int renew(const struct claim *c, int ttl, char *deadline, size_t len) {
  char path[1024], body[64];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/renew", c->id);
  snprintf(body, sizeof body, "{\"ttl_seconds\":%d}", ttl);
  struct http_resp r;
  assert_int_equal(sbxd_http(Q.port, "POST", path, c->token, body, &r), 0);
  if (r.status == 200) {
    json_t *v = body_json(&r);
    snprintf(deadline, len, "%s", json_string_value(json_object_get(v, "deadline")));
    json_decref(v);
  } else {
    assert_non_null(strstr(r.body, "renew failed"));
  }
  int s = r.status;
  http_resp_free(&r);
  return s;
}

static int release_q(const struct claim *c) {
  char path[1024];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/release", c->id);
  return sbxd_status(Q.port, "POST", path, c->token, NULL);
}

static bool journal_failing(void) {
  json_t *info = get_json("/v1/info");
  bool failing = json_object_get(info, "journal_error") != NULL;
  if (failing) assert_non_null(strstr(json_string_value(json_object_get(info, "journal_error")), "No space"));
  json_decref(info);
  struct http_resp r;
  sbxd_http(Q.port, "GET", "/metrics", ROOT, NULL, &r);
  assert_non_null(strstr(r.body, failing ? "sandboxd_journal_failing 1\n" : "sandboxd_journal_failing 0\n"));
  http_resp_free(&r);
  return failing;
}

#define CLAIM "{\"template\":\"host\",\"ttl_seconds\":3600}"

/* The pool is full and nothing is being made for it (bounded poll). */
static bool pool_settled(void) {
  for (int i = 0; i < 3000; i++) {
    json_t *info = get_json("/v1/info");
    json_t *p = json_array_get(json_object_get(info, "pools"), 0);
    bool done = json_integer_value(json_object_get(p, "warm")) == 1 &&
                json_integer_value(json_object_get(p, "refilling")) == 0;
    json_decref(info);
    if (done) return true;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return false;
}

static void disk_full(bool sync_claims) {
  char cfg[1024];
  snprintf(cfg, sizeof cfg,
           "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\",\"api_token\":\"" ROOT "\","
           "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"sync_claims\":%s,"
           "\"pools\":[{\"template\":\"host\",\"warm\":1}]}",
           sync_claims ? "true" : "false");
  sbxd_prepare(&Q, cfg);
  char data[320], filler[320];
  data_path(data, sizeof data, "");
  data_path(filler, sizeof filler, "filler");
  assert_int_equal(mkdir(data, 0700), 0);
  assert_int_equal(mount("tmpfs", data, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0700"), 0);
  mounted = true;
  assert_int_equal(sbxd_start(&Q), 0);
  struct claim c[N];
  bool released[N] = {false};
  for (int i = 0; i < N; i++) {
    struct http_resp r;
    assert_int_equal(sbxd_http(Q.port, "POST", "/v1/claim", ROOT, CLAIM, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *v = body_json(&r);
    snprintf(c[i].id, sizeof c[i].id, "%s", json_string_value(json_object_get(v, "id")));
    snprintf(c[i].token, sizeof c[i].token, "%s", json_string_value(json_object_get(v, "token")));
    json_decref(v);
    http_resp_free(&r);
  }
  char acked[64];
  deadline_of(&c[0], acked, sizeof acked);
  assert_false(journal_failing());
  /* No refill in flight: one that ended during the fill would free what
   * it held, and the disk would not be full any more. */
  assert_true(pool_settled());

  fill(filler);
  /* Renew until the journal refuses; the refused one changed nothing. */
  int st = 200;
  for (int i = 0; i < 200 && st == 200; i++) st = renew(&c[0], 1000 + i, acked, sizeof acked);
  assert_int_equal(st, 500);
  char now[64];
  deadline_of(&c[0], now, sizeof now);
  assert_string_equal(now, acked);
  /* Release until the journal refuses; that sandbox stays and runs. */
  int refused = -1;
  for (int i = 1; i < N && refused < 0; i++) {
    st = release_q(&c[i]);
    if (st == 204) released[i] = true;
    else refused = i;
  }
  assert_true(refused > 0);
  assert_int_equal(st, 500);
  assert_true(journal_failing());
  char path[1024];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/exec", c[refused].id);
  assert_int_equal(sbxd_status(Q.port, "POST", path, c[refused].token, "{\"argv\":[\"true\"]}"), 200);
  assert_int_equal(renew(&c[0], 3000, now, sizeof now), 500);
  /* A warm claim: its record is as long as a refused renew's (ttl of four
   * digits), so it cannot fit either. Last, as its sandbox is destroyed. */
  struct http_resp r;
  assert_int_equal(sbxd_http(Q.port, "POST", "/v1/claim", ROOT, CLAIM, &r), 0);
  assert_int_equal(r.status, 500);
  assert_non_null(strstr(r.body, "claim failed: journal write failed"));
  http_resp_free(&r);
  json_t *info = get_json("/v1/info");
  assert_int_equal(json_integer_value(json_object_get(info, "claimed")), N - (refused - 1));
  json_decref(info);

  /* Space comes back: both work again, and the failure clears. */
  assert_int_equal(unlink(filler), 0);
  assert_int_equal(renew(&c[0], 5000, acked, sizeof acked), 200);
  assert_int_equal(release_q(&c[refused]), 204);
  released[refused] = true;
  assert_false(journal_failing());

  /* What a crash keeps is exactly what was acknowledged. */
  assert_int_equal(sbxd_stop(&Q, SIGKILL), 128 + SIGKILL);
  assert_int_equal(sbxd_start(&Q), 0);
  int live = 0;
  for (int i = 0; i < N; i++) {
    snprintf(path, sizeof path, "/v1/sandboxes/%s", c[i].id);
    assert_int_equal(sbxd_status(Q.port, "GET", path, ROOT, NULL), released[i] ? 404 : 200);
    live += !released[i];
  }
  deadline_of(&c[0], now, sizeof now);
  assert_string_equal(now, acked);
  info = get_json("/v1/info");
  assert_int_equal(json_integer_value(json_object_get(info, "claimed")), live);
  json_decref(info);
  sbxd_http(Q.port, "GET", "/metrics", ROOT, NULL, &r);
  assert_non_null(strstr(r.body, "sandboxd_failed 0\n"));
  http_resp_free(&r);
  for (int i = 0; i < N; i++)
    if (!released[i]) assert_int_equal(release_q(&c[i]), 204);
  assert_int_equal(sbxd_stop(&Q, SIGTERM), 0);
}

static void test_disk_full(void **state) { disk_full(false); }
static void test_disk_full_sync_claims(void **state) { disk_full(true); }

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (geteuid() != 0) {
    fprintf(stderr, "skipped: needs root (tmpfs mount, jails)\n");
    return 0;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_disk_full, teardown_q),
      cmocka_unit_test_teardown(test_disk_full_sync_claims, teardown_q),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
