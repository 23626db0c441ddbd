/* test_sandboxd_failed: a real sandboxd (jail driver and silkd, root)
 * whose sandboxes lose their pid 1. A claimed sandbox whose silkd is
 * killed -9 from the host, or by the OOM killer, is marked failed at once
 * with the reason in its row, the list, /stats, the metrics and
 * usage.jsonl, and keeps it across a restart; a warm one is replaced by
 * its pool and never handed to a claim. Waits are bounded polls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "sbxd_test.h"

#include "sbxd_api_fixture.h"

static void pause_10ms(void) {
  struct timespec ts = {0, 10 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* Poll the row until failed (bounded); the row, owned by the caller. */
static json_t *wait_failed(const struct claim *c) {
  char p_get[128];
  snprintf(p_get, sizeof p_get, "/v1/sandboxes/%s", c->id);
  json_t *row = NULL;
  for (int i = 0; i < 3000 && !json_is_true(json_object_get(row, "failed")); i++) {
    json_decref(row);
    if (i) pause_10ms();
    struct http_resp r;
    sbxd_http(P.port, "GET", p_get, ROOT, NULL, &r);
    row = body_json(&r);
    http_resp_free(&r);
  }
  assert_true(json_is_true(json_object_get(row, "failed")));
  return row;
}

/* kill -9 of a claimed sandbox's silkd from the host: its row, the list,
 * /stats, the metrics and usage.jsonl say failed and why, at once (not on
 * the next exec), and still after a restart; release then clears it. */
static void test_dead_silkd_claimed(void **state) {
  struct claim c;
  assert_int_equal(do_claim(ROOT, "{\"template\":\"host\"}", &c), 200);
  char vm[128], p_get[128], p_stats[128], p_exec[128];
  sbxd_vm_of(&P, c.id, vm, sizeof vm);
  pid_t pid1 = sbxd_jail_pid1(&P, vm);
  assert_true(pid1 > 0);
  snprintf(p_get, sizeof p_get, "/v1/sandboxes/%s", c.id);
  snprintf(p_stats, sizeof p_stats, "/v1/sandboxes/%s/stats", c.id);
  snprintf(p_exec, sizeof p_exec, "/v1/sandboxes/%s/exec", c.id);
  assert_int_equal(kill(pid1, SIGKILL), 0);
  struct http_resp r;
  json_t *row = wait_failed(&c);
  assert_string_equal(json_string_value(json_object_get(row, "failed_cause")), "signal");
  const char *reason = json_string_value(json_object_get(row, "failed_reason"));
  assert_non_null(strstr(reason, "killed by signal 9"));
  assert_non_null(json_object_get(row, "failed_at"));
  sbxd_http(P.port, "GET", "/v1/sandboxes", ROOT, NULL, &r);
  assert_non_null(strstr(r.body, "\"failed\":true"));
  http_resp_free(&r);
  sbxd_http(P.port, "GET", p_stats, ROOT, NULL, &r);
  json_t *st = body_json(&r);
  http_resp_free(&r);
  assert_true(json_is_true(json_object_get(st, "failed")));
  assert_string_equal(json_string_value(json_object_get(st, "failed_reason")), reason);
  json_decref(st);
  sbxd_http(P.port, "GET", "/metrics", ROOT, NULL, &r);
  assert_non_null(strstr(r.body, "sandboxd_failed 1\n"));
  assert_non_null(strstr(r.body, "sandboxd_failed_by_cause{cause=\"signal\"} 1\n"));
  http_resp_free(&r);
  char path[320], line[4096];
  snprintf(path, sizeof path, "%s/data/usage.jsonl", P.dir);
  FILE *f = fopen(path, "r");
  bool logged = false;
  while (f && fgets(line, sizeof line, f)) {
    json_t *v = json_loads(line, 0, NULL);
    logged |= strcmp(json_string_value(json_object_get(v, "ev")) ?: "", "fail") == 0 &&
              strcmp(json_string_value(json_object_get(v, "id")) ?: "", c.id) == 0 &&
              strcmp(json_string_value(json_object_get(v, "reason")) ?: "", reason) == 0;
    json_decref(v);
  }
  if (f) fclose(f);
  assert_true(logged);
  assert_int_equal(sbxd_status(P.port, "POST", p_exec, c.token, "{\"argv\":[\"true\"]}"), 502);
  /* The reason was journalled: a restart keeps it rather than "gone". */
  char *want = strdup(reason);
  json_decref(row);
  assert_int_equal(sbxd_stop(&P, SIGKILL), 128 + SIGKILL);
  assert_int_equal(sbxd_start(&P), 0);
  sbxd_http(P.port, "GET", p_get, ROOT, NULL, &r);
  row = body_json(&r);
  http_resp_free(&r);
  assert_true(json_is_true(json_object_get(row, "failed")));
  assert_string_equal(json_string_value(json_object_get(row, "failed_reason")), want);
  json_decref(row);
  free(want);
  release(&c);
  sbxd_http(P.port, "GET", "/metrics", ROOT, NULL, &r);
  assert_non_null(strstr(r.body, "sandboxd_failed 0\n"));
  http_resp_free(&r);
}

/* Names of the sandboxes under data/run, as one string ("a b "). */
static void run_names(char *out, size_t len) {
  char path[320];
  snprintf(path, sizeof path, "%s/data/run", P.dir);
  out[0] = '\0';
  DIR *dir = opendir(path);
  struct dirent *de;
  while (dir && (de = readdir(dir)))
    if (de->d_name[0] != '.') snprintf(out + strlen(out), len - strlen(out), "%s ", de->d_name);
  if (dir) closedir(dir);
}

/* A warm sandbox whose silkd dies is dropped and replaced by the pool,
 * and never handed to a claim. */
static void test_dead_silkd_warm(void **state) {
  assert_true(wait_warm("small", 2));
  char names[1024], vm[128];
  run_names(names, sizeof names);
  assert_int_equal(sscanf(names, "%127s", vm), 1);
  pid_t pid1 = sbxd_jail_pid1(&P, vm);
  assert_true(pid1 > 0);
  assert_int_equal(kill(pid1, SIGKILL), 0);
  bool replaced = false;
  for (int i = 0; i < 3000 && !replaced; i++) {
    pause_10ms();
    run_names(names, sizeof names);
    replaced = !strstr(names, vm) && pool_warm("small") == 2;
  }
  assert_true(replaced);
  for (int i = 0; i < 2; i++) {
    struct claim c;
    assert_int_equal(do_claim(ROOT, "{\"template\":\"host\"}", &c), 200);
    char p_exec[128];
    snprintf(p_exec, sizeof p_exec, "/v1/sandboxes/%s/exec", c.id);
    assert_int_equal(sbxd_status(P.port, "POST", p_exec, c.token, "{\"argv\":[\"true\"]}"), 200);
    release(&c);
  }
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

/* The OOM killer takes silkd: the sandbox's memory cgroup is lowered to
 * 16000 pages from the host, memory hogs are started in the sandbox
 * (waiting for /tmp/go), then silkd is made the preferred victim
 * (oom_score_adj 1000, after the hogs' shell was forked, so they keep 0)
 * and the hogs are let go. The kernel adds 1000 * (pages / 1000) to
 * silkd's score, the whole limit here; eight hogs share the memory, so
 * none comes near that. The reason says OOM, the cause is "oom". */
static void test_silkd_oom_killed(void **state) {
  struct claim c;
  assert_int_equal(do_claim(ROOT, "{\"template\":\"host\"}", &c), 200);
  char vm[128], path[400];
  sbxd_vm_of(&P, c.id, vm, sizeof vm);
  pid_t pid1 = sbxd_jail_pid1(&P, vm);
  assert_true(pid1 > 0);
  snprintf(path, sizeof path, "/sys/fs/cgroup/memory/%s/%s/memory.limit_in_bytes", P.cgroup, vm);
  write_file(path, "65536000");
  int fd = sbxd_connect(P.port);
  assert_true(fd >= 0);
  const char *body = "{\"argv\":[\"sh\",\"-c\",\"while [ ! -e /tmp/go ]; do sleep 0.01; done; "
                     "for i in 1 2 3 4 5 6 7 8; do tail /dev/zero & done; wait\"]}";
  char req[1024];
  int n = snprintf(req, sizeof req,
                   "POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer %s\r\n"
                   "Content-Length: %zu\r\n\r\n%s",
                   c.id, c.token, strlen(body), body);
  assert_int_equal(write_all_fd(fd, req, (size_t)n), 0);
  /* The hog is forked once a second process is in the sandbox. */
  snprintf(path, sizeof path, "/sys/fs/cgroup/pids/%s/%s/cgroup.procs", P.cgroup, vm);
  bool started = false;
  for (int i = 0; i < 3000 && !started; i++) {
    if (i) pause_10ms();
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    long pid;
    while (fscanf(f, "%ld", &pid) == 1) started |= pid != pid1;
    fclose(f);
  }
  assert_true(started);
  snprintf(path, sizeof path, "/proc/%d/oom_score_adj", (int)pid1);
  write_file(path, "1000");
  snprintf(path, sizeof path, "/proc/%d/root/tmp/go", (int)pid1);
  write_file(path, "");
  json_t *row = wait_failed(&c);
  if (strcmp(json_string_value(json_object_get(row, "failed_cause")), "oom") != 0)
    fprintf(stderr, "failed_reason: %s\n", json_string_value(json_object_get(row, "failed_reason")));
  assert_string_equal(json_string_value(json_object_get(row, "failed_cause")), "oom");
  assert_non_null(strstr(json_string_value(json_object_get(row, "failed_reason")), "killed by OOM"));
  json_decref(row);
  struct http_resp r;
  http_read_resp(fd, &r); /* the exec ends with its sandbox */
  http_resp_free(&r);
  close(fd);
  sbxd_http(P.port, "GET", "/metrics", ROOT, NULL, &r);
  assert_non_null(strstr(r.body, "sandboxd_failed_by_cause{cause=\"oom\"} 1\n"));
  http_resp_free(&r);
  release(&c);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (geteuid() != 0) {
    fprintf(stderr, "skipped: needs root (jails, killing their pid 1)\n");
    return 0;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_dead_silkd_claimed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dead_silkd_warm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_silkd_oom_killed, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
