/* bench-vm: the qemu driver's figures, in one run.
 *
 *   cold boot -> silkd answers info       p50/p90 over --n boots (default 10)
 *   clone -> silkd answers (with the fresh identity), restore_mode copy
 *   clone -> silkd answers, restore_mode mmap
 *   the clone/cold ratios
 *   density: --density idle mmap clones at once (default 10): host memory
 *   per idle clone, as the MemAvailable drop and as QEMU's PSS, against
 *   its guest RAM
 *
 * Needs root, QEMU and the guest image (built on first use from
 * scripts/build-guest-image). SBX_QEMU_ACCEL=kvm|tcg pins the accelerator. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sandbox/core.h>
#include <sandbox/driver.h>

#include "core/env.h"
#include "bench_util.h"
#include "driver/qemu/qemu.h"

static void die(const char *what, const sbx_error *err) {
  fprintf(stderr, "bench-vm: %s: %s\n", what, err->msg);
  exit(1);
}

static sbx_driver *open_driver(const char *restore, const char *base) {
  char run[PATH_MAX], tpl[PATH_MAX], gold[PATH_MAX], silkd[PATH_MAX];
  snprintf(run, sizeof run, "%s/run-%s", base, restore);
  snprintf(tpl, sizeof tpl, "%s/templates", base);
  snprintf(gold, sizeof gold, "%s/goldens", base);
  const char *env = getenv("SBX_SILKD");
  if (env) {
    snprintf(silkd, sizeof silkd, "%s", env);
  } else {
    ssize_t n = readlink("/proc/self/exe", silkd, sizeof silkd - 8);
    if (n < 0) n = 0;
    silkd[n] = '\0';
    char *slash = strrchr(silkd, '/');
    snprintf(slash ? slash + 1 : silkd, 8, "silkd");
  }
  /* SBX_QEMU_RESTORE in the environment would override the mode (below) */
  unsetenv("SBX_QEMU_RESTORE");
  sbx_driver_config cfg = SBX_DRIVER_CONFIG_INIT(.templates_dir = tpl, .goldens_dir = gold, .run_dir = run,
                                                 .silkd_path = silkd, .qemu_restore_mode = restore);
  sbxi_env_apply(&cfg);
  sbx_driver *d = NULL;
  sbx_error err = {0};
  if (sbx_driver_open("qemu", &cfg, &d, &err) < 0) die("open", &err);
  return d;
}

static void clones(sbx_driver *d, sbx_golden *g, size_t n, uint64_t *out, const char *tag) {
  for (size_t i = 0; i < n; i++) {
    char id[32];
    snprintf(id, sizeof id, "bench-%s-%zu", tag, i);
    sbx_clone_spec cs;
    sbx_clone_spec_init(&cs);
    cs.id = id;
    sbx_instance *s = NULL;
    sbx_error err = {0};
    uint64_t t0 = sbx_now_ns();
    if (sbx_sandbox_clone(d, g, &cs, &s, &err) < 0) die("clone", &err);
    out[i] = sbx_now_ns() - t0;
    if (sbx_sandbox_destroy(s, &err) < 0) die("destroy", &err);
  }
}

int main(int argc, char **argv) {
  size_t n = 10, density = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--n") == 0) n = strtoul(argv[i + 1], NULL, 10);
    if (strcmp(argv[i], "--density") == 0) density = strtoul(argv[i + 1], NULL, 10);
  }
  if (n < 1) n = 1;
  char base[] = "/tmp/bench-vm-XXXXXX";
  if (!mkdtemp(base)) {
    perror("mkdtemp");
    return 1;
  }
  sbx_driver *dc = open_driver("copy", base), *dm = open_driver("mmap", base);
  qemu_driver *qd = (qemu_driver *)dm;
  sbx_error err = {0};
  sbx_template *t = NULL;
  sbx_template_spec ts = SBX_TEMPLATE_SPEC_INIT(.name = "host");
  if (sbx_template_prepare(dm, &ts, &t, &err) < 0) die("template", &err);

  /* cold: a fresh QEMU until silkd answers (what a golden build starts with) */
  uint64_t *cold = sbx_calloc(n, sizeof *cold), *cp = sbx_calloc(n, sizeof *cp), *mm = sbx_calloc(n, sizeof *mm);
  for (size_t i = 0; i < n; i++) {
    char id[32];
    snprintf(id, sizeof id, "bench-cold-%zu", i);
    qemu_vm_args va = {.size = sbx_size_tier_get("small"), .accel = qd->accel, .agent = qd->agent};
    sbx_instance *s = NULL;
    uint64_t t0 = sbx_now_ns();
    if (qemu_vm_start(qd, id, &va, &s, &err) < 0) die("boot", &err);
    if (qemu_vm_wait_ready(s, 120000, &err) < 0) die("boot", &err);
    cold[i] = sbx_now_ns() - t0;
    qemu_vm_destroy(s, NULL);
  }
  sbx_golden *gc = NULL, *gm = NULL;
  if (sbx_golden_build(dc, t, NULL, &gc, &err) < 0) die("golden copy", &err);
  if (sbx_golden_build(dm, t, NULL, &gm, &err) < 0) die("golden mmap", &err);
  clones(dc, gc, n, cp, "copy");
  clones(dm, gm, n, mm, "mmap");

  double c50 = bench_pct_ms(cold, n, 50), c90 = bench_pct_ms(cold, n, 90);
  double p50 = bench_pct_ms(cp, n, 50), p90 = bench_pct_ms(cp, n, 90), m50 = bench_pct_ms(mm, n, 50), m90 = bench_pct_ms(mm, n, 90);
  printf("qemu driver, accel %s, agent %s, tier small (1 vCPU, 512 MiB), n=%zu each\n",
         qd->accel == QEMU_ACCEL_KVM ? "kvm" : "tcg", qd->agent == QEMU_AGENT_VSOCK ? "vsock" : "tcp", n);
  printf("%-34s p50 %8.1f ms  p90 %8.1f ms\n", "cold boot -> silkd answers", c50, c90);
  printf("%-34s p50 %8.1f ms  p90 %8.1f ms  clone/cold %.3f\n", "clone (copy) -> silkd answers", p50, p90,
         p50 / c50);
  printf("%-34s p50 %8.1f ms  p90 %8.1f ms  clone/cold %.3f\n", "clone (mmap) -> silkd answers", m50, m90,
         m50 / c50);

  /* density: idle mmap clones at once */
  if (density > 0) {
    sbx_instance **live = sbx_calloc(density, sizeof *live);
    sleep(1);
    long avail0 = bench_kib_of("/proc/meminfo", "MemAvailable");
    for (size_t i = 0; i < density; i++) {
      char id[32];
      snprintf(id, sizeof id, "bench-idle-%zu", i);
      sbx_clone_spec cs;
      sbx_clone_spec_init(&cs);
      cs.id = id;
      if (sbx_sandbox_clone(dm, gm, &cs, &live[i], &err) < 0) die("clone", &err);
    }
    sleep(2); /* let them settle idle */
    long avail1 = bench_kib_of("/proc/meminfo", "MemAvailable");
    long pss = 0;
    for (size_t i = 0; i < density; i++) {
      char path[64];
      snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)live[i]->qemu_pid);
      long v = bench_kib_of(path, "Pss");
      if (v > 0) pss += v;
    }
    double guest_kib = (double)(sbx_size_tier_get("small")->mem_bytes >> 10);
    double drop = (double)(avail0 - avail1) / (double)density, per_pss = (double)pss / (double)density;
    printf("%zu idle mmap clones: MemAvailable drop %.1f MiB each (%.1f%% of guest RAM), QEMU PSS %.1f MiB each "
           "(%.1f%%)\n",
           density, drop / 1024, 100.0 * drop / guest_kib, per_pss / 1024, 100.0 * per_pss / guest_kib);
    for (size_t i = 0; i < density; i++) sbx_sandbox_destroy(live[i], NULL);
    sbx_free(live);
  }
  sbx_golden_release(dc, gc);
  sbx_golden_release(dm, gm);
  sbx_template_release(dm, t);
  sbx_driver_close(dc);
  sbx_driver_close(dm);
  sbx_free(cold);
  sbx_free(cp);
  sbx_free(mm);
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf %s", base);
  if (system(cmd) != 0) fprintf(stderr, "bench-vm: could not remove %s\n", base);
  return 0;
}
