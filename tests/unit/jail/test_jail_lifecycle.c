/* Lifecycle of real jails: clone -> ready through the agent channel,
 * pause/resume and stats, golden build with warmup, reconcile after a
 * "restart", and many create/destroy cycles that must leave nothing behind.
 *
 * The agent is this very program in fake-agent mode (jail_test.h), so the
 * driver's contract with silkd is exercised independently of silkd. */
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include "jail_test.h"

#define CYCLES 500

static jt T;

static int setup(void **state) {
  (void)state;
  return jt_open_with_agent(&T) < 0 ? -1 : 0;
}
static int teardown(void **state) {
  (void)state;
  jt_close(&T);
  return 0;
}

static int clone_agent(const char *id, sbx_instance **s, sbx_error *err) {
  sbx_clone_spec spec;
  sbx_clone_spec_init(&spec);
  spec.id = id;
  return sbx_sandbox_clone(T.drv, T.golden, &spec, s, err);
}

/* ---- what "nothing left behind" counts ---- */
static int count_lines(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, f))
    if (!needle || strstr(line, needle)) n++;
  fclose(f);
  return n;
}
static int count_children(void) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int n = 0, c;
  bool in = false;
  while ((c = fgetc(f)) != EOF) {
    if (c >= '0' && c <= '9') {
      if (!in) n++;
      in = true;
    } else {
      in = false;
    }
  }
  fclose(f);
  return n;
}
static int count_cgroups(void) {
  static const char *const ctls[] = {"memory", "pids", "cpu", "cpuacct", "freezer", "devices"};
  int n = 0;
  for (size_t i = 0; i < 6; i++) {
    char p[256];
    snprintf(p, sizeof p, "/sys/fs/cgroup/%s/%s", ctls[i], T.cgroup);
    int c = jt_count_dir(p);
    if (c > 0) {
      /* only subdirectories are sandboxes; the rest are control files */
      DIR *d = opendir(p);
      struct dirent *de;
      while ((de = readdir(d)) != NULL)
        if (de->d_type == DT_DIR && de->d_name[0] != '.') n++;
      closedir(d);
    }
  }
  return n;
}

typedef struct footprint {
  int mounts, fds, children, cgroups, scratch;
} footprint;

static footprint measure(void) {
  footprint f = {
      count_lines("/proc/self/mountinfo", NULL),
      jt_count_dir("/proc/self/fd"),
      count_children(),
      count_cgroups(),
      jt_count_dir(T.run_dir),
  };
  return f;
}

static void assert_same(footprint a, footprint b) {
  assert_int_equal(a.mounts, b.mounts);
  assert_int_equal(a.fds, b.fds);
  assert_int_equal(a.children, b.children);
  assert_int_equal(a.cgroups, b.cgroups);
  assert_int_equal(a.scratch, b.scratch);
}

static void test_clone_ready_connect(void **state) {
  (void)state;
  sbx_error err = {0};
  sbx_instance *s = NULL;
  assert_int_equal(clone_agent("lc-ready", &s, &err), 0);
  assert_string_equal(sbx_instance_id(s), "lc-ready");
  assert_true(sbx_instance_pid(s) > 1);
  /* ready means a fresh connection answers info right away, again */
  int fd = -1;
  assert_int_equal(sbx_sandbox_connect(s, &fd, &err), 0);
  assert_int_equal(sbx_ready_probe(fd, 5000, &err), 0);
  close(fd);
  /* Its v1 device list is exactly the jail's /dev, whether written for it
   * or copied from the driver's cgroup when it was made. */
  char path[256], list[1024];
  snprintf(path, sizeof path, "/sys/fs/cgroup/devices/%s/lc-ready/devices.list", T.cgroup);
  FILE *f = fopen(path, "r");
  if (f) {
    size_t n = fread(list, 1, sizeof list - 1, f);
    list[n] = '\0';
    fclose(f);
    assert_string_equal(list, "c 1:3 rwm\nc 1:5 rwm\nc 1:7 rwm\nc 1:8 rwm\nc 1:9 rwm\nc 5:0 rwm\nc 5:2 rwm\nc 136:* rwm\n");
  }
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

static void test_duplicate_id_refused(void **state) {
  (void)state;
  sbx_error err = {0};
  sbx_instance *a = NULL, *b = NULL;
  assert_int_equal(clone_agent("lc-dup", &a, &err), 0);
  assert_int_equal(clone_agent("lc-dup", &b, &err), SBX_E_EXISTS);
  assert_null(b);
  assert_int_equal(clone_agent("../evil", &b, &err), SBX_E_INVAL);
  assert_int_equal(sbx_sandbox_destroy(a, &err), 0);
}

static void test_pause_resume_stats(void **state) {
  (void)state;
  sbx_error err = {0};
  sbx_instance *s = NULL;
  assert_int_equal(clone_agent("lc-pause", &s, &err), 0);
  sbx_stats st;
  assert_int_equal(sbx_sandbox_stats(s, &st, &err), 0);
  const sbx_size_tier *small = sbx_size_tier_get("small");
  assert_int_equal(st.mem_limit, small->mem_bytes);
  assert_int_equal(st.pids_max, small->pids_max);
  assert_int_equal(st.pids, 1);
  assert_true(st.mem_bytes > 0);
  assert_true(st.cpu_ns > 0);
  assert_int_equal(sbx_sandbox_pause(s, &err), 0);
  char path[256], buf[32] = "";
  snprintf(path, sizeof path, "/proc/%d/stat", (int)sbx_instance_pid(s));
  assert_int_equal(sbx_sandbox_resume(s, &err), 0);
  int fd = -1;
  assert_int_equal(sbx_sandbox_connect(s, &fd, &err), 0);
  assert_int_equal(sbx_ready_probe(fd, 5000, &err), 0);
  close(fd);
  (void)buf;
  /* images are tested in test_jail_image.c; a relative directory is refused */
  assert_int_equal(sbx_sandbox_snapshot(s, "relative/dir", &err), SBX_E_INVAL);
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

static void test_paused_agent_does_not_answer(void **state) {
  (void)state;
  sbx_error err = {0};
  sbx_instance *s = NULL;
  assert_int_equal(clone_agent("lc-frozen", &s, &err), 0);
  assert_int_equal(sbx_sandbox_pause(s, &err), 0);
  int fd = -1;
  assert_int_equal(sbx_sandbox_connect(s, &fd, &err), 0);
  assert_int_equal(sbx_ready_probe(fd, 200, &err), SBX_E_TIMEOUT);
  close(fd);
  /* destroy must work on a frozen jail too */
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

static void test_golden_with_warmup(void **state) {
  (void)state;
  sbx_error err = {0};
  const char *warmup[] = {"/bin/sh", "-c", "echo warm > /etc/sbx-golden-marker && mkdir -p /opt/warm", NULL};
  char key[64];
  snprintf(key, sizeof key, "test-%d", (int)getpid());
  sbx_golden_spec gs = SBX_GOLDEN_SPEC_INIT(.key = key, .warmup = warmup);
  sbx_golden *g = NULL;
  assert_int_equal(sbx_golden_build(T.drv, T.tpl, &gs, &g, &err), 0);
  sbx_golden *saved = T.golden;
  T.golden = g;
  char out[256];
  int code = jt_run(&T, "lc-golden", "cat /etc/sbx-golden-marker; test -d /opt/warm && echo dir", out, sizeof out);
  T.golden = saved;
  assert_int_equal(code, 0);
  assert_string_equal(out, "warm\ndir\n");
  assert_int_not_equal(access("/etc/sbx-golden-marker", F_OK), 0);
  /* a second build adopts the existing golden instead of rebuilding */
  sbx_golden *g2 = NULL;
  const char *fail_warmup[] = {"/bin/false", NULL};
  sbx_golden_spec gs2 = SBX_GOLDEN_SPEC_INIT(.key = key, .warmup = fail_warmup);
  assert_int_equal(sbx_golden_build(T.drv, T.tpl, &gs2, &g2, &err), 0);
  sbx_golden_release(T.drv, g2);
  sbx_golden_release(T.drv, g);
  /* a failing warmup leaves no golden behind */
  char key2[64];
  snprintf(key2, sizeof key2, "test-fail-%d", (int)getpid());
  sbx_golden_spec gs3 = SBX_GOLDEN_SPEC_INIT(.key = key2, .warmup = fail_warmup);
  assert_int_equal(sbx_golden_build(T.drv, T.tpl, &gs3, &g2, &err), SBX_E_REMOTE);
  char p[256];
  snprintf(p, sizeof p, JT_STATE "/goldens/%s", key2);
  assert_int_not_equal(access(p, F_OK), 0);
  int gfd = open(JT_STATE "/goldens", O_PATH | O_DIRECTORY);
  extern int sbxi_rm_rf_at(int, const char *, sbx_error *);
  assert_int_equal(sbxi_rm_rf_at(gfd, key, &err), 0);
  close(gfd);
}

static int adopted_seen;
static sbx_instance *adopted_inst;
static bool decide(void *ud, const sbx_found *f, sbx_instance *s) {
  const char *keep = ud;
  if (!s) return false;
  if (strcmp(f->id, keep) == 0) {
    adopted_seen++;
    adopted_inst = s;
    return true;
  }
  return false;
}

static void test_reconcile_adopts_and_removes(void **state) {
  (void)state;
  sbx_error err = {0};
  sbx_instance *keep = NULL, *drop = NULL;
  assert_int_equal(clone_agent("lc-keep", &keep, &err), 0);
  assert_int_equal(clone_agent("lc-drop", &drop, &err), 0);
  pid_t drop_pid = sbx_instance_pid(drop);
  /* a second driver over the same directories plays the restarted host */
  sbx_driver *d2 = NULL;
  sbx_driver_config cfg =
      SBX_DRIVER_CONFIG_INIT(.templates_dir = JT_STATE "/templates", .goldens_dir = JT_STATE "/goldens",
                             .run_dir = T.run_dir, .silkd_path = "/proc/self/exe", .cgroup_name = T.cgroup);
  assert_int_equal(sbx_driver_open("jail", &cfg, &d2, &err), 0);
  adopted_seen = 0;
  assert_int_equal(sbx_driver_reconcile(d2, decide, (void *)"lc-keep", &err), 1);
  assert_int_equal(adopted_seen, 1);
  /* the removed one is dead (a zombie until its real parent, us, reaps it) */
  int st;
  assert_int_equal(waitpid(drop_pid, &st, 0), drop_pid);
  /* the adopted one still answers through the new handle */
  int fd = -1;
  assert_int_equal(sbx_sandbox_connect(adopted_inst, &fd, &err), 0);
  assert_int_equal(sbx_ready_probe(fd, 5000, &err), 0);
  close(fd);
  assert_int_equal(sbx_sandbox_destroy(adopted_inst, &err), 0);
  sbx_driver_close(d2);
  /* the old handles only release what is left (nothing) */
  assert_int_equal(sbx_sandbox_destroy(keep, &err), 0);
  sbx_error e2 = {0};
  sbx_sandbox_destroy(drop, &e2);
}

static bool adopt_nothing(void *ud, const sbx_found *f, sbx_instance *s) {
  (void)f;
  (void)s;
  (*(int *)ud)++;
  return false;
}

/* Two drivers sharing a cgroup parent but not a run_dir (two daemons, or a
 * test beside a daemon): reconcile of one must not touch the other's jail. */
static void test_reconcile_spares_foreign_jails(void **state) {
  (void)state;
  sbx_error err = {0};
  sbx_instance *mine = NULL;
  assert_int_equal(clone_agent("lc-foreign", &mine, &err), 0);
  char other_run[160];
  snprintf(other_run, sizeof other_run, "%s-other", T.run_dir);
  sbx_driver *d2 = NULL;
  sbx_driver_config cfg =
      SBX_DRIVER_CONFIG_INIT(.templates_dir = JT_STATE "/templates", .goldens_dir = JT_STATE "/goldens",
                             .run_dir = other_run, .silkd_path = "/proc/self/exe", .cgroup_name = T.cgroup);
  assert_int_equal(sbx_driver_open("jail", &cfg, &d2, &err), 0);
  int seen = 0;
  assert_int_equal(sbx_driver_reconcile(d2, adopt_nothing, &seen, &err), 0);
  assert_int_equal(seen, 0);
  sbx_driver_close(d2);
  rmdir(other_run);
  assert_int_equal(kill(sbx_instance_pid(mine), 0), 0);
  int fd = -1;
  assert_int_equal(sbx_sandbox_connect(mine, &fd, &err), 0);
  assert_int_equal(sbx_ready_probe(fd, 5000, &err), 0);
  close(fd);
  assert_int_equal(sbx_sandbox_destroy(mine, &err), 0);
}

static int count_ns_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL) {
    char path[300], link[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", de->d_name);
    ssize_t l = readlink(path, link, sizeof link - 1);
    if (l <= 0) continue;
    link[l] = '\0';
    if (strncmp(link, "net:[", 5) == 0 || strncmp(link, "ipc:[", 5) == 0) n++;
  }
  if (d) closedir(d);
  return n;
}

/* The driver keeps a few fresh network and IPC namespaces ready (as fds);
 * closing it must release every one of them, and a clone must never hand
 * out one that another sandbox has. */
static void test_namespace_pool_released_on_close(void **state) {
  (void)state;
  sbx_error err = {0};
  int fds0 = jt_count_dir("/proc/self/fd"), ns0 = count_ns_fds();
  sbx_driver *d2 = NULL;
  char other_run[160];
  snprintf(other_run, sizeof other_run, "%s-pool", T.run_dir);
  sbx_driver_config cfg =
      SBX_DRIVER_CONFIG_INIT(.templates_dir = JT_STATE "/templates", .goldens_dir = JT_STATE "/goldens",
                             .run_dir = other_run, .silkd_path = "/proc/self/exe", .cgroup_name = T.cgroup);
  assert_int_equal(sbx_driver_open("jail", &cfg, &d2, &err), 0);
  assert_true(count_ns_fds() > ns0); /* the stock is there */
  sbx_driver_close(d2);
  rmdir(other_run);
  assert_int_equal(count_ns_fds(), ns0);
  assert_int_equal(jt_count_dir("/proc/self/fd"), fds0);
}

static void test_cycles_leave_nothing(void **state) {
  (void)state;
  sbx_error err = {0};
  footprint before = measure();
  uint64_t t0 = sbx_now_ns();
  for (int i = 0; i < CYCLES; i++) {
    char id[32];
    snprintf(id, sizeof id, "lc-cycle-%d", i);
    sbx_instance *s = NULL;
    int rc = clone_agent(id, &s, &err);
    if (rc < 0) fail_msg("cycle %d: %s", i, err.msg);
    rc = sbx_sandbox_destroy(s, &err);
    if (rc < 0) fail_msg("cycle %d destroy: %s", i, err.msg);
  }
  fprintf(stderr, "%d create/destroy cycles in %.2f s\n", CYCLES, (double)(sbx_now_ns() - t0) / 1e9);
  assert_same(before, measure());
}

static void test_failed_clone_leaves_nothing(void **state) {
  (void)state;
  sbx_error err = {0};
  footprint before = measure();
  /* pid 1 that cannot be exec'd: the child reports, the parent cleans up */
  const char *argv[] = {"/nonexistent/init", NULL};
  sbx_clone_spec spec;
  sbx_clone_spec_init(&spec);
  spec.id = "lc-fail";
  sbx_instance *s = NULL;
  assert_int_equal(sbxi_sandbox_clone_init(T.drv, T.golden, &spec, argv, NULL, &s, &err), SBX_E_NOTFOUND);
  assert_int_equal(err.os_errno, ENOENT);
  assert_non_null(strstr(err.msg, "exec"));
  assert_null(s);
  assert_same(before, measure());
}

int main(int argc, char **argv) {
  if (jt_fake_agent_main(argc, argv) >= 0) return 0;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_clone_ready_connect),
      cmocka_unit_test(test_duplicate_id_refused),
      cmocka_unit_test(test_pause_resume_stats),
      cmocka_unit_test(test_paused_agent_does_not_answer),
      cmocka_unit_test(test_golden_with_warmup),
      cmocka_unit_test(test_reconcile_adopts_and_removes),
      cmocka_unit_test(test_reconcile_spares_foreign_jails),
      cmocka_unit_test(test_failed_clone_leaves_nothing),
      cmocka_unit_test(test_namespace_pool_released_on_close),
      cmocka_unit_test(test_cycles_leave_nothing),
  };
  return cmocka_run_group_tests_name("jail_lifecycle", tests, setup, teardown);
}
