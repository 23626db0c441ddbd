/* test_sandboxd_lifecycle: hibernate, wake (explicit, and transparent on
 * exec and on an agent dial), fork with count, idle auto-hibernate, and
 * kill -9 of sandboxd around them, with the real jail driver and silkd.
 *
 * A counter process inside the sandbox is read from the host
 * (/proc/<pid 1>/root) so that looking does not wake it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "sbxd_test.h"

#define ROOT "root-token-for-lifecycle-test"
static const char *CONFIG = "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                            "\"api_token\":\"" ROOT "\",\"jail\":{\"cgroup_root\":\"@CGROUP@\"},"
                            "\"max_claims\":6,\"idle_hibernate_seconds\":@IDLE@,\"pools\":[]@EXTRA@}";
static const char *extra = "";
static struct sbxd_proc P;
static const char *skip_reason;

static void config_with(int idle, char *cfg, size_t cap) {
  char *at, rest[512];
  snprintf(cfg, cap, "%s", CONFIG);
  at = strstr(cfg, "@IDLE@");
  snprintf(rest, sizeof rest, "%s", at + 6);
  snprintf(at, cap - (size_t)(at - cfg), "%d%s", idle, rest);
  at = strstr(cfg, "@EXTRA@");
  snprintf(rest, sizeof rest, "%s", at + 7);
  snprintf(at, cap - (size_t)(at - cfg), "%s%s", extra, rest);
}

static int start_with_idle(int idle) {
  char cfg[1024];
  config_with(idle, cfg, sizeof cfg);
  sbxd_prepare(&P, cfg);
  return sbxd_start(&P);
}

static int setup(void **state) {
  (void)state;
  skip_reason = NULL;
  if (geteuid() != 0) {
    skip_reason = "needs root";
    return 0;
  }
  return start_with_idle(0) < 0 ? -1 : 0;
}
static int setup_idle(void **state) {
  (void)state;
  skip_reason = NULL;
  if (geteuid() != 0) {
    skip_reason = "needs root";
    return 0;
  }
  return start_with_idle(1) < 0 ? -1 : 0;
}

static int setup_archive(void **state) {
  extra = ",\"archive_after_seconds\":2";
  int rc = setup_idle(state);
  extra = "";
  return rc;
}

static int teardown(void **state) {
  (void)state;
  if (skip_reason) return 0;
  sbxd_stop(&P, SIGTERM);
  sbxd_jail_cleanup(&P);
  return 0;
}

#define SKIP_IF_NEEDED()                             \
  do {                                               \
    if (skip_reason) {                               \
      fprintf(stderr, "skipped: %s\n", skip_reason); \
      skip();                                        \
    }                                                \
  } while (0)

static void claim(struct sbxd_claim *c) { sbxd_claim(&P, ROOT, c); }

static void sh(const struct sbxd_claim *c, const char *script, const char *want) {
  json_t *argv = json_pack("[s,s,s]", "/bin/sh", "-c", script);
  json_t *b = json_pack("{s:o}", "argv", argv);
  char *body = json_dumps(b, JSON_COMPACT);
  json_decref(b);
  int st;
  json_t *v = sbxd_exec(&P, c, body, &st);
  free(body);
  assert_int_equal(st, 200);
  if (want && strcmp(json_string_value(json_object_get(v, "stdout")), want) != 0)
    fail_msg("%s: got [%s] want [%s]", script, json_string_value(json_object_get(v, "stdout")), want);
  json_decref(v);
}

static int post(const struct sbxd_claim *c, const char *verb, const char *token, const char *body,
                struct http_resp *r) {
  char path[128];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/%s", c->id, verb);
  assert_int_equal(sbxd_http(P.port, "POST", path, token, body, r), 0);
  return r->status;
}

static int post_status(const struct sbxd_claim *c, const char *verb, const char *token, const char *body) {
  struct http_resp r;
  int s = post(c, verb, token, body, &r);
  http_resp_free(&r);
  return s;
}

static bool hibernated(const struct sbxd_claim *c) {
  char path[128];
  snprintf(path, sizeof path, "/v1/sandboxes/%s", c->id);
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "GET", path, ROOT, NULL, &r), 0);
  assert_int_equal(r.status, 200);
  json_t *v = json_loads(r.body, 0, NULL);
  bool h = json_is_true(json_object_get(v, "hibernated"));
  json_decref(v);
  http_resp_free(&r);
  return h;
}

/* pid 1 of the sandbox's jail, from the state file under data/run. */
static int init_pid(const char *vm) {
  char path[512];
  snprintf(path, sizeof path, "%s/data/run/%s/state", P.dir, vm);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int pid = -1;
  if (fscanf(f, "%d", &pid) != 1) pid = -1;
  fclose(f);
  return pid;
}

static void vm_of(const struct sbxd_claim *c, char *vm, size_t cap) {
  /* the only sandbox under data/run of a daemon without pools */
  char path[320];
  snprintf(path, sizeof path, "%s/data/run", P.dir);
  DIR *d = opendir(path);
  assert_non_null(d);
  struct dirent *de;
  vm[0] = '\0';
  while ((de = readdir(d)))
    if (de->d_name[0] != '.' && snprintf(vm, cap, "%s", de->d_name) >= (int)cap) fail_msg("vm name too long");
  closedir(d);
  (void)c;
  assert_true(vm[0] != '\0');
}

static long counter(int pid) {
  char p[128], buf[32] = "";
  snprintf(p, sizeof p, "/proc/%d/root/tmp/counter", pid);
  FILE *f = fopen(p, "r");
  if (!f) return -1;
  if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
  fclose(f);
  return atol(buf);
}

static const char *COUNTER = "nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c.n; mv /tmp/c.n /tmp/counter; "
                             "sleep 0.02; done' >/dev/null 2>&1 &";

static int usage_count(const char *ev) {
  char path[320], line[4096], needle[64];
  snprintf(path, sizeof path, "%s/data/usage.jsonl", P.dir);
  snprintf(needle, sizeof needle, "\"ev\":\"%s\"", ev);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

static void test_hibernate_freezes_and_exec_wakes(void **state) {
  SKIP_IF_NEEDED();
  struct sbxd_claim c;
  claim(&c);
  char vm[128];
  vm_of(&c, vm, sizeof vm);
  int pid = init_pid(vm);
  assert_true(pid > 0);
  sh(&c, COUNTER, NULL);
  while (counter(pid) < 3) usleep(20000);
  /* auth first: no bearer 401, a wrong token 404 */
  assert_int_equal(post_status(&c, "hibernate", NULL, NULL), 401);
  assert_int_equal(post_status(&c, "hibernate", "0123456789abcdef0123456789abcdef", NULL), 404);
  struct http_resp r;
  assert_int_equal(post(&c, "hibernate", c.token, NULL, &r), 204);
  assert_non_null(strstr(r.head, "Sandbox-Keeps: memory"));
  http_resp_free(&r);
  assert_true(hibernated(&c));
  long c1 = counter(pid);
  usleep(300000);
  assert_int_equal(counter(pid), c1); /* no CPU while hibernated */
  assert_int_equal(post_status(&c, "hibernate", c.token, NULL), 204); /* idempotent */
  assert_int_equal(usage_count("hibernate"), 1);
  /* exec wakes it transparently, with its processes where they were */
  sh(&c, "echo hi", "hi\n");
  assert_false(hibernated(&c));
  for (int i = 0; i < 500 && counter(pid) <= c1; i++) usleep(20000);
  assert_true(counter(pid) > c1);
  assert_int_equal(usage_count("wake"), 1);
  /* explicit wake, and wake of a running sandbox: 204 both; root by id too */
  assert_int_equal(post_status(&c, "hibernate", ROOT, NULL), 204);
  assert_int_equal(post_status(&c, "wake", c.token, NULL), 204);
  assert_int_equal(post_status(&c, "wake", c.token, NULL), 204);
  assert_false(hibernated(&c));
  assert_int_equal(usage_count("wake"), 2);
  /* one transition at a time: two wakes sent together both answer 204
   * after one wake */
  assert_int_equal(post_status(&c, "hibernate", c.token, NULL), 204);
  int fds[2];
  for (int i = 0; i < 2; i++) {
    fds[i] = sbxd_connect(P.port);
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/sandboxes/%s/wake HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Authorization: Bearer %s\r\n\r\n",
                     c.id, c.token);
    assert_int_equal(write_all_fd(fds[i], req, (size_t)n), 0);
  }
  for (int i = 0; i < 2; i++) {
    struct http_resp r;
    assert_int_equal(http_read_resp(fds[i], &r), 0);
    assert_int_equal(r.status, 204);
    http_resp_free(&r);
    close(fds[i]);
  }
  assert_int_equal(usage_count("wake"), 3);
}

static void test_agent_dial_wakes(void **state) {
  SKIP_IF_NEEDED();
  struct sbxd_claim c;
  claim(&c);
  assert_int_equal(post_status(&c, "hibernate", c.token, NULL), 204);
  assert_true(hibernated(&c));
  char buf[8192];
  int fd = sbxd_agent_open(&P, &c, "silkd", "{\"v\":1,\"op\":\"info\"}\n", buf, sizeof buf);
  assert_non_null(strstr(buf + SBXD_AGENT_101_LEN, "\"type\":\"info\""));
  close(fd);
  assert_false(hibernated(&c));
}

static json_t *fork_req(const struct sbxd_claim *c, const char *token, const char *body, int *status) {
  struct http_resp r;
  *status = post(c, "fork", token, body, &r);
  json_t *v = json_loads(r.body, 0, NULL);
  if (*status != 200 && *status != 400 && *status != 429 && *status != 404) fprintf(stderr, "fork: %s\n", r.body);
  http_resp_free(&r);
  return v;
}

static void test_fork_children_independent(void **state) {
  SKIP_IF_NEEDED();
  struct sbxd_claim c;
  claim(&c);
  sh(&c, "echo parent > /root/p", NULL);
  int st;
  char body[256];
  /* bad input first: count, token */
  json_decref(fork_req(&c, ROOT, "{\"count\":0}", &st));
  assert_int_equal(st, 400);
  json_decref(fork_req(&c, ROOT, "{\"count\":17}", &st));
  assert_int_equal(st, 400);
  json_decref(fork_req(&c, ROOT, "{\"count\":\"2\"}", &st));
  assert_int_equal(st, 400);
  json_decref(fork_req(&c, ROOT, "{\"count\":1,\"token\":\"0123456789abcdef0123456789abcdef\"}", &st));
  assert_int_equal(st, 404);
  /* node cap 6, one claimed: 6 children cannot all fit, so none is made */
  json_decref(fork_req(&c, ROOT, "{\"count\":6}", &st));
  assert_int_equal(st, 429);
  assert_int_equal(sbxd_count_sandboxes(&P), 1);
  snprintf(body, sizeof body, "{\"count\":3,\"token\":\"%s\",\"claim_ref_prefix\":\"kid-\"}", c.token);
  json_t *v = fork_req(&c, ROOT, body, &st);
  assert_int_equal(st, 200);
  assert_string_equal(json_string_value(json_object_get(v, "keeps")), "filesystem");
  json_t *kids = json_object_get(v, "children");
  assert_int_equal(json_array_size(kids), 3);
  struct sbxd_claim k[3];
  for (size_t i = 0; i < 3; i++) {
    json_t *o = json_array_get(kids, i);
    snprintf(k[i].id, sizeof k[i].id, "%s", json_string_value(json_object_get(o, "id")));
    snprintf(k[i].token, sizeof k[i].token, "%s", json_string_value(json_object_get(o, "token")));
    sh(&k[i], "cat /root/p", "parent\n");
    char script[128];
    snprintf(script, sizeof script, "echo %zu > /root/mine", i);
    sh(&k[i], script, NULL);
  }
  json_decref(v);
  for (size_t i = 0; i < 3; i++) {
    char want[8];
    snprintf(want, sizeof want, "%zu\n", i);
    sh(&k[i], "cat /root/mine", want);
  }
  sh(&c, "test ! -e /root/mine && echo ok", "ok\n");
  assert_int_equal(usage_count("fork"), 1);
  /* a child's own fork (its image stacks over the shared one) and a
   * checkpoint of it see both layers' files */
  snprintf(body, sizeof body, "{\"count\":1,\"token\":\"%s\"}", k[1].token);
  v = fork_req(&k[1], ROOT, body, &st);
  assert_int_equal(st, 200);
  struct sbxd_claim g;
  json_t *g0 = json_array_get(json_object_get(v, "children"), 0);
  snprintf(g.id, sizeof g.id, "%s", json_string_value(json_object_get(g0, "id")));
  snprintf(g.token, sizeof g.token, "%s", json_string_value(json_object_get(g0, "token")));
  json_decref(v);
  sh(&g, "cat /root/p /root/mine", "parent\n1\n");
  snprintf(body, sizeof body, "{\"token\":\"%s\"}", k[1].token);
  struct http_resp cr;
  assert_int_equal(post(&k[1], "checkpoint", ROOT, body, &cr), 200);
  http_resp_free(&cr);
  /* claim_ref from the prefix */
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "GET", "/v1/sandboxes?claim_ref=kid-2", ROOT, NULL, &r), 0);
  assert_non_null(strstr(r.body, k[2].id));
  http_resp_free(&r);
  /* a hibernated parent forks without waking */
  assert_int_equal(post_status(&c, "hibernate", c.token, NULL), 204);
  json_decref(fork_req(&c, ROOT, "{\"count\":1}", &st));
  assert_int_equal(st, 200);
  assert_true(hibernated(&c));
  /* the forks' transient images are gone once their children are ready */
  char imgs[320];
  snprintf(imgs, sizeof imgs, "%s/data/images", P.dir);
  DIR *d = opendir(imgs);
  int left = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) left += de->d_name[0] != '.';
  if (d) closedir(d);
  assert_int_equal(left, 0);
  /* the lifecycle counters saw both forks and the hibernate */
  struct http_resp m;
  assert_int_equal(sbxd_http(P.port, "GET", "/metrics", ROOT, NULL, &m), 0);
  assert_non_null(strstr(m.body, "sandboxd_forks_total 3\n"));
  assert_non_null(strstr(m.body, "sandboxd_checkpoints_total 1\n"));
  assert_non_null(strstr(m.body, "sandboxd_hibernates_total 1\n"));
  http_resp_free(&m);
}

/* Mounts of this daemon's data directory seen from the host. */
static int host_mounts(void) {
  FILE *f = fopen("/proc/self/mountinfo", "r");
  char line[4096];
  int n = 0;
  while (f && fgets(line, sizeof line, f)) n += strstr(line, P.dir) != NULL;
  if (f) fclose(f);
  return n;
}

static int child_cgroups(void) {
  char cg[320];
  snprintf(cg, sizeof cg, "/sys/fs/cgroup/freezer/%s", P.cgroup);
  DIR *d = opendir(cg);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (de->d_type == DT_DIR && de->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}

static int setup_fail_child(void **state) {
  setenv("SANDBOXD_TEST_FORK_FAIL_CHILD", "2", 1); /* the daemon's test aid */
  int rc = setup(state);
  unsetenv("SANDBOXD_TEST_FORK_FAIL_CHILD");
  return rc;
}

/* §5.8 step 4: one child of four fails to start, so none is kept: no
 * lease, sandbox, cgroup, mount or image copy is left, the caller gets a
 * 500, and the parent runs on. */
static void test_fork_failing_child_rolls_back_all(void **state) {
  SKIP_IF_NEEDED();
  struct sbxd_claim c;
  claim(&c);
  sh(&c, "echo parent > /root/p", NULL);
  int mounts = host_mounts();
  int st;
  json_decref(fork_req(&c, ROOT, "{\"count\":4}", &st));
  assert_int_equal(st, 500);
  /* the started children are destroyed on workers after the answer */
  for (int i = 0; i < 1000 && (sbxd_count_sandboxes(&P) != 1 || child_cgroups() != 1); i++) usleep(10000);
  assert_int_equal(sbxd_count_sandboxes(&P), 1);
  assert_int_equal(child_cgroups(), 1);
  assert_int_equal(host_mounts(), mounts);
  assert_int_equal(usage_count("fork"), 0);
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "GET", "/v1/sandboxes", ROOT, NULL, &r), 0);
  json_t *rows = json_loads(r.body, 0, NULL);
  http_resp_free(&r);
  json_t *arr = json_is_array(rows) ? rows : json_object_get(rows, "sandboxes");
  assert_int_equal(json_array_size(arr), 1);
  json_decref(rows);
  char path[320];
  snprintf(path, sizeof path, "%s/data/run/.images", P.dir);
  DIR *d = opendir(path);
  int left = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (de->d_name[0] != '.') left++;
  if (d) closedir(d);
  assert_int_equal(left, 0);
  snprintf(path, sizeof path, "%s/data/images", P.dir);
  d = opendir(path);
  left = 0;
  while (d && (de = readdir(d)))
    if (de->d_name[0] != '.') left++;
  if (d) closedir(d);
  assert_int_equal(left, 0);
  sh(&c, "cat /root/p", "parent\n");
}

static void test_kill9_keeps_hibernated_and_fork_leaves_nothing(void **state) {
  SKIP_IF_NEEDED();
  struct sbxd_claim c;
  claim(&c);
  assert_int_equal(post_status(&c, "hibernate", c.token, NULL), 204);
  assert_int_equal(sbxd_stop(&P, SIGKILL), 128 + SIGKILL);
  assert_int_equal(sbxd_start(&P), 0);
  assert_true(hibernated(&c)); /* the freezer's state is the kernel's */
  sh(&c, "echo back", "back\n");
  assert_false(hibernated(&c));
  /* kill -9 while a fork of 4 is in flight: after the restart only the
   * parent exists, and no image, layer copy or cgroup is left */
  sh(&c, "dd if=/dev/zero of=/root/big bs=1M count=32 2>/dev/null", NULL);
  int fd = sbxd_connect(P.port);
  char req[512];
  int n = snprintf(req, sizeof req,
                   "POST /v1/sandboxes/%s/fork HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ROOT
                   "\r\nContent-Length: 11\r\n\r\n{\"count\":4}",
                   c.id);
  assert_int_equal(write_all_fd(fd, req, (size_t)n), 0);
  /* killed once the fork's image exists: children are committed only
   * after it is gone, so this is before any commit */
  char imgs[320];
  snprintf(imgs, sizeof imgs, "%s/data/images", P.dir);
  for (int i = 0; i < 2000; i++) {
    DIR *id = opendir(imgs);
    struct dirent *ie;
    bool seen = false;
    while (id && (ie = readdir(id)))
      seen |= strncmp(ie->d_name, "fork-", 5) == 0;
    if (id) closedir(id);
    if (seen) break;
    usleep(1000);
  }
  assert_int_equal(sbxd_stop(&P, SIGKILL), 128 + SIGKILL);
  close(fd);
  assert_int_equal(sbxd_start(&P), 0);
  assert_int_equal(sbxd_count_sandboxes(&P), 1);
  char path[320];
  snprintf(path, sizeof path, "%s/data/images", P.dir);
  assert_int_not_equal(access(path, F_OK), 0);
  snprintf(path, sizeof path, "%s/data/run/.images", P.dir);
  DIR *d = opendir(path);
  int left = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (de->d_name[0] != '.') left++;
  if (d) closedir(d);
  assert_int_equal(left, 0);
  char cg[320];
  snprintf(cg, sizeof cg, "/sys/fs/cgroup/freezer/%s", P.cgroup);
  d = opendir(cg);
  int cgs = 0;
  while (d && (de = readdir(d)))
    if (de->d_type == DT_DIR && de->d_name[0] != '.') cgs++;
  if (d) closedir(d);
  assert_int_equal(cgs, 1);
  sh(&c, "ls -la /root/big | wc -l", "1\n");
}

static void test_idle_auto_hibernate(void **state) {
  SKIP_IF_NEEDED();
  struct sbxd_claim c;
  claim(&c);
  /* the sweep runs every 5 s; 1 s idle is enough */
  bool h = false;
  for (int i = 0; i < 150 && !(h = hibernated(&c)); i++) usleep(100000);
  assert_true(h);
  sh(&c, "echo awake", "awake\n");
  assert_false(hibernated(&c));
}

static bool archived(const struct sbxd_claim *c, char *deadline, size_t cap) {
  char path[128];
  snprintf(path, sizeof path, "/v1/sandboxes/%s", c->id);
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "GET", path, ROOT, NULL, &r), 0);
  json_t *v = json_loads(r.body, 0, NULL);
  bool a = json_is_true(json_object_get(v, "archived"));
  if (deadline) snprintf(deadline, cap, "%s", json_string_value(json_object_get(v, "deadline")) ?: "");
  json_decref(v);
  http_resp_free(&r);
  return a;
}

static void test_idle_archive_and_wake(void **state) {
  SKIP_IF_NEEDED();
  struct sbxd_claim c;
  claim(&c);
  sh(&c, "echo kept > /root/kept", NULL);
  bool a = false;
  for (int i = 0; i < 300 && !(a = archived(&c, NULL, 0)); i++) usleep(100000);
  assert_true(a);
  assert_true(hibernated(&c));
  for (int i = 0; i < 100 && sbxd_count_sandboxes(&P) != 0; i++) usleep(50000); /* destroyed on a worker */
  assert_int_equal(sbxd_count_sandboxes(&P), 0); /* its instance is gone */
  assert_int_equal(usage_count("archive"), 1);
  assert_int_equal(post_status(&c, "renew", c.token, "{}"), 409);
  /* archives are not checkpoints: never listed */
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "GET", "/v1/checkpoints", ROOT, NULL, &r), 0);
  assert_non_null(strstr(r.body, "\"checkpoints\":[]"));
  http_resp_free(&r);
  /* it stays archived across a kill -9 */
  assert_int_equal(sbxd_stop(&P, SIGKILL), 128 + SIGKILL);
  assert_int_equal(sbxd_start(&P), 0);
  assert_true(archived(&c, NULL, 0));
  /* a use wakes it: same id and token, its files, a fresh lease */
  sh(&c, "cat /root/kept", "kept\n");
  char dl[64];
  assert_false(archived(&c, dl, sizeof dl));
  assert_int_equal(usage_count("unarchive"), 1);
  assert_int_equal(sbxd_count_sandboxes(&P), 1);
  assert_int_equal(post_status(&c, "renew", c.token, "{}"), 200);
}

static int setup_archive_no_idle(void **state) {
  extra = ",\"archive_after_seconds\":1";
  int rc = setup(state);
  extra = "";
  return rc;
}

/* kill -9 while the archive tier exports a hibernated sandbox: after the
 * restart (archiving now off, so nothing moves on) it is archived (no
 * instance, one record) or hibernated (its instance, no record), and a
 * use brings back its files with nothing left over. */
static void test_kill9_mid_archive_old_or_new(void **state) {
  SKIP_IF_NEEDED();
  struct sbxd_claim c;
  claim(&c);
  sh(&c, "mkdir /root/many && cd /root/many && for i in $(seq 1 3000); do echo $i > f$i; done; "
         "dd if=/dev/urandom of=/root/big bs=1M count=64 2>/dev/null; echo kept > /root/kept",
     NULL);
  assert_int_equal(post_status(&c, "hibernate", c.token, NULL), 204);
  char store[320];
  snprintf(store, sizeof store, "%s/data/checkpoints", P.dir);
  bool seen = false;
  for (int i = 0; i < 20000 && !seen; i++) { /* the tick runs every 5 s */
    DIR *d = opendir(store);
    struct dirent *de;
    while (d && (de = readdir(d))) seen |= strncmp(de->d_name, "ck_", 3) == 0;
    if (d) closedir(d);
    if (!seen) usleep(500);
  }
  assert_true(seen);
  assert_int_equal(sbxd_stop(&P, SIGKILL), 128 + SIGKILL);
  char cfg[1024];
  config_with(0, cfg, sizeof cfg); /* archive_after_seconds off from here */
  sbxd_write_config(&P, cfg);
  assert_int_equal(sbxd_start(&P), 0);
  DIR *d = opendir(store);
  int records = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) records += de->d_name[0] != '.';
  if (d) closedir(d);
  if (archived(&c, NULL, 0)) {
    assert_int_equal(sbxd_count_sandboxes(&P), 0);
    assert_int_equal(records, 1);
  } else {
    assert_true(hibernated(&c));
    assert_int_equal(sbxd_count_sandboxes(&P), 1);
    assert_int_equal(records, 0);
  }
  sh(&c, "cat /root/kept", "kept\n");
  assert_false(archived(&c, NULL, 0));
  assert_int_equal(sbxd_count_sandboxes(&P), 1);
  assert_int_equal(child_cgroups(), 1);
  d = opendir(store);
  records = 0;
  while (d && (de = readdir(d))) records += de->d_name[0] != '.';
  if (d) closedir(d);
  assert_int_equal(records, 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_hibernate_freezes_and_exec_wakes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_agent_dial_wakes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fork_children_independent, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fork_failing_child_rolls_back_all, setup_fail_child, teardown),
      cmocka_unit_test_setup_teardown(test_kill9_keeps_hibernated_and_fork_leaves_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idle_auto_hibernate, setup_idle, teardown),
      cmocka_unit_test_setup_teardown(test_idle_archive_and_wake, setup_archive, teardown),
      cmocka_unit_test_setup_teardown(test_kill9_mid_archive_old_or_new, setup_archive_no_idle, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
