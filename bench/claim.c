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
 *   churn   claim+release per second, sustained, over keep-alive
 * Usage: bench-claim [-n N] [--driver jail|fake]   (root for jail)
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

static int port;
static pid_t daemon_pid = -1;
static char tmpdir[64];

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

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* One request on a keep-alive connection; the body lands in body. */
static int http(int fd, const char *method, const char *path, const char *auth, const char *body, char *out,
                size_t outlen) {
  char req[1024];
  int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: b\r\n", method, path);
  if (auth) n += snprintf(req + n, sizeof req - (size_t)n, "Authorization: Bearer %s\r\n", auth);
  n += snprintf(req + n, sizeof req - (size_t)n, "Content-Length: %zu\r\n\r\n%s", body ? strlen(body) : 0,
                body ? body : "");
  if (write_all(fd, req, (size_t)n) < 0) return -1;
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
  int fd = dial();
  char req[512];
  int n = snprintf(req, sizeof req,
                   "GET /v1/sandboxes/%s/agent HTTP/1.1\r\nHost: b\r\nConnection: Upgrade\r\nUpgrade: silkd\r\n"
                   "Authorization: Bearer %s\r\n\r\n{\"v\":1,\"op\":\"info\"}\n",
                   id, tok);
  write_all(fd, req, (size_t)n);
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

static int start_daemon(const char *driver) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) return -1;
  exe[n] = '\0';
  *strrchr(exe, '/') = '\0';
  if (!tmpdir[0]) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bench-claim-XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
  }
  char cfg[128];
  snprintf(cfg, sizeof cfg, "%s/config.json", tmpdir);
  FILE *f = fopen(cfg, "w");
  /* A cgroup parent of its own, away from other daemons' reconciles. */
  fprintf(f, "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"%s/data\",\"driver\":\"%s\",\"max_claims\":0,"
             "\"jail\":{\"cgroup_root\":\"bench-claim-%d\"},\"pools\":[{\"template\":\"host\",\"warm\":4}]}",
          tmpdir, driver, (int)getpid());
  fclose(f);
  int pfd[2];
  if (pipe(pfd) < 0) return -1;
  daemon_pid = fork();
  if (daemon_pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(pfd[1], 2);
    close(pfd[0]);
    setenv("SANDBOXD_ALLOW_FAKE_DRIVER", "1", 1);
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
      port = atoi(m + 11);
      /* Keep the pipe drained from here on without blocking anyone. */
      fcntl(pfd[0], F_SETFL, O_NONBLOCK);
      return pfd[0];
    }
  }
  fprintf(stderr, "sandboxd did not start:\n%s\n", buf);
  return -1;
}

/* Tear down: a restart that owns nothing destroys every sandbox left. */
static void stop_daemon(void) {
  if (daemon_pid > 0) {
    kill(daemon_pid, SIGTERM);
    waitpid(daemon_pid, NULL, 0);
  }
}

int main(int argc, char **argv) {
  int n = 200;
  const char *driver = "jail";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) n = atoi(argv[++i]);
    else if (strcmp(argv[i], "--driver") == 0 && i + 1 < argc) driver = argv[++i];
    else {
      fprintf(stderr, "usage: bench-claim [-n N] [--driver jail|fake]\n");
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  int logfd = start_daemon(driver);
  if (logfd < 0) return 2;
  int ctl = dial();
  wait_warm(ctl, 4);

  /* warm tier */
  double *lat = calloc((size_t)n, sizeof *lat);
  int ok = 0;
  for (int i = 0; i < n; i++) {
    wait_warm(ctl, 1);
    char id[32], tok[64];
    double t0 = now_ms();
    if (claim_ready(ctl, id, tok) == 0) {
      lat[ok++] = now_ms() - t0;
      release(ctl, id, tok);
    }
  }
  qsort(lat, (size_t)ok, sizeof *lat, cmp_d);
  printf("warm   claim->info  n=%d  p50 %.3f ms  p90 %.3f ms  p99 %.3f ms\n", ok, pct(lat, ok, 50), pct(lat, ok, 90),
         pct(lat, ok, 99));

  /* the same with refill settled before each claim: the claim path alone,
   * without a clone competing for the CPUs */
  ok = 0;
  double *cl = calloc((size_t)n, sizeof *cl);
  for (int i = 0; i < n; i++) {
    wait_warm(ctl, 4);
    usleep(2000); /* let the last clone's probe connection wind down */
    char id[32], tok[64];
    double t0 = now_ms();
    if (claim_ready(ctl, id, tok) == 0) {
      cl[ok] = last_claim_ms;
      lat[ok++] = now_ms() - t0;
      release(ctl, id, tok);
    }
  }
  qsort(lat, (size_t)ok, sizeof *lat, cmp_d);
  qsort(cl, (size_t)ok, sizeof *cl, cmp_d);
  printf("warm   settled      n=%d  p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  (HTTP claim alone p50 %.3f ms)\n", ok,
         pct(lat, ok, 50), pct(lat, ok, 90), pct(lat, ok, 99), pct(cl, ok, 50));
  free(cl);

  /* clone tier: no warm instances, every claim clones the golden */
  set_pool(ctl, 0);
  while (warm_now(ctl) > 0) usleep(1000);
  int nc = n < 50 ? n : 50;
  ok = 0;
  for (int i = 0; i < nc; i++) {
    char id[32], tok[64];
    double t0 = now_ms();
    if (claim_ready(ctl, id, tok) == 0) {
      lat[ok++] = now_ms() - t0;
      release(ctl, id, tok);
    }
  }
  qsort(lat, (size_t)ok, sizeof *lat, cmp_d);
  printf("clone  claim->info  n=%d  p50 %.3f ms  p90 %.3f ms  p99 %.3f ms\n", ok, pct(lat, ok, 50),
         pct(lat, ok, 90), pct(lat, ok, 99));

  /* burst of 16 from a full pool of 16 */
  set_pool(ctl, 16);
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

  /* refill recovery: drain destroys the 16, uncordon refills them */
  wait_warm(ctl, 16);
  http(ctl, "POST", "/v1/drain", NULL, NULL, NULL, 0);
  http(ctl, "DELETE", "/v1/drain", NULL, NULL, NULL, 0);
  double r0 = now_ms();
  wait_warm(ctl, 16);
  printf("refill 16 from empty  %.1f ms\n", now_ms() - r0);

  /* sustained claim+release over keep-alive, 2 s */
  int ops = 0;
  double s0 = now_ms();
  while (now_ms() - s0 < 2000) {
    char body[1024], id[32], tok[64];
    if (http(ctl, "POST", "/v1/claim", NULL, "{\"template\":\"host\"}", body, sizeof body) != 200) continue;
    json_str(body, "id", id, sizeof id);
    json_str(body, "token", tok, sizeof tok);
    release(ctl, id, tok);
    ops++;
  }
  printf("churn  claim+release  %.0f per second\n", ops / ((now_ms() - s0) / 1000));
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
