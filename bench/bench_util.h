/* bench_util.h - header-only helpers shared by the bench/ programs: repeated
 * timed runs, order statistics (min, median, max, percentiles), a sink
 * that keeps the compiler from deleting the measured work, and starting the
 * sandboxd that sits next to the bench binary.
 *
 * A figure is always the median of several runs, printed beside its min and
 * max, because a single run on a shared 2-core machine says more about the
 * neighbours than about the code. */
#ifndef SBX_BENCH_UTIL_H
#define SBX_BENCH_UTIL_H

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sandbox/core.h>

#define BENCH_MAX_RUNS 64

typedef struct {
  double min, median, max;
  double p10, p90;
  size_t n;
} bench_stats;

/* Make the compiler believe p's memory is read and written. */
static inline void bench_clobber(const void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Percentile p (0..100) of sorted[0..n), interpolating between ranks. */
static inline double bench_percentile(const double *sorted, size_t n, double p) {
  if (n == 0) return 0;
  if (p <= 0) return sorted[0];
  if (p >= 100) return sorted[n - 1];
  double rank = p / 100.0 * (double)(n - 1);
  size_t lo = (size_t)rank;
  double frac = rank - (double)lo;
  return lo + 1 < n ? sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]) : sorted[lo];
}

/* Order statistics of v[0..n); v itself is left as it was. */
static inline int bench_cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* The p-th percentile of n nanosecond samples (sorted here), in ms. */
static inline double bench_pct_ms(uint64_t *v, size_t n, double p) {
  qsort(v, n, sizeof *v, bench_cmp_u64);
  size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
  return (double)v[i < n ? i : n - 1] / 1e6;
}

/* The "key: N kB" line of a /proc file (meminfo, smaps_rollup) in KiB; -1
 * when absent. */
static inline long bench_kib_of(const char *file, const char *key) {
  FILE *f = fopen(file, "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  size_t kl = strlen(key);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, kl) == 0 && line[kl] == ':') v = strtol(line + kl + 1, NULL, 10);
  fclose(f);
  return v;
}

static inline bench_stats bench_summarize(const double *v, size_t n) {
  double sorted[BENCH_MAX_RUNS];
  if (n > BENCH_MAX_RUNS) n = BENCH_MAX_RUNS;
  memcpy(sorted, v, n * sizeof *v);
  qsort(sorted, n, sizeof *sorted, bench_cmp_double);
  bench_stats s = {0};
  s.n = n;
  if (n == 0) return s;
  s.min = sorted[0];
  s.max = sorted[n - 1];
  s.median = bench_percentile(sorted, n, 50);
  s.p10 = bench_percentile(sorted, n, 10);
  s.p90 = bench_percentile(sorted, n, 90);
  return s;
}

static inline double bench_median(const double *v, size_t n) { return bench_summarize(v, n).median; }

/* One measured body: run it `iters` times and return nothing; the harness
 * times the whole batch. */
typedef void (*bench_body)(void *ctx, size_t iters);

/* Pick an iteration count that makes one run last about target_ns, then time
 * `runs` runs of it. rates[i] = units_per_iter * iters / seconds of run i.
 * Returns the number of runs stored. */
static inline size_t bench_rates(bench_body body, void *ctx, double units_per_iter, uint64_t target_ns, size_t runs,
                                 double *rates) {
  if (runs > BENCH_MAX_RUNS) runs = BENCH_MAX_RUNS;
  size_t iters = 1;
  /* Calibrate (also warms caches, page tables and the branch predictor). */
  for (;;) {
    uint64_t t0 = sbx_now_ns();
    body(ctx, iters);
    uint64_t dt = sbx_now_ns() - t0;
    if (dt >= target_ns / 4 || iters >= ((size_t)1 << 40)) {
      double scale = dt ? (double)target_ns / (double)dt : 4.0;
      double want = (double)iters * scale;
      iters = want < 1 ? 1 : (size_t)want;
      break;
    }
    iters *= 4;
  }
  for (size_t r = 0; r < runs; r++) {
    uint64_t t0 = sbx_now_ns();
    body(ctx, iters);
    uint64_t dt = sbx_now_ns() - t0;
    if (dt == 0) dt = 1;
    rates[r] = units_per_iter * (double)iters * 1e9 / (double)dt;
  }
  return runs;
}

/* "name  median  (min .. max) unit  target >= T  ok|MISS"; returns whether
 * the median meets the target (always true when target <= 0). */
static inline bool bench_report(const char *name, const double *rates, size_t n, const char *unit, double target) {
  bench_stats s = bench_summarize(rates, n);
  bool ok = target <= 0 || s.median >= target;
  printf("  %-36s median %9.2f  (min %9.2f  max %9.2f) %-8s", name, s.median, s.min, s.max, unit);
  if (target > 0)
    printf("  target >= %-8.0f %s\n", target, ok ? "ok" : "MISS");
  else
    printf("\n");
  return ok;
}

/* A sandboxd started by a bench. */
typedef struct {
  pid_t pid;
  int port;
  int log_fd;   /* its stderr after "ready", non-blocking: read it or leave it */
  char dir[64]; /* temp dir holding config.json and data/, kept across restarts */
} bench_daemon;

/* Start build/bin/sandboxd (next to this binary) on a config whose text is
 * `config` with every "@DIR@" replaced by d->dir (made on the first start,
 * /tmp/<prefix>-XXXXXX; a restart reuses it, and its data_dir). child_setup,
 * if given, runs in the child before exec (cgroup placement, environment).
 * Returns 0 once the daemon printed its port, -1 (with its output on
 * stderr) if it did not. */
static inline int bench_daemon_start(bench_daemon *d, const char *prefix, const char *config,
                                     void (*child_setup)(void *ud), void *ud) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) return -1;
  exe[n] = '\0';
  *strrchr(exe, '/') = '\0';
  if (!d->dir[0]) {
    snprintf(d->dir, sizeof d->dir, "/tmp/%s-XXXXXX", prefix);
    if (!mkdtemp(d->dir)) return -1;
  }
  char cfg[128];
  snprintf(cfg, sizeof cfg, "%s/config.json", d->dir);
  FILE *f = fopen(cfg, "w");
  if (!f) return -1;
  for (const char *c = config; *c; c++) {
    if (strncmp(c, "@DIR@", 5) == 0) {
      fputs(d->dir, f);
      c += 4;
    } else {
      fputc(*c, f);
    }
  }
  fclose(f);
  int pfd[2];
  if (pipe(pfd) < 0) return -1;
  d->pid = fork();
  if (d->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a bench that dies leaves no daemon */
    if (child_setup) child_setup(ud);
    dup2(pfd[1], 2);
    close(pfd[0]);
    setenv("SANDBOXD_LOG_LEVEL", "warn", 1);
    char bin[PATH_MAX + 16];
    snprintf(bin, sizeof bin, "%s/sandboxd", exe);
    execl(bin, "sandboxd", "--config", cfg, (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  char buf[4096];
  size_t got = 0;
  for (;;) {
    ssize_t r = read(pfd[0], buf + got, sizeof buf - 1 - got);
    if (r <= 0) break;
    got += (size_t)r;
    buf[got] = '\0';
    char *m = strstr(buf, "ready port=");
    if (m) {
      d->port = atoi(m + 11);
      /* Keep the pipe drained from here on without blocking anyone. */
      fcntl(pfd[0], F_SETFL, O_NONBLOCK);
      d->log_fd = pfd[0];
      return 0;
    }
  }
  buf[got] = '\0';
  fprintf(stderr, "sandboxd did not start:\n%s\n", buf);
  close(pfd[0]);
  return -1;
}

/* SIGTERM, wait, close its log: a stop leaves its sandboxes for the next start. */
static inline void bench_daemon_stop(bench_daemon *d) {
  kill(d->pid, SIGTERM);
  waitpid(d->pid, NULL, 0);
  close(d->log_fd);
}

/* Stop it and make its data_dir own no claims and no pools, so that the
 * next start destroys every sandbox left (the benches' clean-up). */
static inline void bench_daemon_forget(bench_daemon *d) {
  bench_daemon_stop(d);
  char p[128];
  snprintf(p, sizeof p, "%s/data/claims.json", d->dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/data/pools.json", d->dir);
  FILE *f = fopen(p, "w");
  if (f) {
    fputs("{\"pools\":[]}", f);
    fclose(f);
  }
}

#endif
