/* bench/claim: claim latency and throughput of a real sandboxd.
 *
 * Starts build/bin/sandboxd (next to this binary) with the jail driver on a
 * temporary data_dir, then measures:
 *   warm    HTTP claim -> upgrade to the silkd relay -> `info` answered,
 *           p50/p90/p99 over N claims (default 200), refill running
 *   settled the same, each claim made once the pool is full again (no
 *           clone competing for the CPUs)
 *   clone   the same with a pool of warm 0 (every claim clones the golden)
 *   burst   16 concurrent warm claims: p50 and wall time
 *   refill  time for a drained pool of 16 to be full again
 *   churn   claim+release per second, sustained, over keep-alive: one
 *           client in a loop, then C clients at once (default 8), with the
 *           CPU time each claim+release cycle cost (see cpu_snap)
 * Usage: bench-claim [-n N] [--driver jail|qemu] [-c CLIENTS] [-t SECONDS] [--sync-claims]
 *                    [--only warm,settled,clone,burst,refill,churn]
 *                    [--config-extra '"key":value,']  (root)
 * --config-extra adds top-level config keys (e.g. "refill_concurrency":1,)
 * for experiments; the figures of record use the defaults.
 * --sync-claims turns on sync_claims (every journal change on disk before
 * its answer). The CPU lines need the cgroup v1 cpuacct controller.
 * Prints one line per figure; exits 2 when the daemon cannot start. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"
#include "bench_util.h"
#include "driver/driver_internal.h"

static int port;
static pid_t daemon_pid = -1;
static char tmpdir[64];

/* ---- CPU accounting ----
 * Everything a cycle costs lands in one of three places: the daemon's own
 * cpuacct cgroup (its event loop, its workers and the children they fork
 * while building a jail), the jail cgroup parent (every sandbox's
 * processes, charged to the parent even after a sandbox's own group is
 * gone), and this process (the client side). */
static char cg_daemon[128], cg_jails[128];
static bool sync_claims; /* --sync-claims: the journal fsynced before each answer */
static const char *cfg_extra = ""; /* --config-extra: more top-level config keys, for experiments */

static uint64_t read_u64_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  unsigned long long v = 0;
  if (fscanf(f, "%llu", &v) != 1) v = 0;
  fclose(f);
  return v;
}

/* The fields of /proc/PID/task/TID/stat from the state (field 3) on, in
 * buf; NULL when the task is gone. */
static const char *task_stat(pid_t pid, pid_t tid, char *buf, size_t cap) {
  char path[96];
  snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
  return sbxi_proc_stat_fields(path, buf, cap);
}

/* utime + stime of one task of the daemon, in ns. */
static uint64_t task_cpu_ns(pid_t pid, pid_t tid) {
  char buf[1024];
  const char *p = task_stat(pid, tid, buf, sizeof buf);
  unsigned long long ut = 0, st = 0;
  /* utime and stime are fields 14 and 15. */
  if (!p || sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return 0;
  return (ut + st) * (1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK));
}

/* Minor page faults of the daemon's event loop thread so far: each is
 * mostly a copy-on-write fault after a worker forked a jail. */
static unsigned long loop_minflt(void) {
  char buf[1024];
  const char *p = task_stat(daemon_pid, daemon_pid, buf, sizeof buf);
  unsigned long mf = 0;
  /* minflt is field 10. */
  if (!p || sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %lu", &mf) != 1) return 0;
  return mf;
}

struct cpu_snap {
  uint64_t daemon, jails, loop, client; /* ns */
};

static struct cpu_snap cpu_snap(void) {
  struct cpu_snap c = {0};
  char path[192];
  snprintf(path, sizeof path, "%s/cpuacct.usage", cg_daemon);
  c.daemon = read_u64_file(path);
  snprintf(path, sizeof path, "%s/cpuacct.usage", cg_jails);
  c.jails = read_u64_file(path);
  c.loop = task_cpu_ns(daemon_pid, daemon_pid);
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  c.client = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  return c;
}

/* One line: CPU per cycle by where it went, and the rate the machine's
 * cores could sustain if nothing but cycles ran on them. */
static void cpu_report(const char *what, struct cpu_snap a, struct cpu_snap b, int cycles) {
  if (cycles <= 0) return;
  double d = (double)(b.daemon - a.daemon) / cycles / 1e6, j = (double)(b.jails - a.jails) / cycles / 1e6;
  double l = (double)(b.loop - a.loop) / cycles / 1e6, c = (double)(b.client - a.client) / cycles / 1e6;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (!cg_daemon[0]) {
    printf("cpu    %s: no cpuacct cgroup here; CPU per cycle not measured\n", what);
    return;
  }
  printf("cpu    %s  per cycle %.3f ms: sandboxd %.3f (event loop %.3f, workers+jail setup %.3f), sandboxes %.3f, "
         "client %.3f  -> at most %.0f cycles/s on %ld cores\n",
         what, d + j + c, d, l, d - l, j, c, cores * 1e3 / (d + j + c), cores);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int dial(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/* One request on a keep-alive connection; the body lands in body. */
static int http(int fd, const char *method, const char *path, const char *auth, const char *body, char *out,
                size_t outlen) {
  char req[1024];
  int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: b\r\n", method, path);
  if (auth) n += snprintf(req + n, sizeof req - (size_t)n, "Authorization: Bearer %s\r\n", auth);
  n += snprintf(req + n, sizeof req - (size_t)n, "Content-Length: %zu\r\n\r\n%s", body ? strlen(body) : 0,
                body ? body : "");
  if (sbxi_write_all(fd, req, (size_t)n) < 0) return -1;
  size_t got = 0;
  char buf[65536];
  for (;;) {
    ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
    if (r <= 0) return -1;
    got += (size_t)r;
    buf[got] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    if (!end) continue;
    const char *cl = strcasestr(buf, "Content-Length:");
    size_t blen = cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0;
    if (got < (size_t)(end - buf) + 4 + blen) continue;
    int status = atoi(buf + 9);
    if (out) snprintf(out, outlen, "%.*s", (int)blen, end + 4);
    return status;
  }
}

static void json_str(const char *json, const char *field, char *out, size_t len) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":\"", field);
  const char *p = strstr(json, pat);
  out[0] = '\0';
  if (!p) return;
  p += strlen(pat);
  const char *e = strchr(p, '"');
  if (e) snprintf(out, len, "%.*s", (int)(e - p), p);
}

static int json_int_after(const char *json, const char *field) {
  const char *p = strstr(json, field);
  return p ? atoi(p + strlen(field)) : -1;
}

static double last_claim_ms; /* the HTTP claim alone, of the last claim_ready */
static double last_relay_ms; /* dial, upgrade and the info round trip */

/* Claim, then prove the sandbox answers: upgrade and an info round trip. */
static int claim_ready(int ctl, char *id, char *tok) {
  char body[1024];
  double t0 = now_ms();
  int st = http(ctl, "POST", "/v1/claim", NULL, "{\"template\":\"host\"}", body, sizeof body);
  last_claim_ms = now_ms() - t0;
  if (st != 200) {
    fprintf(stderr, "claim: %d %s\n", st, body);
    return -1;
  }
  json_str(body, "id", id, 32);
  json_str(body, "token", tok, 64);
  double t1 = now_ms();
  int fd = dial();
  char req[512];
  int n = snprintf(req, sizeof req,
                   "GET /v1/sandboxes/%s/agent HTTP/1.1\r\nHost: b\r\nConnection: Upgrade\r\nUpgrade: silkd\r\n"
                   "Authorization: Bearer %s\r\n\r\n{\"v\":1,\"op\":\"info\"}\n",
                   id, tok);
  sbxi_write_all(fd, req, (size_t)n);
  char buf[8192];
  size_t got = 0;
  for (;;) {
    ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
    if (r <= 0) {
      buf[got] = '\0';
      fprintf(stderr, "agent relay of %s ended early: %s\n", id, buf);
      close(fd);
      return -1;
    }
    got += (size_t)r;
    buf[got] = '\0';
    if (got > 73 && strstr(buf + 73, "\n")) break;
  }
  last_relay_ms = now_ms() - t1;
  close(fd);
  return strstr(buf + 73, "\"type\":\"info\"") ? 0 : -1;
}

static void release(int ctl, const char *id, const char *tok) {
  char path[128];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/release", id);
  http(ctl, "POST", path, tok, NULL, NULL, 0);
}

static int warm_now(int ctl) {
  char body[4096];
  if (http(ctl, "GET", "/v1/info", NULL, NULL, body, sizeof body) != 200) return -1;
  return json_int_after(body, "\"warm\":");
}

static void wait_warm(int ctl, int want) {
  while (warm_now(ctl) < want) usleep(1000);
}

static void set_pool(int ctl, int warm) {
  char body[256];
  snprintf(body, sizeof body, "{\"pools\":[{\"template\":\"host\",\"warm\":%d}]}", warm);
  http(ctl, "PUT", "/v1/pools", NULL, body, NULL, 0);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
  int i = (int)(p / 100.0 * (n - 1) + 0.5);
  return v[i];
}

struct burst_arg {
  double ms;
  int ok;
  pthread_barrier_t *bar;
};

static void *burst_one(void *p) {
  struct burst_arg *a = p;
  int ctl = dial();
  char id[32], tok[64];
  pthread_barrier_wait(a->bar);
  double t0 = now_ms();
  a->ok = claim_ready(ctl, id, tok) == 0;
  a->ms = now_ms() - t0;
  if (a->ok) release(ctl, id, tok);
  close(ctl);
  return NULL;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) { return remove(p); }

/* In the daemon's child before exec: its own cpuacct cgroup, and the fake
 * driver allowed. */
static void daemon_child_setup(void *ud) {
  if (cg_daemon[0]) {
    char procs[192];
    snprintf(procs, sizeof procs, "%s/cgroup.procs", cg_daemon);
    FILE *cf = fopen(procs, "w");
    if (cf) {
      fprintf(cf, "%d\n", (int)getpid());
      fclose(cf);
    }
  }
  setenv("SANDBOXD_ALLOW_FAKE_DRIVER", "1", 1);
}

static bench_daemon daemon_proc;

static int start_daemon(const char *driver) {
  char cfg[1024];
  /* A cgroup parent of its own, away from other daemons' reconciles. */
  snprintf(cfg, sizeof cfg,
           "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DIR@/data\",\"driver\":\"%s\",\"max_claims\":0,"
           "\"sync_claims\":%s,\"jail\":{\"cgroup_root\":\"bench-claim-%d\"},%s"
           "\"pools\":[{\"template\":\"host\",\"warm\":4}]}",
           driver, sync_claims ? "true" : "false", (int)getpid(), cfg_extra);
  snprintf(cg_jails, sizeof cg_jails, "/sys/fs/cgroup/cpuacct/bench-claim-%d", (int)getpid());
  snprintf(cg_daemon, sizeof cg_daemon, "/sys/fs/cgroup/cpuacct/bench-claim-%d-daemon", (int)getpid());
  if (mkdir(cg_daemon, 0755) < 0 && errno != EEXIST) cg_daemon[0] = cg_jails[0] = '\0';
  int rc = bench_daemon_start(&daemon_proc, "bench-claim", cfg, daemon_child_setup, NULL);
  daemon_pid = daemon_proc.pid;
  snprintf(tmpdir, sizeof tmpdir, "%s", daemon_proc.dir);
  if (rc < 0) return -1;
  port = daemon_proc.port;
  return daemon_proc.log_fd;
}

/* Tear down: a restart that owns nothing destroys every sandbox left. */
static void stop_daemon(void) {
  if (daemon_pid > 0) {
    kill(daemon_pid, SIGTERM);
    waitpid(daemon_pid, NULL, 0);
  }
}

struct churn_arg {
  double until;
  int ops;
};

static void *churn_one(void *p) {
  struct churn_arg *a = p;
  int fd = dial();
  while (fd >= 0 && now_ms() < a->until) {
    char body[1024], id[32], tok[64];
    int st = http(fd, "POST", "/v1/claim", NULL, "{\"template\":\"host\"}", body, sizeof body);
    if (st < 0) break;
    if (st != 200) continue;
    json_str(body, "id", id, sizeof id);
    json_str(body, "token", tok, sizeof tok);
    release(fd, id, tok);
    a->ops++;
  }
  if (fd >= 0) close(fd);
  return NULL;
}

/* k clients, each claim then release in a loop on its own connection. */
static int churn(int k, double secs) {
  pthread_t th[64];
  struct churn_arg ca[64];
  if (k > 64) k = 64;
  double until = now_ms() + secs * 1000;
  for (int i = 0; i < k; i++) {
    ca[i] = (struct churn_arg){.until = until};
    pthread_create(&th[i], NULL, churn_one, &ca[i]);
  }
  int ops = 0;
  for (int i = 0; i < k; i++) {
    pthread_join(th[i], NULL);
    ops += ca[i].ops;
  }
  return ops;
}

static const char *only; /* comma list of phases, NULL = all */

static bool want(const char *phase) {
  if (!only) return true;
  size_t n = strlen(phase);
  for (const char *p = only; (p = strstr(p, phase)); p += n)
    if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return true;
  return false;
}

/* n warm claims, each timed from the HTTP claim to silkd's info answer
 * (with the HTTP claim and the upgrade + info step apart) and released;
 * settled waits for a full pool before each one. */
static void warm_claims(int ctl, int n, bool settled) {
  double *lat = calloc((size_t)n, sizeof *lat), *cl = calloc((size_t)n, sizeof *cl),
         *rl = calloc((size_t)n, sizeof *rl);
  int ok = 0;
  unsigned long f0 = loop_minflt();
  for (int i = 0; i < n; i++) {
    wait_warm(ctl, settled ? 4 : 1);
    if (settled) usleep(2000); /* let the last clone's probe connection wind down */
    char id[32], tok[64];
    double t0 = now_ms();
    if (claim_ready(ctl, id, tok) == 0) {
      cl[ok] = last_claim_ms;
      rl[ok] = last_relay_ms;
      lat[ok++] = now_ms() - t0;
      release(ctl, id, tok);
    }
  }
  qsort(lat, (size_t)ok, sizeof *lat, cmp_d);
  qsort(cl, (size_t)ok, sizeof *cl, cmp_d);
  qsort(rl, (size_t)ok, sizeof *rl, cmp_d);
  printf("warm   %-12s n=%d  p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  (HTTP claim alone p50 %.3f ms, "
         "upgrade+info p50 %.3f ms; %.0f loop page faults per claim)\n",
         settled ? "settled" : "claim->info", ok, pct(lat, ok, 50), pct(lat, ok, 90), pct(lat, ok, 99),
         pct(cl, ok, 50), pct(rl, ok, 50), ok ? (double)(loop_minflt() - f0) / ok : 0);
  free(lat);
  free(cl);
  free(rl);
}

int main(int argc, char **argv) {
  int n = 200, clients = 8;
  double churn_s = 2;
  const char *driver = "jail";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) n = atoi(argv[++i]);
    else if (strcmp(argv[i], "--driver") == 0 && i + 1 < argc) driver = argv[++i];
    else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) clients = atoi(argv[++i]);
    else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) churn_s = atof(argv[++i]);
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    else if (strcmp(argv[i], "--sync-claims") == 0) sync_claims = true;
    else if (strcmp(argv[i], "--config-extra") == 0 && i + 1 < argc) cfg_extra = argv[++i];
    else {
      fprintf(stderr, "usage: bench-claim [-n N] [--driver jail|qemu] [-c CLIENTS] [-t SECONDS] [--sync-claims]\n"
                      "                   [--only warm,settled,clone,burst,refill,churn] [--config-extra '\"k\":v,']\n");
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0); /* each figure as soon as it is measured */
  int logfd = start_daemon(driver);
  if (logfd < 0) {
    if (daemon_pid > 0) waitpid(daemon_pid, NULL, 0);
    if (cg_daemon[0]) rmdir(cg_daemon);
    nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 2;
  }
  int ctl = dial();
  wait_warm(ctl, 4);

  /* warm tier, with refill running; then settled: the same with the pool
   * full before each claim, the claim path alone without a clone
   * competing for the CPUs */
  if (want("warm")) warm_claims(ctl, n, false);
  if (want("settled")) warm_claims(ctl, n, true);
  int ok = 0;
  double *lat = calloc((size_t)n, sizeof *lat);

  /* clone tier: no warm instances, every claim clones the golden */
  if (want("clone")) {
    set_pool(ctl, 0);
    while (warm_now(ctl) > 0) usleep(1000);
    usleep(100 * 1000); /* the drained pool's destroys */
    int nc = n < 50 ? n : 50;
    ok = 0;
    struct cpu_snap c0 = cpu_snap();
    for (int i = 0; i < nc; i++) {
      char id[32], tok[64];
      double t0 = now_ms();
      if (claim_ready(ctl, id, tok) == 0) {
        lat[ok++] = now_ms() - t0;
        release(ctl, id, tok);
      }
    }
    usleep(100 * 1000); /* the last release's destroy */
    struct cpu_snap c1 = cpu_snap();
    qsort(lat, (size_t)ok, sizeof *lat, cmp_d);
    printf("clone  claim->info  n=%d  p50 %.3f ms  p90 %.3f ms  p99 %.3f ms\n", ok, pct(lat, ok, 50),
           pct(lat, ok, 90), pct(lat, ok, 99));
    cpu_report("clone+info+release+destroy", c0, c1, ok);
  }

  /* burst of 16 from a full pool of 16 */
  set_pool(ctl, 16);
  if (want("burst")) {
    wait_warm(ctl, 16);
    pthread_t th[16];
    struct burst_arg ba[16];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 17);
    for (int i = 0; i < 16; i++) {
      ba[i] = (struct burst_arg){.bar = &bar};
      pthread_create(&th[i], NULL, burst_one, &ba[i]);
    }
    pthread_barrier_wait(&bar);
    double w0 = now_ms();
    for (int i = 0; i < 16; i++) pthread_join(th[i], NULL);
    double wall = now_ms() - w0;
    ok = 0;
    for (int i = 0; i < 16; i++)
      if (ba[i].ok) lat[ok++] = ba[i].ms;
    qsort(lat, (size_t)ok, sizeof *lat, cmp_d);
    printf("burst  16 concurrent  ok=%d  p50 %.3f ms  max %.3f ms  wall %.3f ms\n", ok, pct(lat, ok, 50),
           ok ? lat[ok - 1] : 0, wall);
  }

  /* refill recovery: drain destroys the 16, uncordon refills them */
  if (want("refill")) {
    wait_warm(ctl, 16);
    http(ctl, "POST", "/v1/drain", NULL, NULL, NULL, 0);
    http(ctl, "DELETE", "/v1/drain", NULL, NULL, NULL, 0);
    double r0 = now_ms();
    wait_warm(ctl, 16);
    printf("refill 16 from empty  %.1f ms\n", now_ms() - r0);
  }

  /* sustained claim+release over keep-alive: one client, then several */
  if (want("churn")) {
    for (int round = 0; round < 2; round++) {
      int k = round == 0 ? 1 : clients;
      wait_warm(ctl, 16);
      struct cpu_snap a = cpu_snap();
      double s0 = now_ms();
      int ops = churn(k, churn_s);
      double secs = (now_ms() - s0) / 1000;
      struct cpu_snap b = cpu_snap();
      printf("churn  claim+release  %d client%s  %.0f per second  (%d cycles in %.1f s)\n", k, k == 1 ? "" : "s",
             ops / secs, ops, secs);
      char what[32];
      snprintf(what, sizeof what, "churn %d", k);
      cpu_report(what, a, b, ops);
    }
  }
  char metrics[16384];
  http(ctl, "GET", "/metrics", NULL, NULL, metrics, sizeof metrics);
  const char *m = strstr(metrics, "sandboxd_claims_total{tier=\"warm\"}");
  if (m) printf("tiers  %.*s\n", (int)strcspn(m, "#") - 1, m);

  /* leave nothing behind */
  set_pool(ctl, 0);
  close(ctl);
  stop_daemon();
  char p[128];
  snprintf(p, sizeof p, "%s/data/claims.json", tmpdir);
  unlink(p);
  close(logfd);
  logfd = start_daemon(driver); /* reconcile destroys every leftover */
  stop_daemon();
  if (logfd >= 0) close(logfd);
  nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  if (cg_daemon[0]) rmdir(cg_daemon);
  static const char *const ctls[] = {"cpu", "cpuacct", "cpuset", "memory", "pids", "freezer", "blkio", "devices",
                                    "systemd", "unified"};
  for (size_t i = 0; i < sizeof ctls / sizeof *ctls; i++) {
    char cg[128];
    snprintf(cg, sizeof cg, "/sys/fs/cgroup/%s/bench-claim-%d", ctls[i], (int)getpid());
    rmdir(cg);
  }
  free(lat);
  return 0;
}
