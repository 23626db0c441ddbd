/* test_sandboxd_jail: sandboxd with the real jail driver and silkd: the
 * full lifecycle (claim, exec with exit code/stdout/stderr, timeout 504,
 * cap 413, the silkd relay with real frames, release), kill -9 and
 * restart re-adoption with exec still working.
 *
 * Skipped, with the reason printed, where it cannot run: not root, a
 * libsandbox built without drivers, or a silkd that cannot serve yet. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "sbxd_test.h"

/* A cgroup parent of its own: the driver's reconcile removes empty
 * cgroups it does not own under a shared parent, which races with another
 * daemon (or test) that has just created one. */
static const char *CONFIG = "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                            "\"api_token\":\"root-token-for-jail-test\",\"jail\":{\"cgroup_root\":\"@CGROUP@\"},"
                            "\"pools\":[{\"template\":\"host\",\"warm\":1}]}";
static char cgroup_name[64];

static void remove_cgroup_parent(void) {
  static const char *const ctl[] = {"cpu", "cpuacct", "cpuset", "memory", "pids", "freezer", "blkio", "devices",
                                    "systemd", "unified", ""};
  char path[256];
  for (size_t i = 0; i < sizeof ctl / sizeof *ctl; i++) {
    snprintf(path, sizeof path, "/sys/fs/cgroup/%s%s%s", ctl[i], ctl[i][0] ? "/" : "", cgroup_name);
    rmdir(path);
  }
}

static struct sbxd_proc P;
static const char *skip_reason;

static bool silkd_usable(void) {
  char out[4096];
  int pfd[2];
  if (pipe(pfd) < 0) return false;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pfd[1], 1);
    dup2(pfd[1], 2);
    execl(SBX_BUILD_BIN_DIR "/silkd", "silkd", "--help", (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  ssize_t n = read(pfd[0], out, sizeof out - 1);
  close(pfd[0]);
  waitpid(pid, NULL, 0);
  out[n > 0 ? n : 0] = '\0';
  return strstr(out, "--listen") != NULL;
}

static int setup(void **state) {
  skip_reason = NULL;
  if (geteuid() != 0) {
    skip_reason = "needs root";
    return 0;
  }
  if (!silkd_usable()) {
    skip_reason = "silkd does not serve yet (no --listen)";
    return 0;
  }
  snprintf(cgroup_name, sizeof cgroup_name, "sbxd-test-%d", (int)getpid());
  char cfg[1024];
  const char *at = strstr(CONFIG, "@CGROUP@");
  snprintf(cfg, sizeof cfg, "%.*s%s%s", (int)(at - CONFIG), CONFIG, cgroup_name, at + 8);
  sbxd_prepare(&P, cfg);
  if (sbxd_start(&P) < 0) {
    char path[320], log[4096] = "";
    snprintf(path, sizeof path, "%s/daemon.log", P.dir);
    sbxd_stop(&P, SIGKILL);
    FILE *f = fopen(path, "r");
    if (f) {
      size_t n = fread(log, 1, sizeof log - 1, f);
      log[n] = '\0';
      fclose(f);
    }
    if (strstr(log, "no drivers yet")) {
      skip_reason = "libsandbox has no jail driver yet";
      sbxd_rmrf(P.dir);
      return 0;
    }
    return -1;
  }
  return 0;
}

/* sandboxd leaves sandboxes running when it stops (§5.13), so cleaning up
 * is a restart that owns nothing: no journalled claims and no pools, so
 * reconcile destroys every sandbox under the data_dir and none is made. */
static int teardown(void **state) {
  if (skip_reason) return 0;
  int rc = sbxd_stop(&P, SIGTERM);
  char path[320];
  snprintf(path, sizeof path, "%s/data/claims.json", P.dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/data/pools.json", P.dir);
  FILE *f = fopen(path, "w");
  if (f) {
    fputs("{\"pools\":[]}", f);
    fclose(f);
  }
  if (sbxd_start(&P) == 0) sbxd_stop(&P, SIGTERM);
  sbxd_cleanup(&P);
  remove_cgroup_parent();
  return rc == 0 ? 0 : -1;
}

#define SKIP_IF_NEEDED()                                            \
  do {                                                              \
    if (skip_reason) {                                              \
      fprintf(stderr, "skipped: %s\n", skip_reason);                \
      skip();                                                       \
    }                                                               \
  } while (0)

struct claim {
  char id[32], token[64];
};

static void claim(struct claim *c) {
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "POST", "/v1/claim", "root-token-for-jail-test", "{\"template\":\"host\"}", &r), 0);
  if (r.status != 200) {
    fprintf(stderr, "claim: %d %s\n", r.status, r.body);
    sbxd_drain_log(&P);
    sbxd_dump_log(&P);
  }
  assert_int_equal(r.status, 200);
  json_error_t je;
  json_t *v = json_loads(r.body, 0, &je);
  snprintf(c->id, sizeof c->id, "%s", json_string_value(json_object_get(v, "id")));
  snprintf(c->token, sizeof c->token, "%s", json_string_value(json_object_get(v, "token")));
  json_decref(v);
  http_resp_free(&r);
}

static json_t *exec(const struct claim *c, const char *body, int *status) {
  char path[128];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/exec", c->id);
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "POST", path, c->token, body, &r), 0);
  *status = r.status;
  if (r.status >= 500) fprintf(stderr, "exec %s: %d %s\n", body, r.status, r.body);
  json_error_t je;
  json_t *v = json_loads(r.body, 0, &je);
  http_resp_free(&r);
  return v;
}

static void test_lifecycle(void **state) {
  SKIP_IF_NEEDED();
  struct claim c;
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
  int fd = sbxd_connect(P.port);
  char req[1024];
  int n = snprintf(req, sizeof req,
                   "GET /v1/sandboxes/%s/agent HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: silkd\r\n"
                   "Authorization: Bearer %s\r\n\r\n{\"v\":1,\"op\":\"info\"}\n",
                   c.id, c.token);
  write_all_fd(fd, req, (size_t)n);
  char buf[8192];
  size_t got = 0;
  while (got < 74 || !memchr(buf + 73, '\n', got - 73)) {
    ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
    assert_true(r > 0);
    got += (size_t)r;
  }
  buf[got] = '\0';
  assert_memory_equal(buf, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: silkd\r\nConnection: Upgrade\r\n\r\n", 73);
  assert_non_null(strstr(buf + 73, "\"type\":\"info\""));
  close(fd);

  char path[128];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/release", c.id);
  assert_int_equal(sbxd_status(P.port, "POST", path, c.token, NULL), 204);
  snprintf(path, sizeof path, "/v1/sandboxes/%s", c.id);
  assert_int_equal(sbxd_status(P.port, "GET", path, "root-token-for-jail-test", NULL), 404);
}

static void test_kill9_readopt(void **state) {
  SKIP_IF_NEEDED();
  struct claim c;
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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
