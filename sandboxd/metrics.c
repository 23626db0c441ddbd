/* metrics.c - what /metrics adds to the node's gauges (admin.c): the
 * claim-latency histogram per tier, exec and request outcomes, the build
 * and the process, in the text exposition format 0.0.4. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <sandbox/sandbox.h>

#include "sandboxd.h"

/* Upper bounds in seconds: a warm claim is well under a millisecond, a
 * clone tens of milliseconds, a cold VM boot seconds. */
static const double claim_bounds[METRICS_CLAIM_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                           0.25,   0.5,   1,      2.5,   5,    10,    30,    60};
static const char *const tiers[3] = {"warm", "clone", "cold"};
static const char *const exec_outcomes[METRICS_EXEC_OUTCOMES] = {"ok", "nonzero_exit", "timeout", "rejected", "error"};

void metric_head(sbx_buf *b, const char *name, const char *type, const char *help) {
  sbx_buf_printf(b, NULL, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

int metrics_tier(const char *tier) {
  for (int i = 0; i < 3; i++)
    if (strcmp(tier, tiers[i]) == 0) return i;
  return 2;
}

void metrics_claim(struct metrics *m, int tier, double secs) {
  m->claim_seconds += secs;
  m->claim_sum[tier] += secs;
  m->claim_count[tier]++;
  for (size_t i = 0; i < METRICS_CLAIM_BUCKETS; i++)
    if (secs <= claim_bounds[i]) {
      m->claim_bucket[tier][i]++;
      break;
    }
}

void metrics_exec(struct metrics *m, int status, const json_t *body) {
  int o;
  if (status == 200) o = json_integer_value(json_object_get(body, "exit_code")) == 0 ? 0 : 1;
  else if (status == 504) o = 2;
  else if (status >= 400 && status < 500) o = 3;
  else o = 4;
  m->execs[o]++;
}

static void claim_histogram(sbx_buf *b, const struct metrics *m) {
  metric_head(b, "sandboxd_claim_duration_seconds", "histogram",
              "Claim latency from request to answer, by tier (warm, clone, cold).");
  for (int t = 0; t < 3; t++) {
    uint64_t cum = 0;
    for (size_t i = 0; i < METRICS_CLAIM_BUCKETS; i++) {
      cum += m->claim_bucket[t][i];
      sbx_buf_printf(b, NULL, "sandboxd_claim_duration_seconds_bucket{tier=\"%s\",le=\"%g\"} %llu\n", tiers[t],
                     claim_bounds[i], (unsigned long long)cum);
    }
    sbx_buf_printf(b, NULL,
                   "sandboxd_claim_duration_seconds_bucket{tier=\"%s\",le=\"+Inf\"} %llu\n"
                   "sandboxd_claim_duration_seconds_sum{tier=\"%s\"} %.9f\n"
                   "sandboxd_claim_duration_seconds_count{tier=\"%s\"} %llu\n",
                   tiers[t], (unsigned long long)m->claim_count[t], tiers[t], m->claim_sum[t], tiers[t],
                   (unsigned long long)m->claim_count[t]);
  }
}

static void outcomes(sbx_buf *b, struct sbxd *d) {
  metric_head(b, "sandboxd_execs_total", "counter",
              "Buffered execs answered, by outcome: ok (exit 0), nonzero_exit, timeout, rejected (4xx), error.");
  for (size_t i = 0; i < METRICS_EXEC_OUTCOMES; i++)
    sbx_buf_printf(b, NULL, "sandboxd_execs_total{outcome=\"%s\"} %llu\n", exec_outcomes[i],
                   (unsigned long long)d->m.execs[i]);
  metric_head(b, "sandboxd_http_requests_total", "counter",
              "HTTP requests answered, by status class (2xx to 5xx); upgrades count as 1xx.");
  for (int k = 1; k <= 5; k++)
    sbx_buf_printf(b, NULL, "sandboxd_http_requests_total{code=\"%dxx\"} %llu\n", k,
                   (unsigned long long)http_server_answers(d->http, k));
}

/* /proc/self/stat field 22 (starttime, in clock ticks since boot) plus
 * /proc/stat's btime; 0 when either cannot be read. */
static double start_time(void) {
  char buf[1024];
  FILE *f = fopen("/proc/self/stat", "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* comm may hold spaces */
  unsigned long long ticks = 0;
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                   &ticks) != 1)
    return 0;
  unsigned long long btime = 0;
  char line[256];
  f = fopen("/proc/stat", "r");
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "btime %llu", &btime) == 1) break;
  if (f) fclose(f);
  long hz = sysconf(_SC_CLK_TCK);
  return btime && hz > 0 ? (double)btime + (double)ticks / (double)hz : 0;
}

static void process(sbx_buf *b) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
               (double)ru.ru_stime.tv_usec / 1e6;
  unsigned long long size = 0, rss = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%llu %llu", &size, &rss) != 2) size = rss = 0;
  if (f) fclose(f);
  long page = sysconf(_SC_PAGESIZE);
  size_t fds = 0;
  DIR *dir = opendir("/proc/self/fd");
  for (struct dirent *e; dir && (e = readdir(dir));) fds += e->d_name[0] != '.';
  if (dir) closedir(dir);
  if (fds) fds--; /* the directory's own descriptor */
  struct rlimit rl = {0};
  getrlimit(RLIMIT_NOFILE, &rl);
  metric_head(b, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
  sbx_buf_printf(b, NULL, "process_cpu_seconds_total %.6f\n", cpu);
  metric_head(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  sbx_buf_printf(b, NULL, "process_resident_memory_bytes %llu\n", rss * (unsigned long long)page);
  metric_head(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
  sbx_buf_printf(b, NULL, "process_virtual_memory_bytes %llu\n", size * (unsigned long long)page);
  metric_head(b, "process_open_fds", "gauge", "Number of open file descriptors.");
  sbx_buf_printf(b, NULL, "process_open_fds %zu\n", fds);
  metric_head(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
  sbx_buf_printf(b, NULL, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
  metric_head(b, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
  sbx_buf_printf(b, NULL, "process_start_time_seconds %.2f\n", start_time());
}

void metrics_write(struct sbxd *d, sbx_buf *b) {
  claim_histogram(b, &d->m);
  outcomes(b, d);
  metric_head(b, "sandboxd_build_info", "gauge", "Always 1; the version of this sandboxd in a label.");
  sbx_buf_printf(b, NULL, "sandboxd_build_info{version=\"%s\"} 1\n", sbx_version());
  process(b);
}
