/* test_sandboxd_jail: sandboxd with the real jail driver and silkd: the
 * full lifecycle (claim, exec with exit code/stdout/stderr, timeout 504,
 * cap 413, the silkd relay with real frames, release), kill -9 and
 * restart re-adoption with exec still working.
 *
 * Skipped, with the reason printed, when not root. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include <sys/resource.h>

#include "sbxd_test.h"

/* "@CGROUP@": a cgroup parent of its own (see sbxd_prepare). */
static const char *CONFIG = "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                            "\"api_token\":\"root-token-for-jail-test\",\"jail\":{\"cgroup_root\":\"@CGROUP@\"},"
                            "\"pools\":[{\"template\":\"host\",\"warm\":1}]}";
static struct sbxd_proc P;
static const char *skip_reason;

static int setup(void **state) {
  skip_reason = NULL;
  if (geteuid() != 0) {
    skip_reason = "needs root";
    return 0;
  }
  sbxd_prepare(&P, CONFIG);
  if (sbxd_start(&P) < 0) {
    sbxd_stop(&P, SIGKILL);
    return -1;
  }
  return 0;
}

/* sandboxd leaves sandboxes running when it stops (§5.13): see
 * sbxd_jail_cleanup. */
static int teardown(void **state) {
  if (skip_reason) return 0;
  int rc = sbxd_stop(&P, SIGTERM);
  sbxd_jail_cleanup(&P);
  return rc == 0 ? 0 : -1;
}

#define SKIP_IF_NEEDED()                                            \
  do {                                                              \
    if (skip_reason) {                                              \
      fprintf(stderr, "skipped: %s\n", skip_reason);                \
      skip();                                                       \
    }                                                               \
  } while (0)

static void claim(struct sbxd_claim *c) { sbxd_claim(&P, "root-token-for-jail-test", c); }

static json_t *exec(const struct sbxd_claim *c, const char *body, int *status) { return sbxd_exec(&P, c, body, status); }

static void test_lifecycle(void **state) {
  SKIP_IF_NEEDED();
  struct sbxd_claim c;
  claim(&c);
  int st;
  json_t *v = exec(&c, "{\"argv\":[\"sh\",\"-c\",\"echo out; echo err >&2; exit 3\"]}", &st);
  assert_int_equal(st, 200);
  assert_int_equal(json_integer_value(json_object_get(v, "exit_code")), 3);
  assert_string_equal(json_string_value(json_object_get(v, "stdout")), "out\n");
  assert_string_equal(json_string_value(json_object_get(v, "stderr")), "err\n");
  json_decref(v);
  v = exec(&c, "{\"argv\":[\"sleep\",\"60\"],\"timeout_seconds\":1}", &st);
  assert_int_equal(st, 504);
  json_decref(v);
  v = exec(&c, "{\"argv\":[\"head\",\"-c\",\"9000000\",\"/dev/zero\"]}", &st);
  assert_int_equal(st, 413);
  json_decref(v);
  v = exec(&c, "{\"argv\":[\"/nonexistent\"]}", &st);
  assert_int_equal(st, 400);
  json_decref(v);

  /* The silkd relay with a real info frame, pipelined behind the head. */
  char buf[8192];
  int fd = sbxd_agent_open(&P, &c, "silkd", "{\"v\":1,\"op\":\"info\"}\n", buf, sizeof buf);
  assert_non_null(strstr(buf + 73, "\"type\":\"info\""));
  close(fd);

  char path[128];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/release", c.id);
  assert_int_equal(sbxd_status(P.port, "POST", path, c.token, NULL), 204);
  snprintf(path, sizeof path, "/v1/sandboxes/%s", c.id);
  assert_int_equal(sbxd_status(P.port, "GET", path, "root-token-for-jail-test", NULL), 404);
}

/* Warm sandboxes are made by lowered workers kept off one CPU; what a
 * claimant runs must not inherit that: the daemon's CPUs and nice. */
static void test_claimed_runs_unthrottled(void **state) {
  SKIP_IF_NEEDED();
  char want[256] = "", line[256];
  FILE *f = fopen("/proc/self/status", "r");
  assert_non_null(f);
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Cpus_allowed_list: %200s", want) == 1) break;
  fclose(f);
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, 0);
  char expect[300];
  snprintf(expect, sizeof expect, "%s\n%d\n", want, nice);
  /* A warm one, made in the background (a clone-tier claim runs urgent). */
  bool warm = false;
  for (int i = 0; i < 3000 && !warm; i++) { /* a hang guard, not a threshold */
    struct http_resp r;
    assert_int_equal(sbxd_http(P.port, "GET", "/v1/info", "root-token-for-jail-test", NULL, &r), 0);
    json_t *info = json_loads(r.body, 0, NULL);
    json_t *pool = json_array_get(json_object_get(info, "pools"), 0);
    warm = json_integer_value(json_object_get(pool, "warm")) >= 1;
    json_decref(info);
    http_resp_free(&r);
    if (!warm) nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  assert_true(warm);
  struct sbxd_claim c;
  claim(&c);
  int st;
  json_t *v = exec(&c,
                   "{\"argv\":[\"sh\",\"-c\",\"grep Cpus_allowed_list /proc/self/status | cut -f2; "
                   "cut -d' ' -f19 /proc/self/stat\"]}",
                   &st);
  assert_int_equal(st, 200);
  assert_string_equal(json_string_value(json_object_get(v, "stdout")), expect);
  json_decref(v);
}

static void test_kill9_readopt(void **state) {
  SKIP_IF_NEEDED();
  struct sbxd_claim c;
  claim(&c);
  assert_int_equal(sbxd_stop(&P, SIGKILL), 128 + SIGKILL);
  assert_int_equal(sbxd_start(&P), 0);
  int st;
  json_t *v = exec(&c, "{\"argv\":[\"echo\",\"still here\"]}", &st);
  assert_int_equal(st, 200);
  assert_string_equal(json_string_value(json_object_get(v, "stdout")), "still here\n");
  json_decref(v);
  char path[128];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/release", c.id);
  assert_int_equal(sbxd_status(P.port, "POST", path, c.token, NULL), 204);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_lifecycle, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kill9_readopt, setup, teardown),
      cmocka_unit_test_setup_teardown(test_claimed_runs_unthrottled, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
