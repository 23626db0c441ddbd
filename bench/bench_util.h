/* bench_util.h - header-only helpers shared by the bench/ programs: repeated
 * timed runs, order statistics (min, median, max, percentiles) and a sink
 * that keeps the compiler from deleting the measured work.
 *
 * A figure is always the median of several runs, printed beside its min and
 * max, because a single run on a shared 2-core machine says more about the
 * neighbours than about the code. */
#ifndef SBX_BENCH_UTIL_H
#define SBX_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#endif
