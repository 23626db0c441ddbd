/* bench-lifecycle: the jail's lifecycle figures, each beside its anchor in
 * the same run.
 *
 *   hibernate (pause) / wake (resume)  p50/p99 over --n rounds (default 200)
 *   fork: image of a sandbox with a 100 MiB writable layer + 8 children
 *         ready, beside 8 golden clones ready
 *   checkpoint create of a 100 MiB, 5,000-file layer: MiB/s, beside `cp -a`
 *         of the same tree (read through the same path) to the same disk
 *   branch -> ready beside golden clone -> ready (p50 over 20)
 *   memory: 20 running beside the same 20 hibernated (host MemAvailable
 *         drop and the cgroups' charge)
 *
 * Needs root and a built silkd next to this program (or SBX_SILKD). */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandbox/agent.h>
#include <sandbox/core.h>
#include <sandbox/driver.h>

#include "core/env.h"
#include "template/layers.h"

#define DIR "/tmp/sbx-bench-lifecycle"

static sbx_driver *D;
static sbx_golden *G;
static unsigned seq;

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static double pct(uint64_t *v, size_t n, double p) {
  qsort(v, n, sizeof *v, cmp_u64);
  size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
  return (double)v[i < n ? i : n - 1] / 1e6;
}

static __attribute__((noreturn)) void die(const char *what, const sbx_error *err) {
  fprintf(stderr, "bench-lifecycle: %s: %s\n", what, err ? err->msg : "");
  exit(1);
}

static sbx_instance *clone_one(void) {
  char id[64];
  snprintf(id, sizeof id, "bl-%d-%u", (int)getpid(), seq++);
  sbx_clone_spec cs;
  sbx_clone_spec_init(&cs);
  cs.id = id;
  cs.size = sbx_size_tier_get("medium");
  sbx_instance *s;
  sbx_error err;
  if (sbx_sandbox_clone(D, G, &cs, &s, &err) < 0) die("clone", &err);
  return s;
}

static sbx_instance *restore_one(const char *img) {
  char id[64];
  snprintf(id, sizeof id, "bl-%d-%u", (int)getpid(), seq++);
  sbx_clone_spec cs;
  sbx_clone_spec_init(&cs);
  cs.id = id;
  cs.size = sbx_size_tier_get("medium");
  sbx_instance *s;
  sbx_error err;
  if (sbx_sandbox_restore(D, img, &cs, &s, &err) < 0) die("restore", &err);
  return s;
}

static void sh(sbx_instance *s, const char *script) {
  sbx_error err;
  int fd;
  sbx_agent *a = NULL;
  if (sbx_sandbox_connect(s, &fd, &err) < 0 || sbx_agent_open(fd, &a, &err) < 0) die("agent", &err);
  sbx_agent_set_timeout(a, 600000);
  sbx_buf o = SBX_BUF_INIT(1 << 20), e = SBX_BUF_INIT(1 << 20);
  const char *argv[] = {"/bin/sh", "-c", script, NULL};
  int code = -1;
  if (sbx_agent_run(a, argv, &o, &e, &code, &err) < 0 || code != 0) die(script, &err);
  sbx_buf_free(&o);
  sbx_buf_free(&e);
  sbx_agent_close(a);
}

static void destroy(sbx_instance *s) { sbx_sandbox_destroy(s, NULL); }

static void rm_img(const char *name) {
  char path[256];
  snprintf(path, sizeof path, DIR "/%s", name);
  umount2(path, MNT_DETACH); /* a RAM image's tmpfs, as sandboxd's fork does */
  int fd = open(DIR, O_PATH | O_DIRECTORY);
  sbxi_rm_rf_at(fd, name, NULL);
  close(fd);
}

static long meminfo_kib(const char *key) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  size_t kl = strlen(key);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, kl) == 0 && line[kl] == ':') v = strtol(line + kl + 1, NULL, 10);
  fclose(f);
  return v;
}

/* 100 MiB in 5,000 files: 4,999 of 4 KiB and one of the rest. */
static const char *FILL = "mkdir -p /root/data && cd /root/data && i=0; while [ $i -lt 50 ]; do mkdir d$i; j=0; "
                          "while [ $j -lt 100 ]; do head -c 4096 /dev/urandom > d$i/f$j; j=$((j+1)); done; "
                          "i=$((i+1)); done; rm d49/f99; head -c 84439040 /dev/urandom > d49/big";

int main(int argc, char **argv) {
  int n = 200;
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--n") == 0) n = atoi(argv[++i]);
  char silkd[PATH_MAX];
  const char *env = getenv("SBX_SILKD");
  if (env) {
    snprintf(silkd, sizeof silkd, "%s", env);
  } else {
    ssize_t l = readlink("/proc/self/exe", silkd, sizeof silkd - 8);
    if (l < 0) return 1;
    silkd[l] = '\0';
    strcpy(strrchr(silkd, '/') + 1, "silkd");
  }
  mkdir(DIR, 0700);
  sbx_driver_config cfg = SBX_DRIVER_CONFIG_INIT(.templates_dir = DIR "/templates", .goldens_dir = DIR "/goldens",
                                                 .run_dir = DIR "/run", .silkd_path = silkd,
                                                 .cgroup_name = "sbx-bench-lifecycle");
  sbxi_env_apply(&cfg);
  sbx_error err;
  sbx_template *t = NULL;
  sbx_template_spec ts = SBX_TEMPLATE_SPEC_INIT(.name = "host");
  if (sbx_driver_open("jail", &cfg, &D, &err) < 0 || sbx_template_prepare(D, &ts, &t, &err) < 0 ||
      sbx_golden_build(D, t, NULL, &G, &err) < 0)
    die("driver", &err);
  sbx_driver_reconcile(D, NULL, NULL, NULL);
  printf("jail driver, host template, size medium; pause keeps %s, images keep %s\n", sbx_driver_pause_keeps(D),
         sbx_driver_image_keeps(D));

  /* ---- hibernate / wake ---- */
  sbx_instance *s = clone_one();
  uint64_t *hib = calloc((size_t)n, sizeof *hib), *wak = calloc((size_t)n, sizeof *wak);
  for (int i = 0; i < n; i++) {
    uint64_t t0 = sbx_now_ns();
    if (sbx_sandbox_pause(s, &err) < 0) die("pause", &err);
    uint64_t t1 = sbx_now_ns();
    if (sbx_sandbox_resume(s, &err) < 0) die("resume", &err);
    hib[i] = t1 - t0;
    wak[i] = sbx_now_ns() - t1;
  }
  printf("hibernate (freeze)   n=%d p50 %7.3f ms  p99 %7.3f ms\n", n, pct(hib, (size_t)n, 50), pct(hib, (size_t)n, 99));
  printf("wake (thaw)          n=%d p50 %7.3f ms  p99 %7.3f ms\n", n, pct(wak, (size_t)n, 50), pct(wak, (size_t)n, 99));

  /* ---- checkpoint create of 100 MiB / 5,000 files, beside cp -a ----
   * Both synced (sandboxd syncs a checkpoint before its commit), after a
   * sync of what came before, alternating which goes first over 3 rounds,
   * medians: one copy onto this disk varies 0.3-2 s with the writeback of
   * the one before it. */
  sh(s, FILL);
  uint64_t cks[3], cps[3], t0;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "cp -a /proc/%d/fd/6/u0 " DIR "/cpa && sync -f " DIR "/cpa", (int)sbx_instance_pid(s));
  for (int r = 0; r < 3; r++) {
    for (int k = 0; k < 2; k++) {
      rm_img((k ^ (r & 1)) ? "cpa" : "ck");
      sync();
      t0 = sbx_now_ns();
      if (k ^ (r & 1)) {
        if (system(cmd) != 0) die("cp -a", NULL);
        cps[r] = sbx_now_ns() - t0;
      } else {
        if (sbx_sandbox_snapshot(s, DIR "/ck", &err) < 0) die("snapshot", &err);
        int fd = open(DIR "/ck", O_RDONLY | O_DIRECTORY);
        syncfs(fd);
        close(fd);
        cks[r] = sbx_now_ns() - t0;
      }
    }
  }
  double ck_s = pct(cks, 3, 50) / 1e3, cp_s = pct(cps, 3, 50) / 1e3;
  printf("checkpoint 100 MiB / 5000 files, synced, median of 3: %.0f MiB/s (%.3f s)   cp -a + sync of the same tree: "
         "%.0f MiB/s (%.3f s)   ratio %.2fx\n",
         100 / ck_s, ck_s, 100 / cp_s, cp_s, cp_s / ck_s);
  rm_img("cpa");

  /* ---- fork into 8 beside 8 golden clones ---- */
  sbx_instance *kids[8];
  /* as sandboxd forks: the image on a fresh tmpfs, stacked in place by
   * the children (see the driver's RAM images) */
  rm_img("fork");
  t0 = sbx_now_ns();
  if (mkdir(DIR "/fork", 0700) < 0 || mount("tmpfs", DIR "/fork", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700") < 0)
    die("tmpfs for the fork image", NULL);
  if (sbx_sandbox_snapshot(s, DIR "/fork/img", &err) < 0) die("snapshot", &err);
  double img_ms = (double)(sbx_now_ns() - t0) / 1e6;
  for (int i = 0; i < 8; i++) kids[i] = restore_one(DIR "/fork/img");
  double fork_ms = (double)(sbx_now_ns() - t0) / 1e6;
  rm_img("fork");
  for (int i = 0; i < 8; i++) destroy(kids[i]);
  t0 = sbx_now_ns();
  for (int i = 0; i < 8; i++) kids[i] = clone_one();
  double gold_ms = (double)(sbx_now_ns() - t0) / 1e6;
  for (int i = 0; i < 8; i++) destroy(kids[i]);
  printf("fork 100 MiB layer -> 8 children ready: %.1f ms (image %.1f ms)   8 golden clones ready: %.1f ms   "
         "ratio %.2fx\n",
         fork_ms, img_ms, gold_ms, fork_ms / gold_ms);

  /* ---- branch -> ready beside golden clone -> ready ---- */
  uint64_t br[20], gc[20];
  for (int i = 0; i < 20; i++) {
    t0 = sbx_now_ns();
    sbx_instance *b = restore_one(DIR "/ck");
    br[i] = sbx_now_ns() - t0;
    destroy(b);
    t0 = sbx_now_ns();
    sbx_instance *c = clone_one();
    gc[i] = sbx_now_ns() - t0;
    destroy(c);
  }
  double brp = pct(br, 20, 50), gcp = pct(gc, 20, 50);
  printf("branch (100 MiB checkpoint) -> ready p50 %.2f ms   golden clone -> ready p50 %.2f ms   ratio %.2fx\n", brp,
         gcp, brp / gcp);
  rm_img("ck");
  destroy(s);

  /* ---- memory: 20 running beside the same 20 hibernated ---- */
  sbx_instance *many[20];
  sync();
  long before = meminfo_kib("MemAvailable");
  for (int i = 0; i < 20; i++) many[i] = clone_one();
  sleep(1);
  long running = meminfo_kib("MemAvailable");
  uint64_t charge_run = 0, charge_hib = 0;
  for (int i = 0; i < 20; i++) {
    sbx_stats st;
    if (sbx_sandbox_stats(many[i], &st, &err) == 0) charge_run += st.mem_bytes;
  }
  for (int i = 0; i < 20; i++)
    if (sbx_sandbox_pause(many[i], &err) < 0) die("pause", &err);
  sleep(1);
  long hibernated = meminfo_kib("MemAvailable");
  for (int i = 0; i < 20; i++) {
    sbx_stats st;
    if (sbx_sandbox_stats(many[i], &st, &err) == 0) charge_hib += st.mem_bytes;
  }
  printf("memory, 20 running:    host %.1f MiB (%.2f MiB each), cgroup charge %.1f MiB\n",
         (double)(before - running) / 1024, (double)(before - running) / 1024 / 20, (double)charge_run / 1048576);
  printf("memory, 20 hibernated: host %.1f MiB (%.2f MiB each), cgroup charge %.1f MiB (the freezer keeps memory)\n",
         (double)(before - hibernated) / 1024, (double)(before - hibernated) / 1024 / 20, (double)charge_hib / 1048576);
  for (int i = 0; i < 20; i++) destroy(many[i]);
  free(hib);
  free(wak);
  sbx_golden_release(D, G);
  sbx_template_release(D, t);
  sbx_driver_close(D);
  /* the cgroup parent this run made, empty now, in every hierarchy */
  static const char *const ctls[] = {"memory", "pids", "cpu", "cpuacct", "freezer", "devices", ""};
  for (size_t i = 0; i < sizeof ctls / sizeof *ctls; i++) {
    char p[256];
    snprintf(p, sizeof p, "/sys/fs/cgroup/%s%ssbx-bench-lifecycle", ctls[i], ctls[i][0] ? "/" : "");
    rmdir(p);
  }
  return 0;
}
