/* bench-jail: the jail driver's figures.
 *
 *   clone -> silkd answers info   p50/p90/p99 over --n clones (default 200)
 *   destroy                       p50/p90/p99
 *   bwrap --unshare-all --die-with-parent --ro-bind / / true, same run, and
 *   the ratio clone p50 / bwrap p50
 *   density: --density idle sandboxes at once (default 200), host memory per
 *   idle sandbox (MemAvailable drop) and the cgroup-charged memory
 *   CPU per clone+destroy cycle and per bwrap run: getrusage of this process
 *   and its reaped children (the jails' silkd, bwrap), plus what the
 *   driver's zygote used meanwhile (/proc), user and system. It
 *   leaves out kernel work done in kernel threads (a network namespace is
 *   torn down by a kworker), so it is a lower bound.
 *
 * How silkd starts is printed: from the driver's zygote (the default), or
 * exec'd per clone (SBX_JAIL_ZYGOTE=0, or a silkd without --zygote).
 * --verbose prints the driver's per-clone split (debug log) on stderr.
 *
 * Needs root and a built silkd next to this program (or SBX_SILKD). */
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sandbox/core.h>
#include <sandbox/driver.h>
#include "core/env.h"

#include "bench_util.h"
#include "zygote_probe.h"

extern char **environ;

static void report(const char *name, uint64_t *v, size_t n) {
  printf("%-26s n=%-4zu p50 %7.2f ms  p90 %7.2f ms  p99 %7.2f ms\n", name, n, bench_pct_ms(v, n, 50), bench_pct_ms(v, n, 90),
         bench_pct_ms(v, n, 99));
}

/* CPU seconds (user, system) used so far by this process and its reaped
 * children. */
static void cpu_now(double *user, double *sys) {
  struct rusage a, b;
  getrusage(RUSAGE_SELF, &a);
  getrusage(RUSAGE_CHILDREN, &b);
  *user = (double)(a.ru_utime.tv_sec + b.ru_utime.tv_sec) + (double)(a.ru_utime.tv_usec + b.ru_utime.tv_usec) / 1e6;
  *sys = (double)(a.ru_stime.tv_sec + b.ru_stime.tv_sec) + (double)(a.ru_stime.tv_usec + b.ru_stime.tv_usec) / 1e6;
}

/* The zygote's CPU seconds so far: it is reaped only when the driver
 * closes, so getrusage of our children does not see it yet. schedstat's
 * run time is exact where utime/stime, sampled at ticks, miss its short
 * bursts; it is nearly all system time (recvmsg, clone), counted as such. */
static double zygote_cpu(pid_t z) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/schedstat", (int)z);
  FILE *f = z > 0 ? fopen(path, "r") : NULL;
  if (!f) return 0;
  unsigned long long ns = 0;
  if (fscanf(f, "%llu", &ns) != 1) ns = 0;
  fclose(f);
  return (double)ns / 1e9;
}

static int run_bwrap(void) {
  char *argv[] = {"bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true", NULL};
  pid_t pid;
  if (posix_spawnp(&pid, "bwrap", NULL, NULL, argv, environ) != 0) return -1;
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  size_t n = 200, density = 200, nbwrap = 50;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) n = strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--density") == 0 && i + 1 < argc) density = strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--bwrap") == 0 && i + 1 < argc) nbwrap = strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--verbose") == 0) sbx_log_set_level(SBX_LOG_DEBUG); /* the driver's per-clone split */
    else {
      fprintf(stderr, "usage: bench-jail [--n CLONES] [--density SANDBOXES] [--bwrap RUNS] [--verbose]\n");
      return 2;
    }
  }
  if (n < 2 || nbwrap < 2) return 2;
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
  sbx_driver_config cfg = SBX_DRIVER_CONFIG_INIT(.templates_dir = "/tmp/sbx-bench-jail/templates",
                                                 .goldens_dir = "/tmp/sbx-bench-jail/goldens",
                                                 .run_dir = "/run/sbx-bench-jail",
                                                 .silkd_path = silkd,
                                                 .cgroup_name = "sandbox-bench");
  sbxi_env_apply(&cfg); /* SBX_JAIL_ZYGOTE=0 measures the exec path */
  sbx_error err = {0};
  sbx_driver *d = NULL;
  sbx_template *t = NULL;
  sbx_golden *g = NULL;
  sbx_template_spec ts = SBX_TEMPLATE_SPEC_INIT(.name = "host");
  if (sbx_driver_open("jail", &cfg, &d, &err) < 0 || sbx_template_prepare(d, &ts, &t, &err) < 0 ||
      sbx_golden_build(d, t, NULL, &g, &err) < 0) {
    fprintf(stderr, "bench-jail: %s\n", err.msg);
    return 1;
  }
  uint64_t *ready = sbx_calloc(n, sizeof *ready), *destroy = sbx_calloc(n, sizeof *destroy);
  uint64_t *bw = sbx_calloc(nbwrap, sizeof *bw);
  sbx_clone_spec spec;
  sbx_clone_spec_init(&spec);
  char id[64];
  spec.id = id;
  /* warm the page cache and the kernel's namespace caches first */
  double cu0 = 0, cs0 = 0, cu1, cs1, z0 = 0;
  pid_t zyg = zygote_pid();
  for (size_t i = 0; i < 5 + n; i++) {
    if (i == 5) {
      cpu_now(&cu0, &cs0);
      z0 = zygote_cpu(zyg);
    }
    snprintf(id, sizeof id, "bench-%zu", i);
    sbx_instance *s = NULL;
    uint64_t t0 = sbx_now_ns();
    if (sbx_sandbox_clone(d, g, &spec, &s, &err) < 0) {
      fprintf(stderr, "bench-jail: clone: %s\n", err.msg);
      return 1;
    }
    uint64_t t1 = sbx_now_ns();
    if (sbx_sandbox_destroy(s, &err) < 0) {
      fprintf(stderr, "bench-jail: destroy: %s\n", err.msg);
      return 1;
    }
    uint64_t t2 = sbx_now_ns();
    if (i >= 5) {
      ready[i - 5] = t1 - t0;
      destroy[i - 5] = t2 - t1;
    }
  }
  cpu_now(&cu1, &cs1);
  double bu0 = cu1, bs0 = cs1, bu1, bs1;
  cs1 += zygote_cpu(zyg) - z0;
  for (size_t i = 0; i < nbwrap; i++) {
    uint64_t t0 = sbx_now_ns();
    if (run_bwrap() < 0) {
      fprintf(stderr, "bench-jail: bwrap failed (is bubblewrap installed?)\n");
      return 1;
    }
    bw[i] = sbx_now_ns() - t0;
  }
  cpu_now(&bu1, &bs1);
  printf("jail driver, host template, size small, silkd %s, started by %s\n", silkd,
         zyg > 0 ? "the zygote" : "exec per clone");
  double clone50 = (qsort(ready, n, sizeof *ready, bench_cmp_u64), bench_pct_ms(ready, n, 50));
  report("clone -> silkd info", ready, n);
  report("destroy", destroy, n);
  double bw50 = (qsort(bw, nbwrap, sizeof *bw, bench_cmp_u64), bench_pct_ms(bw, nbwrap, 50));
  report("bwrap ... true", bw, nbwrap);
  printf("ratio clone p50 / bwrap p50: %.2fx\n", clone50 / bw50);
  printf("cpu per clone+destroy: %.2f ms (user %.2f, sys %.2f); per bwrap run: %.2f ms (user %.2f, sys %.2f)\n",
         (cu1 - cu0 + cs1 - cs0) * 1e3 / (double)n, (cu1 - cu0) * 1e3 / (double)n, (cs1 - cs0) * 1e3 / (double)n,
         (bu1 - bu0 + bs1 - bs0) * 1e3 / (double)nbwrap, (bu1 - bu0) * 1e3 / (double)nbwrap,
         (bs1 - bs0) * 1e3 / (double)nbwrap);

  if (density > 0) {
    sbx_instance **all = sbx_calloc(density, sizeof *all);
    sync();
    long avail0 = bench_kib_of("/proc/meminfo", "MemAvailable");
    size_t made = 0;
    uint64_t charged = 0;
    for (; made < density; made++) {
      snprintf(id, sizeof id, "dense-%zu", made);
      if (sbx_sandbox_clone(d, g, &spec, &all[made], &err) < 0) {
        fprintf(stderr, "bench-jail: density clone %zu: %s\n", made, err.msg);
        break;
      }
    }
    long avail1 = bench_kib_of("/proc/meminfo", "MemAvailable");
    for (size_t i = 0; i < made; i++) {
      sbx_stats st;
      if (sbx_sandbox_stats(all[i], &st, NULL) == 0) charged += st.mem_bytes;
    }
    if (made > 0) {
      printf("density: %zu idle sandboxes, host MemAvailable drop %.2f MiB per sandbox, "
             "cgroup-charged %.2f MiB per sandbox\n",
             made, (double)(avail0 - avail1) / 1024.0 / (double)made,
             (double)charged / 1048576.0 / (double)made);
    }
    uint64_t t0 = sbx_now_ns();
    for (size_t i = 0; i < made; i++) sbx_sandbox_destroy(all[i], NULL);
    printf("density: destroyed %zu in %.1f ms\n", made, (double)(sbx_now_ns() - t0) / 1e6);
    sbx_free(all);
  }
  sbx_free(ready);
  sbx_free(destroy);
  sbx_free(bw);
  sbx_golden_release(d, g);
  sbx_template_release(d, t);
  sbx_driver_close(d);
  return 0;
}
