/* bench/rpc: the data plane through sandboxd's relay.
 *
 *   bench-rpc [-n SAMPLES] [--mib N] [--rounds R] [--addr ADDR] [--no-handoff]
 *
 * Without --addr it starts build/bin/sandboxd (next to this binary) with the
 * jail driver on a free port and a temporary data_dir (needs root), claims
 * one sandbox and measures:
 *   - fs_stat and exec (`true`) round trips on a kept (parked, reused)
 *     connection and with a fresh upgrade per RPC, interleaved sample by
 *     sample so both see the same machine state; p50/p90/p99 in µs;
 *   - fs_push and fs_pull of an N MiB file (default 128) as a tar stream,
 *     in MiB/s (median of R rounds, default 3).
 * -n 0 skips the round trips (transfers only, for A/B runs of the relay);
 * --stat-only does nothing but the n kept fs_stat round trips, so a
 * `perf stat` or `strace -c` of the processes counts per RPC.
 * With its own sandboxd it also prints the CPU time per GiB moved spent by
 * this client, by sandboxd (the relay) and by the sandbox's silkd: on a
 * shared 2-core machine MiB/s swings with the neighbours' load, CPU per GiB
 * much less.
 * With --addr, the node at ADDR is used (SANDBOXD_TOKEN as the node token);
 * --addr unix:PATH talks to a silkd socket directly, which separates the
 * relay's share from silkd's. The node it starts hands agent upgrades off
 * (relay_handoff true, which is not sandboxd's default); --no-handoff
 * starts it with relay_handoff false, so it relays agent upgrades instead
 * of passing the client socket to silkd (A/B of the two paths). */
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sandbox/client.h>

#include "bench_util.h"

static bench_daemon sbxd;
static bool no_handoff;

static int start_daemon(char *addr, size_t addr_len) {
  const char *cfg = no_handoff ? "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DIR@/data\",\"driver\":\"jail\","
                                 "\"relay_handoff\":false,\"pools\":[{\"template\":\"host\",\"warm\":1}]}"
                               : "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DIR@/data\",\"driver\":\"jail\","
                                 "\"relay_handoff\":true,\"pools\":[{\"template\":\"host\",\"warm\":1}]}";
  if (bench_daemon_start(&sbxd, "bench-rpc", cfg, NULL, NULL) < 0) return -1;
  snprintf(addr, addr_len, "127.0.0.1:%d", sbxd.port);
  return 0;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) { return remove(p); }

/* A restart that owns no claims and no pools destroys what is left. */
static void stop_daemon(void) {
  if (sbxd.pid <= 0) return;
  bench_daemon_forget(&sbxd);
  char addr[64];
  if (start_daemon(addr, sizeof addr) == 0) {
    bench_daemon_stop(&sbxd);
  }
  nftw(sbxd.dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  sbxd.pid = 0;
}

/* Parent pid of pid, or -1. */
static pid_t ppid_of(pid_t pid) {
  char p[64], buf[512];
  snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(p, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *e = strrchr(buf, ')');
  int pp;
  return e && sscanf(e + 2, "%*c %d", &pp) == 1 ? (pid_t)pp : -1;
}

/* Whether pid runs below sandboxd. */
static bool below_daemon(pid_t pid) {
  for (pid_t a = ppid_of(pid); a > 1; a = ppid_of(a))
    if (a == sbxd.pid) return true;
  return false;
}

/* The sum over every thread of pid of one figure read from the thread's
 * proc file `file` (one of /proc/PID/task/TID/...). */
typedef uint64_t (*task_figure)(FILE *f);

static uint64_t sum_over_tasks(pid_t pid, const char *file, task_figure figure) {
  if (pid <= 0) return 0;
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/task", (int)pid);
  DIR *d = opendir(p);
  uint64_t sum = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char q[400]; /* d_name: up to 255 bytes */
    snprintf(q, sizeof q, "/proc/%d/task/%s/%s", (int)pid, e->d_name, file);
    FILE *f = fopen(q, "r");
    if (!f) continue;
    sum += figure(f);
    fclose(f);
  }
  if (d) closedir(d);
  return sum;
}

static uint64_t schedstat_ns(FILE *f) {
  unsigned long long ns = 0;
  return fscanf(f, "%llu", &ns) == 1 ? ns : 0;
}

/* Voluntary context switches: each one is a sleep, so per RPC it counts
 * the wakeups. */
static uint64_t voluntary_switches(FILE *f) {
  char line[128];
  unsigned long long v;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1) return v;
  return 0;
}

/* CPU time of every thread of pid, in ns (schedstat, not tick-rounded). */
static uint64_t proc_cpu_ns(pid_t pid) { return sum_over_tasks(pid, "schedstat", schedstat_ns); }

/* Sleeps of every thread of pid. */
static uint64_t proc_ctxsw(pid_t pid) { return sum_over_tasks(pid, "status", voluntary_switches); }

/* The silkd below sandboxd that used the most CPU between two scans: the
 * claimed sandbox's (the idle pool's does nothing). */
#define MAX_SILKD 16
typedef struct {
  pid_t pid[MAX_SILKD];
  uint64_t ns[MAX_SILKD];
  int n;
} silkd_scan;

static void silkd_list(silkd_scan *out) {
  out->n = 0;
  DIR *d = opendir("/proc");
  for (struct dirent *e; d && (e = readdir(d)) && out->n < MAX_SILKD;) {
    pid_t pid = (pid_t)atoi(e->d_name);
    char p[64], comm[32] = "";
    snprintf(p, sizeof p, "/proc/%d/comm", (int)pid);
    FILE *f = pid > 0 ? fopen(p, "r") : NULL;
    if (!f) continue;
    if (!fgets(comm, sizeof comm, f)) comm[0] = '\0';
    fclose(f);
    if (strcmp(comm, "silkd\n") == 0 && below_daemon(pid)) {
      out->pid[out->n] = pid;
      out->ns[out->n++] = proc_cpu_ns(pid);
    }
  }
  if (d) closedir(d);
}

/* CPU time of the silkd processes below sandboxd (the claimed sandbox's
 * and the idle pool's, which adds nothing). */
static uint64_t silkd_cpu_ns(void) {
  silkd_scan sc;
  silkd_list(&sc);
  uint64_t sum = 0;
  for (int i = 0; i < sc.n; i++) sum += sc.ns[i];
  return sum;
}

static pid_t busiest_silkd(const silkd_scan *before) {
  pid_t best = -1;
  uint64_t most = 0;
  for (int i = 0; i < before->n; i++) {
    uint64_t now = proc_cpu_ns(before->pid[i]);
    if (now - before->ns[i] >= most) {
      most = now - before->ns[i];
      best = before->pid[i];
    }
  }
  return best;
}

static uint64_t self_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct {
  uint64_t client, relay, silkd;
} cpu_mark;

static cpu_mark cpu_now(void) {
  if (sbxd.pid <= 0) return (cpu_mark){0};
  return (cpu_mark){self_cpu_ns(), proc_cpu_ns(sbxd.pid), silkd_cpu_ns()};
}

static void cpu_add(cpu_mark *acc, cpu_mark a, cpu_mark b) {
  acc->client += b.client - a.client;
  acc->relay += b.relay - a.relay;
  acc->silkd += b.silkd - a.silkd;
}

static void cpu_report(const char *what, const cpu_mark *c, uint64_t bytes) {
  double gib = (double)bytes / (1 << 30), ms = 1e6;
  printf("%-24s CPU ms/GiB: client %6.0f   sandboxd %6.0f   silkd %6.0f\n", what, (double)c->client / ms / gib,
         (double)c->relay / ms / gib, (double)c->silkd / ms / gib);
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
  snprintf(h + 124, 12, "%011llo", (unsigned long long)n & 077777777777ull); /* ustar: 11 octal digits */
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

/* fs_stat and exec, kept and dial-per-RPC, interleaved sample by sample. */
static void round_trips(sbx_sandbox *s, const char *addr, int n) {
  sbx_error err;
  size_t nn = n ? (size_t)n : 1;
  double *stat_kept = sbx_calloc(nn, sizeof(double)), *stat_dial = sbx_calloc(nn, sizeof(double));
  double *exec_kept = sbx_calloc(nn, sizeof(double)), *exec_dial = sbx_calloc(nn, sizeof(double));
  const char *argv_true[] = {"true", NULL};
  sbx_exec_opts eo = SBX_EXEC_OPTS_INIT(.argv = argv_true);
  sbx_wire_file_info fi;
  int code;
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
  if (n > 0) {
    report("fs_stat kept", stat_kept, (size_t)n);
    report("fs_stat dial-per-RPC", stat_dial, (size_t)n);
    report("exec kept", exec_kept, (size_t)n);
    report("exec dial-per-RPC", exec_dial, (size_t)n);
  }
  sbx_free(stat_kept);
  sbx_free(stat_dial);
  sbx_free(exec_kept);
  sbx_free(exec_dial);
}

/* fs_push then fs_pull of mib MiB, rounds times. */
static void transfers(sbx_sandbox *s, int mib, int rounds) {
  sbx_error err;
  size_t chunk_len = 1 << 20;
  char *chunk = sbx_malloc(chunk_len);
  for (size_t i = 0; i < chunk_len; i++) chunk[i] = (char)(i * 2654435761u >> 24); /* not all zeros */
  uint64_t bytes = (uint64_t)mib << 20;
  double push[BENCH_MAX_RUNS], pull[BENCH_MAX_RUNS];
  cpu_mark cpu_push = {0}, cpu_pull = {0};
  for (int r = 0; r < rounds; r++) {
    cpu_mark m0 = cpu_now();
    push[r] = push_once(s, bytes, chunk, chunk_len);
    cpu_mark m1 = cpu_now();
    pull[r] = pull_once(s, bytes);
    cpu_mark m2 = cpu_now();
    cpu_add(&cpu_push, m0, m1);
    cpu_add(&cpu_pull, m1, m2);
  }
  bench_stats ps = bench_summarize(push, (size_t)rounds), pl = bench_summarize(pull, (size_t)rounds);
  printf("fs_push %d MiB            median %7.1f MiB/s (min %.1f, max %.1f)\n", mib, ps.median, ps.min, ps.max);
  printf("fs_pull %d MiB            median %7.1f MiB/s (min %.1f, max %.1f)\n", mib, pl.median, pl.min, pl.max);
  if (sbxd.pid > 0) {
    cpu_report("fs_push", &cpu_push, bytes * (uint64_t)rounds);
    cpu_report("fs_pull", &cpu_pull, bytes * (uint64_t)rounds);
  }
  sbx_sandbox_remove(s, "/tmp/bench-rpc", true, &err);
  sbx_free(chunk);
}

/* --stat-only: n kept fs_stat round trips and nothing else, with the CPU
 * time and the sleeps (voluntary context switches) of each process per
 * RPC. The pids go to stderr first, for a `perf stat -p` or `strace -c -p`
 * attached while it runs. */
static void stat_only_run(sbx_sandbox *s, double *us, size_t n) {
  sbx_wire_file_info fi;
  sbx_error err;
  silkd_scan scan;
  silkd_list(&scan);
  for (int i = 0; i < 200; i++)
    if (sbx_sandbox_stat(s, "/", &fi, &err) < 0) die("fs_stat", &err);
  pid_t silkd = sbxd.pid > 0 ? busiest_silkd(&scan) : -1;
  fprintf(stderr, "bench-rpc: pids client %d sandboxd %d silkd %d\n", (int)getpid(), (int)sbxd.pid, (int)silkd);
  pid_t pids[3] = {getpid(), sbxd.pid, silkd};
  uint64_t cpu0[3], sw0[3];
  for (int k = 0; k < 3; k++) cpu0[k] = proc_cpu_ns(pids[k]), sw0[k] = proc_ctxsw(pids[k]);
  for (size_t i = 0; i < n; i++) {
    uint64_t t0 = sbx_now_ns();
    if (sbx_sandbox_stat(s, "/", &fi, &err) < 0) die("fs_stat", &err);
    us[i] = (double)(sbx_now_ns() - t0) / 1e3;
  }
  printf("bench-rpc: sandbox %s\n", sbx_sandbox_id(s));
  report("fs_stat kept", us, n);
  const char *names[3] = {"client", "sandboxd", "silkd"};
  printf("per RPC:");
  for (int k = 0; k < 3; k++) {
    if (pids[k] <= 0) continue;
    printf("  %s %.1f µs CPU, %.2f sleeps", names[k], (double)(proc_cpu_ns(pids[k]) - cpu0[k]) / 1e3 / (double)n,
           (double)(proc_ctxsw(pids[k]) - sw0[k]) / (double)n);
  }
  printf("\n");
}

int main(int argc, char **argv) {
  int n = 1000, mib = 128, rounds = 3;
  bool stat_only = false;
  const char *addr_arg = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      n = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc) {
      mib = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--addr") == 0 && i + 1 < argc) {
      addr_arg = argv[++i];
    } else if (strcmp(argv[i], "--stat-only") == 0) {
      stat_only = true;
    } else if (strcmp(argv[i], "--no-handoff") == 0) {
      no_handoff = true;
    } else {
      fprintf(stderr, "usage: bench-rpc [-n SAMPLES] [--mib N] [--rounds R] [--addr ADDR] [--stat-only] [--no-handoff]\n");
      return 2;
    }
  }
  if (n < 0 || (stat_only && n == 0) || mib < 1 || rounds < 1 || rounds > BENCH_MAX_RUNS) return 2;
  signal(SIGPIPE, SIG_IGN);
  char addr[128];
  if (addr_arg) {
    snprintf(addr, sizeof addr, "%s", addr_arg);
  } else if (start_daemon(addr, sizeof addr) < 0) {
    return 1;
  }
  sbx_client_opts o = SBX_CLIENT_OPTS_INIT(.addr = addr, .token = getenv("SANDBOXD_TOKEN"));
  sbx_client *c;
  sbx_sandbox *s;
  sbx_error err;
  if (sbx_client_new(&o, &c, &err) < 0) die("client", &err);
  sbx_claim_opts co = SBX_CLAIM_OPTS_INIT(.template_ = "host", .ttl_seconds = 900);
  bool direct = strncmp(addr, "unix:", 5) == 0;
  if (direct ? sbx_client_attach(c, "sb_bench", "bench", NULL, &s, &err) < 0
             : sbx_client_claim(c, &co, &s, &err) < 0)
    die("claim", &err);

  /* warm up: the first dial learns the protocol version */
  const char *argv_true[] = {"true", NULL};
  sbx_exec_opts eo = SBX_EXEC_OPTS_INIT(.argv = argv_true);
  sbx_wire_file_info fi;
  int code;
  for (int i = 0; i < 20; i++)
    if (sbx_sandbox_stat(s, "/", &fi, &err) < 0 || sbx_sandbox_run(s, &eo, NULL, NULL, &code, &err) < 0)
      die("warm-up", &err);
  if (stat_only) {
    double *us = sbx_calloc((size_t)n, sizeof(double));
    stat_only_run(s, us, (size_t)n);
    sbx_free(us);
  } else {
    round_trips(s, addr, n);
    transfers(s, mib, rounds);
  }

  if (!direct) sbx_sandbox_release(s, &err);
  sbx_sandbox_free(s);
  sbx_client_free(c);
  stop_daemon();
  return 0;
}
