/* bench/soak: many agent connections and execs held through one sandboxd
 * for a while, then a check that everything was answered and nothing
 * leaked.
 *
 *   bench-soak [-t SECONDS] [--relays N] [--execs N] [--sandboxes N] [--handoff]
 *
 * Starts build/bin/sandboxd (next to this binary) with the jail driver on a
 * free port, a temporary data_dir and a cgroup parent of its own (needs
 * root), claims --sandboxes sandboxes (default 4) and then:
 *   anchor  fs_stat and exec (`true`) round trips on one idle connection;
 *   soak    for -t seconds (default 20): --relays agent connections
 *           (default 1000, upgraded through sandboxd, which relays them;
 *           --handoff lets it pass them to silkd instead) stay open and are
 *           used in turn for fs_stat by 16 threads, while --execs threads
 *           (default 200) each keep one exec of `true` in flight on their
 *           own connection;
 *   check   every request answered (a failed or unanswered RPC is counted),
 *           and once the connections are closed the daemon's open fds, the
 *           processes below it, its mounts and the cgroups under its
 *           cgroup parent are back to what they were before the soak.
 * Prints p50/p90/p99 of both RPCs beside the anchor. Raises its own
 * RLIMIT_NOFILE as needed. Exits 0 when all is well, 1 on a failed RPC or
 * a leak, 2 when the daemon or the sandboxes cannot start. */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sandbox/agent.h>
#include <sandbox/client.h>

#include "bench_util.h"
#include "client/client_priv.h"
#include "driver/driver_internal.h"

#define STAT_THREADS 16
#define SETTLE_S 15 /* how long the counts may take to come back */

static bench_daemon sbxd;
static char cg_name[64];
static volatile bool stopping;

/* ---- latencies: a growing array per thread, merged at the end ---- */
typedef struct {
  double *us;
  size_t n, alloc;
  uint64_t failed;
} lat_log;

static void lat_add(lat_log *l, double us) {
  if (l->n == l->alloc) {
    l->alloc = l->alloc ? l->alloc * 2 : 4096;
    l->us = sbx_realloc(l->us, l->alloc * sizeof *l->us);
  }
  l->us[l->n++] = us;
}

static void lat_merge(lat_log *into, const lat_log *from) {
  for (size_t i = 0; i < from->n; i++) lat_add(into, from->us[i]);
  into->failed += from->failed;
}

static void report(const char *what, lat_log *l) {
  qsort(l->us, l->n, sizeof *l->us, bench_cmp_double);
  printf("  %-30s n=%-8zu p50 %9.1f µs  p90 %9.1f µs  p99 %9.1f µs  max %9.1f µs\n", what, l->n,
         bench_percentile(l->us, l->n, 50), bench_percentile(l->us, l->n, 90), bench_percentile(l->us, l->n, 99),
         l->n ? l->us[l->n - 1] : 0.0);
}

static double since_us(uint64_t t0) { return (double)(sbx_now_ns() - t0) / 1e3; }

/* ---- what must not leak ---- */
typedef struct {
  int fds, procs, mounts, cgroups;
} counts;

static int count_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static pid_t ppid_of(pid_t pid) {
  char p[64], buf[1024];
  snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
  const char *f = sbxi_proc_stat_fields(p, buf, sizeof buf);
  int pp;
  return f && sscanf(f, "%*c %d", &pp) == 1 ? (pid_t)pp : -1;
}

static int count_below_daemon(void) {
  DIR *d = opendir("/proc");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    pid_t pid = (pid_t)atoi(e->d_name);
    if (pid <= 0) continue;
    for (pid_t a = ppid_of(pid); a > 1; a = ppid_of(a))
      if (a == sbxd.pid) {
        n++;
        break;
      }
  }
  if (d) closedir(d);
  return n;
}

static int count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

static int ncg;
static int cg_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  if (flag == FTW_D || flag == FTW_DP) ncg++;
  return 0;
}

/* Cgroup directories under the daemon's cgroup parent, in every hierarchy. */
static int count_cgroups(void) {
  ncg = 0;
  DIR *d = opendir("/sys/fs/cgroup");
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "/sys/fs/cgroup/%s/%s", e->d_name, cg_name);
    nftw(p, cg_cb, 16, FTW_PHYS);
  }
  if (d) closedir(d);
  return ncg;
}

static counts take_counts(void) {
  char p[64];
  counts c;
  snprintf(p, sizeof p, "/proc/%d/fd", (int)sbxd.pid);
  c.fds = count_dir(p);
  c.procs = count_below_daemon();
  snprintf(p, sizeof p, "/proc/%d/mountinfo", (int)sbxd.pid);
  c.mounts = count_lines(p);
  c.cgroups = count_cgroups();
  return c;
}

static bool same_counts(counts a, counts b) {
  return a.fds == b.fds && a.procs == b.procs && a.mounts == b.mounts && a.cgroups == b.cgroups;
}

static void print_counts(const char *what, counts c) {
  printf("  %-30s sandboxd fds %d, processes below it %d, its mounts %d, cgroups %d\n", what, c.fds, c.procs,
         c.mounts, c.cgroups);
}

/* ---- the daemon ---- */
static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) { return remove(p); }

static int start_daemon(bool handoff) {
  char cfg[512];
  snprintf(cg_name, sizeof cg_name, "bench-soak-%d", (int)getpid());
  /* warm 0: claims clone on demand, so no refill runs during the counts */
  snprintf(cfg, sizeof cfg,
           "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DIR@/data\",\"driver\":\"jail\",\"relay_handoff\":%s,"
           "\"jail\":{\"cgroup_root\":\"%s\"},\"pools\":[{\"template\":\"host\",\"warm\":0}]}",
           handoff ? "true" : "false", cg_name);
  return bench_daemon_start(&sbxd, "bench-soak", cfg, NULL, NULL);
}

/* A restart that owns no claims and no pools destroys what is left. */
static void stop_daemon(void) {
  if (sbxd.pid <= 0) return;
  bench_daemon_forget(&sbxd);
  if (start_daemon(false) == 0) {
    bench_daemon_stop(&sbxd);
  }
  nftw(sbxd.dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  sbxd.pid = 0;
  /* the cgroup parent, empty now, in every hierarchy */
  DIR *d = opendir("/sys/fs/cgroup");
  for (struct dirent *e; d && (e = readdir(d));) {
    char cg[PATH_MAX];
    snprintf(cg, sizeof cg, "/sys/fs/cgroup/%s/%s", e->d_name, cg_name);
    if (e->d_name[0] != '.') rmdir(cg);
  }
  if (d) closedir(d);
}

static void die(const char *what, const sbx_error *err) {
  fprintf(stderr, "bench-soak: %s: %s\n", what, err->msg);
  stop_daemon();
  exit(2);
}

/* Descriptors for every connection, the daemon's pipe and curl. */
static void raise_nofile(size_t need) {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur >= need) return;
  if (rl.rlim_max < need) rl.rlim_max = need; /* root may raise the hard limit */
  rl.rlim_cur = need;
  if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
    fprintf(stderr, "bench-soak: RLIMIT_NOFILE %zu: %s\n", need, strerror(errno));
    exit(2);
  }
}

/* ---- the load ---- */
static const char *const argv_true[] = {"true", NULL};

static bool one_stat(sbx_agent *a, lat_log *l) {
  sbx_wire_file_info fi;
  sbx_error err;
  uint64_t t0 = sbx_now_ns();
  if (sbx_agent_stat(a, "/", &fi, &err) < 0) {
    if (!l->failed++) fprintf(stderr, "bench-soak: fs_stat: %s\n", err.msg);
    return false;
  }
  lat_add(l, since_us(t0));
  return true;
}

static bool one_exec(sbx_agent *a, lat_log *l) {
  sbx_buf out = SBX_BUF_INIT(4096), errout = SBX_BUF_INIT(4096);
  sbx_error err;
  int code = -1;
  uint64_t t0 = sbx_now_ns();
  int rc = sbx_agent_run(a, argv_true, &out, &errout, &code, &err);
  sbx_buf_free(&out);
  sbx_buf_free(&errout);
  if (rc < 0 || code != 0) {
    if (!l->failed++) fprintf(stderr, "bench-soak: exec: %s (exit %d)\n", rc < 0 ? err.msg : "", code);
    return false;
  }
  lat_add(l, since_us(t0));
  return true;
}

typedef struct {
  sbx_agent **conns; /* this thread's share of the relays; NULL once broken */
  uint32_t *uses;    /* answered RPCs per relay */
  size_t n;
  lat_log lat;
} stat_worker;

/* Every connection of the share in turn, until the end. */
static void *stat_thread(void *arg) {
  stat_worker *w = arg;
  while (!stopping)
    for (size_t i = 0; i < w->n && !stopping; i++) {
      if (!w->conns[i]) continue;
      if (one_stat(w->conns[i], &w->lat)) {
        w->uses[i]++;
      } else {
        sbx_agent_close(w->conns[i]);
        w->conns[i] = NULL;
      }
    }
  return NULL;
}

typedef struct {
  sbx_sandbox *s;
  lat_log lat;
} exec_worker;

static void *exec_thread(void *arg) {
  exec_worker *w = arg;
  sbx_agent *a = NULL;
  sbx_error err;
  while (!stopping) {
    if (!a && conn_dial(w->s, &a, &err) < 0) {
      if (!w->lat.failed++) fprintf(stderr, "bench-soak: exec dial: %s\n", err.msg);
      a = NULL;
      usleep(100 * 1000);
      continue;
    }
    if (!one_exec(a, &w->lat)) {
      sbx_agent_close(a);
      a = NULL;
    }
  }
  if (a) sbx_agent_close(a);
  return NULL;
}

/* fs_stat and exec on one otherwise idle connection. */
static void anchor(sbx_sandbox *s, lat_log *st, lat_log *ex) {
  sbx_agent *a;
  sbx_error err;
  if (conn_dial(s, &a, &err) < 0) die("anchor dial", &err);
  for (int i = 0; i < 500; i++) one_stat(a, st);
  for (int i = 0; i < 100; i++) one_exec(a, ex);
  sbx_agent_close(a);
}

int main(int argc, char **argv) {
  int secs = 20, relays = 1000, execs = 200, nsb = 4;
  bool handoff = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) secs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--relays") == 0 && i + 1 < argc) relays = atoi(argv[++i]);
    else if (strcmp(argv[i], "--execs") == 0 && i + 1 < argc) execs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--sandboxes") == 0 && i + 1 < argc) nsb = atoi(argv[++i]);
    else if (strcmp(argv[i], "--handoff") == 0) handoff = true;
    else {
      fprintf(stderr, "usage: bench-soak [-t SECONDS] [--relays N] [--execs N] [--sandboxes N] [--handoff]\n");
      return 2;
    }
  }
  if (secs < 1 || relays < 0 || execs < 0 || nsb < 1 || nsb > 64) return 2;
  signal(SIGPIPE, SIG_IGN);
  raise_nofile((size_t)(relays + execs) + 512);
  if (start_daemon(handoff) < 0) return 2;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", sbxd.port);
  sbx_client_opts co = SBX_CLIENT_OPTS_INIT(.addr = addr, .claim_timeout_ms = 300 * 1000);
  sbx_client *c;
  sbx_error err;
  if (sbx_client_new(&co, &c, &err) < 0) die("client", &err);
  sbx_sandbox *sb[64];
  sbx_claim_opts clo = SBX_CLAIM_OPTS_INIT(.template_ = "host", .ttl_seconds = 900);
  for (int i = 0; i < nsb; i++)
    if (sbx_client_claim(c, &clo, &sb[i], &err) < 0) die("claim", &err);
  printf("bench-soak: sandboxd %s (%s), %d sandboxes, %d relays, %d execs, %d s\n", addr,
         handoff ? "handoff" : "relayed", nsb, relays, execs, secs);

  lat_log a_stat = {0}, a_exec = {0};
  anchor(sb[0], &a_stat, &a_exec); /* also warms every path once */
  a_stat.n = a_exec.n = 0;
  a_stat.failed = a_exec.failed = 0;
  anchor(sb[0], &a_stat, &a_exec);
  for (int i = 0; i < nsb; i++) sbx_sandbox_close_idle(sb[i]);
  usleep(500 * 1000);
  counts before = take_counts();

  /* open every relay first: all of them are held for the whole soak */
  sbx_agent **conns = sbx_calloc((size_t)relays + 1, sizeof *conns);
  uint32_t *uses = sbx_calloc((size_t)relays + 1, sizeof *uses);
  uint64_t t0 = sbx_now_ns();
  int dial_failed = 0;
  for (int i = 0; i < relays; i++)
    if (conn_dial(sb[i % nsb], &conns[i], &err) < 0) {
      if (!dial_failed++) fprintf(stderr, "bench-soak: dial relay %d: %s\n", i, err.msg);
      conns[i] = NULL;
    }
  double open_s = (double)(sbx_now_ns() - t0) / 1e9;

  stat_worker sw[STAT_THREADS] = {{0}};
  exec_worker *ew = sbx_calloc((size_t)execs + 1, sizeof *ew);
  pthread_t st[STAT_THREADS], *et = sbx_calloc((size_t)execs + 1, sizeof *et);
  size_t per = ((size_t)relays + STAT_THREADS - 1) / STAT_THREADS;
  for (int k = 0; k < STAT_THREADS; k++) {
    size_t lo = (size_t)k * per < (size_t)relays ? (size_t)k * per : (size_t)relays;
    size_t hi = lo + per < (size_t)relays ? lo + per : (size_t)relays;
    sw[k].conns = conns + lo;
    sw[k].uses = uses + lo;
    sw[k].n = hi - lo;
    pthread_create(&st[k], NULL, stat_thread, &sw[k]);
  }
  for (int k = 0; k < execs; k++) {
    ew[k].s = sb[k % nsb];
    pthread_create(&et[k], NULL, exec_thread, &ew[k]);
  }
  sleep((unsigned)secs / 2);
  counts during = take_counts();
  sleep((unsigned)(secs - secs / 2));
  stopping = true;
  for (int k = 0; k < STAT_THREADS; k++) pthread_join(st[k], NULL);
  for (int k = 0; k < execs; k++) pthread_join(et[k], NULL);

  lat_log l_stat = {0}, l_exec = {0};
  int open_at_end = 0, unused = 0;
  uint32_t min_uses = UINT32_MAX;
  for (int k = 0; k < STAT_THREADS; k++) lat_merge(&l_stat, &sw[k].lat);
  for (int k = 0; k < execs; k++) lat_merge(&l_exec, &ew[k].lat);
  for (int i = 0; i < relays; i++) {
    unused += uses[i] == 0;
    if (uses[i] < min_uses) min_uses = uses[i];
    if (conns[i]) {
      open_at_end++;
      sbx_agent_close(conns[i]);
    }
  }

  /* Closed connections, ended execs and their reaped processes take a
   * moment to be gone on the daemon's side: wait for the counts. */
  counts after = take_counts();
  for (int i = 0; i < SETTLE_S * 10 && !same_counts(before, after); i++) {
    usleep(100 * 1000);
    after = take_counts();
  }

  printf("  %-30s %d of %d in %.2f s (%d failed); %d still open at the end\n", "relays opened", relays - dial_failed,
         relays, open_s, dial_failed, open_at_end);
  printf("  %-30s every relay answered fs_stat at least %u times (%d never used)\n", "relays used",
         relays ? min_uses : 0, unused);
  report("anchor fs_stat (idle conn)", &a_stat);
  report("anchor exec true (idle conn)", &a_exec);
  report("soak fs_stat over relays", &l_stat);
  report("soak exec true", &l_exec);
  printf("  %-30s fs_stat %.0f/s, exec %.0f/s\n", "throughput", (double)l_stat.n / secs, (double)l_exec.n / secs);
  print_counts("before", before);
  print_counts("during", during);
  print_counts("after", after);
  /* a relay the load never reached proves nothing: counted as unanswered */
  uint64_t failed = l_stat.failed + l_exec.failed + (uint64_t)dial_failed + (uint64_t)unused;
  bool leak = !same_counts(before, after);
  printf("bench-soak: %s: %llu failed or unanswered requests, %s\n", failed || leak ? "FAIL" : "ok",
         (unsigned long long)failed, leak ? "counts differ after the soak (leak)" : "no leak");

  for (int i = 0; i < nsb; i++) {
    if (sbx_sandbox_release(sb[i], &err) < 0) fprintf(stderr, "bench-soak: release: %s\n", err.msg);
    sbx_sandbox_free(sb[i]);
  }
  sbx_client_free(c);
  stop_daemon();
  sbx_free(conns);
  sbx_free(uses);
  sbx_free(ew);
  sbx_free(et);
  return failed || leak ? 1 : 0;
}
