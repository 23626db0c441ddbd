/* bench/find.c - fs_find, fs_replace and fs_watch of silkd, side by side
 * with the command-line tools on the same files, in one run.
 *
 *   find:    a literal and a regex (and the literal again through the
 *            line-by-line path) over a generated tree of 20,000 files /
 *            200 MiB (200 directories of 100 files of source-like text),
 *            fs_find through the client beside `grep -rn` and `rg -n -uu`
 *            (all output read through a pipe: GNU grep stops at the first
 *            match when its output is /dev/null);
 *   replace: 1,000 matches across 500 files, fs_replace beside `sed -i`
 *            over the same files (restored before every run);
 *   watch:   the time from a write(2) to its `event` frame at the client,
 *            p50 and p99 of the samples.
 *
 * usage: bench-find [runs (default 5)] [watch samples (default 2000)]
 * Each find/replace figure is the median of `runs`, with min and max; the
 * runs of the tools interleave so load hits them alike.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sandbox/agent.h>

#include "bench_util.h"

#define DIRS 200
#define FILES_PER_DIR 100
#define FILE_BYTES (200u * 1024 * 1024 / (DIRS * FILES_PER_DIR))
#define REPL_FILES 500

static char base[256], tree[300], repl[300], sock_path[300];
static pid_t silkd_pid;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static const char *words[] = {"let",    "value",  "count", "return", "if",     "else",   "for",  "while",
                              "struct", "buffer", "index", "result", "config", "handle", "data", "error",
                              "size",   "length", "node",  "parent", "child",  "token",  "item", "state"};

/* Source-like text: indented lines of words, assignments and calls. Every
 * 500th line holds the literal, every 300th a line the regex matches. */
static size_t make_text(char *buf, size_t want, uint64_t *lineno) {
  size_t n = 0;
  while (n + 200 < want) {
    (*lineno)++;
    int indent = (int)(next_rand() % 4) * 2;
    n += (size_t)sprintf(buf + n, "%*s", indent, "");
    if (*lineno % 500 == 0) n += (size_t)sprintf(buf + n, "// ZQXJ_needle marker %llu", (unsigned long long)*lineno);
    else if (*lineno % 300 == 0) n += (size_t)sprintf(buf + n, "count_total = %llu;", (unsigned long long)(next_rand() % 90000 + 1000));
    int k = 3 + (int)(next_rand() % 7);
    for (int i = 0; i < k; i++) {
      const char *w = words[next_rand() % (sizeof words / sizeof *words)];
      n += (size_t)sprintf(buf + n, i ? " %s" : "%s", w);
      if (next_rand() % 5 == 0) n += (size_t)sprintf(buf + n, "_%llu", (unsigned long long)(next_rand() % 100));
    }
    buf[n++] = next_rand() % 3 ? ';' : '{';
    buf[n++] = '\n';
  }
  return n;
}

static int write_file(const char *path, const char *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  ssize_t k = write(fd, p, n);
  close(fd);
  return k == (ssize_t)n ? 0 : -1;
}

static int make_tree(void) {
  char *buf = malloc(FILE_BYTES + 4096), p[600];
  uint64_t lineno = 0;
  if (mkdir(tree, 0755) < 0) return -1;
  for (int d = 0; d < DIRS; d++) {
    snprintf(p, sizeof p, "%s/mod%03d", tree, d);
    if (mkdir(p, 0755) < 0) return -1;
    for (int f = 0; f < FILES_PER_DIR; f++) {
      size_t n = make_text(buf, FILE_BYTES, &lineno);
      snprintf(p, sizeof p, "%s/mod%03d/file%03d.rs", tree, d, f);
      if (write_file(p, buf, n) < 0) return -1;
    }
  }
  free(buf);
  return 0;
}

/* 500 files with exactly 2 occurrences of OLD_NAME each: 1,000 matches. */
static int make_repl(void) {
  char *buf = malloc(FILE_BYTES + 4096), p[600];
  uint64_t lineno = 1; /* keeps the find markers out */
  mkdir(repl, 0755);
  rng = 12345;
  for (int f = 0; f < REPL_FILES; f++) {
    size_t n = make_text(buf, FILE_BYTES / 2, &lineno);
    memcpy(buf + 10, "OLD_NAME", 8);
    memcpy(buf + n / 2, "OLD_NAME", 8);
    snprintf(p, sizeof p, "%s/r%03d.rs", repl, f);
    if (write_file(p, buf, n) < 0) return -1;
  }
  free(buf);
  return 0;
}

static int silkd_up(const char *bin_dir) {
  snprintf(sock_path, sizeof sock_path, "%s/silkd.sock", base);
  char bin[512], listen[400];
  if (snprintf(bin, sizeof bin, "%s/silkd", bin_dir) >= (int)sizeof bin) return -1;
  snprintf(listen, sizeof listen, "unix:%s", sock_path);
  silkd_pid = fork();
  if (silkd_pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execl(bin, "silkd", "--listen", listen, "--log-level", "error", (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 500; i++) {
    if (access(sock_path, F_OK) == 0) return 0;
    usleep(10000);
  }
  return -1;
}

static sbx_agent *dial(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_path) >= (int)sizeof sa.sun_path) {
    close(fd);
    return NULL;
  }
  sbx_agent *a = NULL;
  sbx_error err;
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || sbx_agent_open(fd, &a, &err) < 0) {
    fprintf(stderr, "bench-find: connect silkd failed\n");
    exit(1);
  }
  return a;
}

/* ---- the tools: run argv, read all its output through a pipe ---- */

static double run_tool(const char *const *argv, size_t *out_bytes) {
  int p[2];
  if (pipe(p) < 0) return -1;
  double t0 = now_s();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    int nul = open("/dev/null", O_WRONLY);
    dup2(nul, 2);
    close(p[0]);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(p[1]);
  static char buf[1 << 16];
  size_t total = 0;
  ssize_t k;
  while ((k = read(p[0], buf, sizeof buf)) > 0) total += (size_t)k;
  close(p[0]);
  int st;
  waitpid(pid, &st, 0);
  double t = now_s() - t0;
  if (!WIFEXITED(st) || WEXITSTATUS(st) > 1) return -1;
  *out_bytes = total;
  return t;
}

static int count_match(void *ud, const sbx_resp_match *m) {
  (*(size_t *)ud)++;
  bench_clobber(m->content);
  return 0;
}

static double run_find(const char *pattern, size_t *matches) {
  sbx_agent *a = dial();
  *matches = 0;
  sbx_find_opts o = SBX_FIND_OPTS_INIT(.path = tree, .pattern = pattern, .on_match = count_match, .ud = matches);
  sbx_error err;
  double t0 = now_s();
  int rc = sbx_agent_find(a, &o, &err);
  double t = now_s() - t0;
  sbx_agent_close(a);
  if (rc < 0) {
    fprintf(stderr, "bench-find: fs_find: %s\n", err.msg);
    return -1;
  }
  return t;
}

static void report(const char *name, const double *v, size_t n, const char *extra) {
  bench_stats s = bench_summarize(v, n);
  printf("  %-34s %8.1f ms  (min %.1f, max %.1f)%s\n", name, s.median * 1e3, s.min * 1e3, s.max * 1e3, extra);
}

static double bench_find(const char *label, const char *pattern, size_t runs) {
  double silk[BENCH_MAX_RUNS], grep[BENCH_MAX_RUNS], rg[BENCH_MAX_RUNS];
  size_t m = 0, gb = 0, rb = 0, glines = 0;
  const char *gargv[] = {"grep", "-rn", "-E", pattern, tree, NULL};
  const char *rargv[] = {"rg", "-n", "-uu", "--no-heading", pattern, tree, NULL};
  for (size_t i = 0; i < runs; i++) {
    silk[i] = run_find(pattern, &m);
    grep[i] = run_tool(gargv, &gb);
    rg[i] = run_tool(rargv, &rb);
  }
  FILE *f = NULL;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "grep -rn -E '%s' '%s' | wc -l", pattern, tree);
  if ((f = popen(cmd, "r"))) {
    if (fscanf(f, "%zu", &glines) != 1) glines = 0;
    pclose(f);
  }
  printf("find %s: /%s/ (%zu matches; grep -rn: %zu lines)\n", label, pattern, m, glines);
  report("fs_find (silkd, client)", silk, runs, "");
  report("grep -rn -E", grep, runs, "");
  report("rg -n -uu", rg, runs, "");
  double s = bench_median(silk, runs), g = bench_median(grep, runs), r = bench_median(rg, runs);
  printf("  ratio fs_find/grep %.2f (goal <= 1), fs_find/rg %.2f (goal <= 1.5): %s\n", s / g, s / r,
         s <= g && s <= 1.5 * r ? "met" : "not met");
  return s;
}

/* The same matches through the line-by-line path (look-behind keeps the
 * whole-file search out; grep -E and rg have no look-around). */
static void bench_find_lines(const char *pattern, size_t runs) {
  double silk[BENCH_MAX_RUNS];
  size_t m = 0;
  for (size_t i = 0; i < runs; i++) silk[i] = run_find(pattern, &m);
  printf("find, line by line: /%s/ (%zu matches)\n", pattern, m);
  report("fs_find (silkd, client)", silk, runs, "");
}

static int count_replaced(void *ud, const sbx_resp_replaced *r) {
  *(uint64_t *)ud += r->replacements;
  return 0;
}

static void bench_replace(size_t runs) {
  double silk[BENCH_MAX_RUNS], sed[BENCH_MAX_RUNS];
  char *files[REPL_FILES];
  for (int i = 0; i < REPL_FILES; i++) {
    files[i] = malloc(600);
    snprintf(files[i], 600, "%s/r%03d.rs", repl, i);
  }
  const char *sargv[REPL_FILES + 4];
  sargv[0] = "sed";
  sargv[1] = "-i";
  sargv[2] = "s/OLD_NAME/NEW_NAME/g";
  for (int i = 0; i < REPL_FILES; i++) sargv[3 + i] = files[i];
  sargv[3 + REPL_FILES] = NULL;
  uint64_t count = 0;
  for (size_t i = 0; i < runs; i++) {
    make_repl();
    sbx_agent *a = dial();
    count = 0;
    sbx_replace_opts o = SBX_REPLACE_OPTS_INIT(.files = (const char *const *)files, .nfiles = REPL_FILES,
                                               .pattern = "OLD_NAME", .replacement = "NEW_NAME",
                                               .on_replaced = count_replaced, .ud = &count);
    sbx_error err;
    double t0 = now_s();
    if (sbx_agent_replace(a, &o, &err) < 0) fprintf(stderr, "bench-find: fs_replace: %s\n", err.msg);
    silk[i] = now_s() - t0;
    sbx_agent_close(a);
    make_repl();
    size_t ob;
    sed[i] = run_tool(sargv, &ob);
  }
  printf("replace: OLD_NAME -> NEW_NAME in %d files (%llu replacements)\n", REPL_FILES, (unsigned long long)count);
  report("fs_replace (silkd, client)", silk, runs, "");
  report("sed -i", sed, runs, "");
  for (int i = 0; i < REPL_FILES; i++) free(files[i]);
}

/* ---- watch latency: write, then time to the event frame ---- */

struct wlat {
  int fd;
  double t0;
  double *v;
  size_t n, want;
};

static void poke(struct wlat *w) {
  w->t0 = now_s();
  if (write(w->fd, "x", 1) != 1) perror("write");
}

static void w_ready(void *ud) { poke(ud); }

static int w_event(void *ud, const sbx_resp_event *ev) {
  struct wlat *w = ud;
  w->v[w->n++] = now_s() - w->t0;
  if (w->n == w->want) return 1;
  poke(w);
  return 0;
}

static void bench_watch(size_t samples) {
  char dir[400], file[500];
  snprintf(dir, sizeof dir, "%s/watched", base);
  mkdir(dir, 0755);
  snprintf(file, sizeof file, "%s/f", dir);
  struct wlat w = {.fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644), .want = samples};
  w.v = calloc(samples, sizeof *w.v);
  sbx_agent *a = dial();
  sbx_watch_opts o = SBX_WATCH_OPTS_INIT(.path = dir, .on_ready = w_ready, .on_event = w_event, .ud = &w);
  sbx_error err;
  if (sbx_agent_watch(a, &o, &err) < 0) fprintf(stderr, "bench-find: fs_watch: %s\n", err.msg);
  sbx_agent_close(a);
  close(w.fd);
  qsort(w.v, w.n, sizeof *w.v, bench_cmp_double);
  double p50 = bench_percentile(w.v, w.n, 50), p99 = bench_percentile(w.v, w.n, 99);
  printf("watch: write(2) -> event frame at the client, %zu samples\n", w.n);
  printf("  p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us (goal p50 <= 1 ms: %s)\n", p50 * 1e6,
         bench_percentile(w.v, w.n, 90) * 1e6, p99 * 1e6, w.n ? w.v[w.n - 1] * 1e6 : 0, p50 <= 1e-3 ? "met" : "not met");
  free(w.v);
}

int main(int argc, char **argv) {
  size_t runs = argc > 1 ? strtoul(argv[1], NULL, 10) : 5;
  size_t samples = argc > 2 ? strtoul(argv[2], NULL, 10) : 2000;
  if (runs < 1 || runs > BENCH_MAX_RUNS || samples < 1) {
    fprintf(stderr, "usage: bench-find [runs 1..%d] [watch samples]\n", BENCH_MAX_RUNS);
    return 2;
  }
  snprintf(base, sizeof base, "/tmp/sbx-bench-find-XXXXXX");
  if (!mkdtemp(base)) return 1;
  snprintf(tree, sizeof tree, "%s/tree", base);
  snprintf(repl, sizeof repl, "%s/repl", base);
  char self[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k <= 0) return 1;
  self[k] = '\0';
  *strrchr(self, '/') = '\0';
  printf("generating %d files / %u MiB under %s ...\n", DIRS * FILES_PER_DIR,
         (unsigned)((size_t)FILE_BYTES * DIRS * FILES_PER_DIR >> 20), tree);
  if (make_tree() < 0 || make_repl() < 0 || silkd_up(self) < 0) {
    fprintf(stderr, "bench-find: setup failed\n");
    return 1;
  }
  size_t ob;
  const char *warm[] = {"grep", "-rn", "warm-the-page-cache", tree, NULL};
  run_tool(warm, &ob); /* every tool then reads from the page cache */
  bench_find("literal", "ZQXJ_needle", runs);
  bench_find("regex", "count_[a-z]+ = [0-9]{3,}", runs);
  bench_find_lines("(?<=// )ZQXJ_needle", runs);
  bench_replace(runs);
  bench_watch(samples);
  kill(silkd_pid, SIGTERM);
  waitpid(silkd_pid, NULL, 0);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  if (system(cmd) != 0) fprintf(stderr, "bench-find: could not remove %s\n", base);
  return 0;
}
