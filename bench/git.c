/* bench-git: silkd's git_status verb beside `git status` run by exec, on a
 * generated repository of 20,000 files (100 modified, 100 untracked), in
 * the same silkd over a Unix socket. Each figure is the wall time of one
 * RPC from request to final frame; median of the runs, with min and max.
 *
 * usage: bench-git [files (default 20000)] [runs (default 11)]
 * It starts bin/silkd from its own directory, in a temp dir.
 */
#include <stdio.h>
#include <stdlib.h>

static char bench_bin_dir[4096];

#include "bench_util.h"
#include "silkd_client.h"

static silkd_srv srv;

static void die(const char *what) {
  fprintf(stderr, "bench-git: %s failed\n", what);
  silkd_stop(&srv);
  exit(1);
}

static double now_s(void) { return (double)sbx_now_ns() / 1e9; }

/* One RPC, timed to its final frame (finals as for sc_collect). */
static double timed(sc *c, const char *req, const sbx_wire_type *finals, sbx_wire_type want, size_t *files) {
  double t0 = now_s();
  if (sc_sendf(c, "%s", req) < 0) die("send");
  sc_result res;
  if (sc_collect(c, &res, finals) != 1 || res.final != want) {
    fprintf(stderr, "bench-git: %s: %s\n", req, res.msg);
    die("rpc");
  }
  double dt = now_s() - t0;
  if (files) *files = res.out.len; /* exec: bytes of output */
  sc_result_free(&res);
  return dt;
}

static void print(const char *name, double *v, size_t n) {
  bench_stats s = bench_summarize(v, n);
  printf("%-44s median %7.1f ms  (min %7.1f, max %7.1f)\n", name, s.median * 1e3, s.min * 1e3, s.max * 1e3);
}

int main(int argc, char **argv) {
  int nfiles = argc > 1 ? atoi(argv[1]) : 20000;
  int runs = argc > 2 ? atoi(argv[2]) : 11;
  if (nfiles < 200 || runs < 1 || runs > BENCH_MAX_RUNS) {
    fprintf(stderr, "usage: bench-git [files >= 200] [runs 1..%d]\n", BENCH_MAX_RUNS);
    return 2;
  }
  ssize_t k = readlink("/proc/self/exe", bench_bin_dir, sizeof bench_bin_dir - 1);
  if (k <= 0) die("readlink");
  bench_bin_dir[k] = 0;
  *strrchr(bench_bin_dir, '/') = 0;
  sc_bin_dir = bench_bin_dir;
  if (silkd_start(&srv) < 0) die("starting silkd");
  char repo[400], cmd[2048];
  snprintf(repo, sizeof repo, "%s/repo", srv.dir);
  /* 20,000 files in 200 directories, committed; then 100 modified and 100
   * untracked, so status has something to report */
  snprintf(cmd, sizeof cmd,
           "set -e; git init -q %s; cd %s; for d in $(seq 1 200); do mkdir d$d; done; "
           "seq 1 %d | awk '{ f = \"d\" ($1 %% 200 + 1) \"/f\" $1 \".txt\"; printf \"line %%d\\n\", $1 > f; close(f) }'; "
           "git add -A; git -c user.name=b -c user.email=b@x commit -qm init; "
           "for i in $(seq 1 100); do echo more >> d$((i %% 200 + 1))/f$i.txt; echo new > d1/u$i.txt; done",
           repo, repo, nfiles);
  if (system(cmd) != 0) die("making the repository");
  sc *c = sc_open(&srv);
  if (!c) die("connect");
  char st_req[600], ex_req[700], ex2_req[700];
  snprintf(st_req, sizeof st_req, "{\"v\":1,\"op\":\"git_status\",\"path\":\"%s\"}", repo);
  snprintf(ex_req, sizeof ex_req,
           "{\"v\":1,\"op\":\"exec\",\"argv\":[\"git\",\"-C\",\"%s\",\"status\",\"--porcelain=v2\",\"--branch\"]}",
           repo);
  snprintf(ex2_req, sizeof ex2_req, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"git\",\"-C\",\"%s\",\"status\"]}", repo);
  static const sbx_wire_type fin_status[] = {SBX_RESP_GIT_STATUS_RESULT, SBX_RESP__COUNT};
  static const sbx_wire_type fin_exit[] = {SBX_RESP_EXIT, SBX_RESP__COUNT};
  /* warm the page cache and the index's stat data once */
  timed(c, st_req, fin_status, SBX_RESP_GIT_STATUS_RESULT, NULL);
  timed(c, ex_req, fin_exit, SBX_RESP_EXIT, NULL);
  double a[BENCH_MAX_RUNS], b[BENCH_MAX_RUNS], d[BENCH_MAX_RUNS];
  size_t out = 0;
  for (int i = 0; i < runs; i++) { /* interleaved, so load hits all three alike */
    a[i] = timed(c, st_req, fin_status, SBX_RESP_GIT_STATUS_RESULT, NULL);
    b[i] = timed(c, ex_req, fin_exit, SBX_RESP_EXIT, &out);
    d[i] = timed(c, ex2_req, fin_exit, SBX_RESP_EXIT, NULL);
  }
  printf("repository: %d files, 100 modified, 100 untracked; %d runs\n", nfiles, runs);
  print("git_status verb (parsed, git_status_result)", a, (size_t)runs);
  print("exec git status --porcelain=v2 --branch", b, (size_t)runs);
  print("exec git status", d, (size_t)runs);
  sc_close(c);
  silkd_stop(&srv);
  return 0;
}
