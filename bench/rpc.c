/* bench/rpc: the data plane through sandboxd's relay.
 *
 *   bench-rpc [-n SAMPLES] [--mib N] [--addr ADDR]
 *
 * Without --addr it starts build/bin/sandboxd (next to this binary) with the
 * jail driver on a free port and a temporary data_dir (needs root), claims
 * one sandbox and measures:
 *   - fs_stat and exec (`true`) round trips on a kept (parked, reused)
 *     connection and with a fresh upgrade per RPC, interleaved sample by
 *     sample so both see the same machine state; p50/p90/p99 in µs;
 *   - fs_push and fs_pull of an N MiB file (default 128) as a tar stream,
 *     in MiB/s (median of 3).
 * With --addr, the node at ADDR is used (SANDBOXD_TOKEN as the node token);
 * --addr unix:PATH talks to a silkd socket directly, which separates the
 * relay's share from silkd's. */
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sandbox/client.h>

#include "bench_util.h"

static pid_t daemon_pid;
static char tmpdir[64];

static int start_daemon(char *addr, size_t addr_len) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) return -1;
  exe[n] = '\0';
  *strrchr(exe, '/') = '\0';
  if (!tmpdir[0]) { /* the cleanup restart must reuse the same data_dir */
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bench-rpc-XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
  }
  char cfg[128];
  snprintf(cfg, sizeof cfg, "%s/config.json", tmpdir);
  FILE *f = fopen(cfg, "w");
  fprintf(f, "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"%s/data\",\"driver\":\"jail\","
             "\"pools\":[{\"template\":\"host\",\"warm\":1}]}",
          tmpdir);
  fclose(f);
  int pfd[2];
  if (pipe(pfd) < 0) return -1;
  daemon_pid = fork();
  if (daemon_pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
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
      snprintf(addr, addr_len, "127.0.0.1:%d", atoi(m + 11));
      fcntl(pfd[0], F_SETFL, O_NONBLOCK);
      return 0;
    }
  }
  fprintf(stderr, "sandboxd did not start:\n%s\n", buf);
  return -1;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) { return remove(p); }

/* A restart that owns no claims and no pools destroys what is left. */
static void stop_daemon(void) {
  if (daemon_pid <= 0) return;
  kill(daemon_pid, SIGTERM);
  waitpid(daemon_pid, NULL, 0);
  char p[128];
  snprintf(p, sizeof p, "%s/data/claims.json", tmpdir);
  unlink(p);
  snprintf(p, sizeof p, "%s/data/pools.json", tmpdir);
  FILE *f = fopen(p, "w");
  if (f) {
    fputs("{\"pools\":[]}", f);
    fclose(f);
  }
  char addr[64];
  if (start_daemon(addr, sizeof addr) == 0) {
    kill(daemon_pid, SIGTERM);
    waitpid(daemon_pid, NULL, 0);
  }
  nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static int cmp_d(const void *a, const void *b) { return bench_cmp_double(a, b); }

static void report(const char *what, double *us, size_t n) {
  qsort(us, n, sizeof *us, cmp_d);
  printf("%-24s n=%-5zu p50 %8.1f µs   p90 %8.1f µs   p99 %8.1f µs\n", what, n, bench_percentile(us, n, 50),
         bench_percentile(us, n, 90), bench_percentile(us, n, 99));
}

static int die(const char *what, const sbx_error *err) {
  fprintf(stderr, "bench-rpc: %s: %s\n", what, err->msg);
  stop_daemon();
  exit(1);
}

/* One ustar header for a regular file "blob" of size n. */
static void tar_header(char h[512], uint64_t n) {
  memset(h, 0, 512);
  strcpy(h, "blob");
  snprintf(h + 100, 8, "%07o", 0644);
  snprintf(h + 108, 8, "%07o", 0);
  snprintf(h + 116, 8, "%07o", 0);
  snprintf(h + 124, 12, "%011llo", (unsigned long long)n);
  snprintf(h + 136, 12, "%011o", 0);
  h[156] = '0';
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += (unsigned char)h[i];
  snprintf(h + 148, 8, "%06o", sum);
}

static double push_once(sbx_sandbox *s, uint64_t bytes, const char *chunk, size_t chunk_len) {
  sbx_error err;
  sbx_transfer *t;
  uint64_t t0 = sbx_now_ns();
  if (sbx_sandbox_push_begin(s, "/tmp/bench-rpc", &t, &err) < 0) die("push", &err);
  char h[512];
  tar_header(h, bytes);
  if (sbx_transfer_write(t, h, sizeof h, &err) < 0) die("push", &err);
  for (uint64_t left = bytes; left > 0;) {
    size_t k = left < chunk_len ? (size_t)left : chunk_len;
    if (sbx_transfer_write(t, chunk, k, &err) < 0) die("push", &err);
    left -= k;
  }
  static const char pad[1024 + 512];
  size_t tail = (size_t)((512 - bytes % 512) % 512) + 1024;
  if (sbx_transfer_write(t, pad, tail, &err) < 0 || sbx_transfer_finish(t, &err) < 0) die("push", &err);
  sbx_transfer_close(t);
  return (double)bytes / (1 << 20) / ((double)(sbx_now_ns() - t0) / 1e9);
}

static double pull_once(sbx_sandbox *s, uint64_t bytes) {
  sbx_error err;
  sbx_transfer *t;
  uint64_t t0 = sbx_now_ns(), got = 0;
  if (sbx_sandbox_pull_begin(s, "/tmp/bench-rpc/blob", &t, &err) < 0) die("pull", &err);
  const void *p;
  size_t n;
  int rc;
  while ((rc = sbx_transfer_read(t, &p, &n, &err)) == 1) got += n;
  if (rc < 0) die("pull", &err);
  sbx_transfer_close(t);
  if (got < bytes) {
    fprintf(stderr, "bench-rpc: pull returned %llu bytes\n", (unsigned long long)got);
    exit(1);
  }
  return (double)bytes / (1 << 20) / ((double)(sbx_now_ns() - t0) / 1e9);
}

int main(int argc, char **argv) {
  int n = 1000, mib = 128;
  const char *addr_arg = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      n = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc) {
      mib = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--addr") == 0 && i + 1 < argc) {
      addr_arg = argv[++i];
    } else {
      fprintf(stderr, "usage: bench-rpc [-n SAMPLES] [--mib N] [--addr ADDR]\n");
      return 2;
    }
  }
  if (n < 1 || mib < 1) return 2;
  signal(SIGPIPE, SIG_IGN);
  char addr[128];
  if (addr_arg) {
    snprintf(addr, sizeof addr, "%s", addr_arg);
  } else if (start_daemon(addr, sizeof addr) < 0) {
    return 1;
  }
  sbx_client_opts o = {.addr = addr, .token = getenv("SANDBOXD_TOKEN")};
  sbx_client *c;
  sbx_sandbox *s;
  sbx_error err;
  if (sbx_client_new(&o, &c, &err) < 0) die("client", &err);
  sbx_claim_opts co = {.template_ = "host", .ttl_seconds = 900};
  bool direct = strncmp(addr, "unix:", 5) == 0;
  if (direct ? sbx_client_attach(c, "sb_bench", "bench", NULL, &s, &err) < 0
             : sbx_client_claim(c, &co, &s, &err) < 0)
    die("claim", &err);

  double *stat_kept = sbx_calloc((size_t)n, sizeof(double)), *stat_dial = sbx_calloc((size_t)n, sizeof(double));
  double *exec_kept = sbx_calloc((size_t)n, sizeof(double)), *exec_dial = sbx_calloc((size_t)n, sizeof(double));
  const char *argv_true[] = {"true", NULL};
  sbx_exec_opts eo = {.argv = argv_true};
  sbx_wire_file_info fi;
  int code;
  /* warm up: the first dial learns the protocol version */
  for (int i = 0; i < 20; i++)
    if (sbx_sandbox_stat(s, "/", &fi, &err) < 0 || sbx_sandbox_run(s, &eo, NULL, NULL, &code, &err) < 0)
      die("warm-up", &err);
  for (int i = 0; i < n; i++) {
    uint64_t t0 = sbx_now_ns();
    if (sbx_sandbox_stat(s, "/", &fi, &err) < 0) die("fs_stat", &err);
    stat_kept[i] = (double)(sbx_now_ns() - t0) / 1e3;
    sbx_sandbox_close_idle(s);
    t0 = sbx_now_ns();
    if (sbx_sandbox_stat(s, "/", &fi, &err) < 0) die("fs_stat", &err);
    stat_dial[i] = (double)(sbx_now_ns() - t0) / 1e3;
    t0 = sbx_now_ns();
    if (sbx_sandbox_run(s, &eo, NULL, NULL, &code, &err) < 0) die("exec", &err);
    exec_kept[i] = (double)(sbx_now_ns() - t0) / 1e3;
    sbx_sandbox_close_idle(s);
    t0 = sbx_now_ns();
    if (sbx_sandbox_run(s, &eo, NULL, NULL, &code, &err) < 0) die("exec", &err);
    exec_dial[i] = (double)(sbx_now_ns() - t0) / 1e3;
  }
  printf("bench-rpc: %s, sandbox %s\n", addr, sbx_sandbox_id(s));
  report("fs_stat kept", stat_kept, (size_t)n);
  report("fs_stat dial-per-RPC", stat_dial, (size_t)n);
  report("exec kept", exec_kept, (size_t)n);
  report("exec dial-per-RPC", exec_dial, (size_t)n);

  size_t chunk_len = 1 << 20;
  char *chunk = sbx_malloc(chunk_len);
  for (size_t i = 0; i < chunk_len; i++) chunk[i] = (char)(i * 2654435761u >> 24); /* not all zeros */
  uint64_t bytes = (uint64_t)mib << 20;
  double push[3], pull[3];
  for (int r = 0; r < 3; r++) {
    push[r] = push_once(s, bytes, chunk, chunk_len);
    pull[r] = pull_once(s, bytes);
  }
  bench_stats ps = bench_summarize(push, 3), pl = bench_summarize(pull, 3);
  printf("fs_push %d MiB            median %7.1f MiB/s (min %.1f, max %.1f)\n", mib, ps.median, ps.min, ps.max);
  printf("fs_pull %d MiB            median %7.1f MiB/s (min %.1f, max %.1f)\n", mib, pl.median, pl.min, pl.max);

  sbx_sandbox_remove(s, "/tmp/bench-rpc", true, &err);
  if (!direct) sbx_sandbox_release(s, &err);
  sbx_sandbox_free(s);
  sbx_client_free(c);
  sbx_free(chunk);
  sbx_free(stat_kept);
  sbx_free(stat_dial);
  sbx_free(exec_kept);
  sbx_free(exec_dial);
  stop_daemon();
  return 0;
}
