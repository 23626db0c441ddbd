/* bench-silkd: silkd over a Unix socket (issue 3).
 *
 *   fs_stat RTT on a kept connection and with a new connection per RPC,
 *   exec `true` RTT (medians, p90, p99 of N samples), and fs_read, fs_write,
 *   fs_push, fs_pull throughput of a 128 MiB file into the temp dir (on /tmp).
 *
 * usage: bench-silkd [samples (default 2000)] [MiB (default 128)]
 *                    [runs (default 5)] [sections (default all)]
 *   sections: a comma list of stat, exec, write, read, push, pull.
 * It starts bin/silkd from its own directory in a temp dir.
 *
 * The client is what a careful real client does, and no more: uploads go in
 * the 256 KiB chunks the spec recommends, each frame encoded into one reused
 * buffer; replies are read straight into a frame reader (fill mode) and
 * every bulk payload is decoded, as a client that wants the bytes must.
 * Each throughput line also gives the CPU time silkd and the client used in
 * the median run (silkd's in 10 ms ticks): on a loaded machine it says more
 * about the code than the wall time does, and it shows which side limits.
 */
#include <sys/resource.h>
#include <time.h>

#include "silkd_client.h"

/* silkd next to this binary (build/bin), found at start. */
static char bench_bin_dir[4096];
#include "driver/driver_internal.h"

#define CHUNK (256 * 1024)

static double now_s(void) { return (double)sbx_now_ns() / 1e9; }

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void report(const char *name, double *s, int n) {
  qsort(s, (size_t)n, sizeof *s, cmp_d);
  printf("%-28s n=%d  p50 %8.1f us  p90 %8.1f us  p99 %8.1f us\n", name, n, s[n / 2] * 1e6, s[n * 9 / 10] * 1e6,
         s[n * 99 / 100] * 1e6);
}

static silkd_srv *the_srv; /* stopped on the way out, so no daemon outlives a failure */

static void die(const char *what) {
  fprintf(stderr, "bench-silkd: %s failed (%s)\n", what, strerror(errno));
  if (the_srv) silkd_stop(the_srv);
  exit(1);
}

/* ---- the client ---- */

typedef struct {
  int fd;
  sbx_frame_reader *fr;
  uint8_t *scratch; /* decoded payloads */
  char *frame;      /* one encoded upload frame */
} bconn;

static bconn *bc_open(const silkd_srv *srv) {
  int fd = sc_try_connect(srv->sock);
  if (fd < 0) die("connect");
  /* As sandboxd's relay does on its socket to silkd: a stream of 350 KB
   * frames through the default 208 KiB buffer is a ping-pong of wakeups. */
  int sb = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
  bconn *c = sbx_calloc(1, sizeof *c);
  c->fd = fd;
  c->fr = sbx_frame_reader_new(0);
  return c;
}

static void bc_close(bconn *c) {
  close(c->fd);
  sbx_frame_reader_free(c->fr);
  sbx_free(c->scratch);
  sbx_free(c->frame);
  sbx_free(c);
}

static void bc_send(bconn *c, const char *p, size_t n) {
  while (n > 0) {
    ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) die("send");
    p += k;
    n -= (size_t)k;
  }
}

__attribute__((format(printf, 2, 3))) static void bc_sendf(bconn *c, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0 || n >= (int)sizeof line - 1) die("format");
  line[n++] = '\n';
  bc_send(c, line, (size_t)n);
}

static void bc_upload(bconn *c, const uint8_t *p, size_t n) {
  if (!c->frame) c->frame = sbx_malloc(sbx_wire_bulk_frame_len(SBX_BULK_REQ_DATA, CHUNK));
  for (size_t off = 0; off < n; off += CHUNK) {
    size_t k = n - off < CHUNK ? n - off : CHUNK;
    bc_send(c, c->frame, sbx_wire_bulk_encode_into(c->frame, SBX_BULK_REQ_DATA, p + off, k));
  }
  bc_sendf(c, "{\"v\":1,\"op\":\"data_end\"}");
}

/* Next frame, in place. */
static void bc_line(bconn *c, const char **line, size_t *len) {
  for (;;) {
    int r = sbx_frame_reader_next(c->fr, line, len, NULL);
    if (r < 0) die("frame");
    if (r == 1) return;
    char *where;
    size_t room;
    if (sbx_frame_reader_space(c->fr, 64 * 1024, &where, &room, NULL) < 0) die("frame");
    ssize_t k = read(c->fd, where, room);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die("recv");
    sbx_frame_reader_commit(c->fr, (size_t)k);
  }
}

/* Read frames to the final one; returns the bulk payload bytes. */
static size_t drain(bconn *c, sbx_wire_type final) {
  size_t total = 0;
  for (;;) {
    const char *line;
    size_t len;
    bc_line(c, &line, &len);
    if (!c->scratch) c->scratch = sbx_malloc(SBX_WIRE_FRAME_CAP / 4 * 3 + 4);
    sbx_wire_bulk kind;
    size_t n;
    int r = sbx_wire_bulk_decode(line, len, &kind, c->scratch, SBX_WIRE_FRAME_CAP / 4 * 3 + 4, &n, NULL);
    if (r < 0) die("bulk decode");
    if (r == 1) {
      total += n;
      continue;
    }
    sbx_wire_resp resp;
    if (sbx_wire_decode_resp(line, len, &resp, NULL) < 0) die("decode");
    sbx_wire_type t = resp.type;
    if (t == SBX_RESP_ERROR) {
      fprintf(stderr, "error: %s\n", resp.u.error.message);
      die("rpc");
    }
    sbx_wire_resp_free(&resp);
    if (t == final) return total;
  }
}

/* ---- CPU shares ---- */

static double server_cpu_s(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  const char *p = sbxi_proc_stat_fields(path, buf, sizeof buf);
  unsigned long ut = 0, st = 0;
  /* from the state on: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
  if (!p || sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return 0;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double client_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

typedef struct {
  double wall, server, client;
} run_t;

typedef struct {
  pid_t pid;
  double t0, s0, c0;
} clock_t3;

static clock_t3 start3(pid_t pid) { return (clock_t3){pid, now_s(), server_cpu_s(pid), client_cpu_s()}; }

static run_t stop3(clock_t3 k) {
  return (run_t){now_s() - k.t0, server_cpu_s(k.pid) - k.s0, client_cpu_s() - k.c0};
}

static int cmp_run(const void *a, const void *b) {
  return cmp_d(&((const run_t *)a)->wall, &((const run_t *)b)->wall);
}

/* ---- the bench ---- */

static void tar_header(uint8_t *h, const char *name, size_t size) {
  memset(h, 0, 512);
  snprintf((char *)h, 100, "%s", name);
  snprintf((char *)h + 100, 8, "%07o", 0644);
  snprintf((char *)h + 108, 8, "%07o", 0);
  snprintf((char *)h + 116, 8, "%07o", 0);
  snprintf((char *)h + 124, 12, "%011zo", size & 077777777777u); /* ustar: 11 octal digits */
  snprintf((char *)h + 136, 12, "%011o", 1700000000);
  memset(h + 148, ' ', 8);
  h[156] = '0';
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);
  h[155] = ' ';
}

static bool want(const char *sections, const char *name) {
  if (!sections) return true;
  size_t n = strlen(name);
  for (const char *p = sections; (p = strstr(p, name)); p += n)
    if ((p == sections || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return true;
  return false;
}

int main(int argc, char **argv) {
  int samples = argc > 1 ? atoi(argv[1]) : 2000;
  size_t mib = argc > 2 ? (size_t)atoi(argv[2]) : 128;
  int runs = argc > 3 ? atoi(argv[3]) : 5;
  const char *sections = argc > 4 ? argv[4] : NULL;
  if (samples < 10) samples = 10;
  if (runs < 1) runs = 1;
  ssize_t k = readlink("/proc/self/exe", bench_bin_dir, sizeof bench_bin_dir - 1);
  if (k <= 0) die("readlink");
  bench_bin_dir[k] = 0;
  char *slash = strrchr(bench_bin_dir, '/');
  if (slash) *slash = 0;
  sc_bin_dir = bench_bin_dir;
  signal(SIGPIPE, SIG_IGN);
  silkd_srv srv;
  if (silkd_start(&srv) < 0) die("starting silkd");
  the_srv = &srv;
  double *s = sbx_calloc((size_t)samples, sizeof *s);

  bconn *c = bc_open(&srv);
  if (want(sections, "stat")) {
    for (int i = 0; i < samples + 100; i++) {
      double t0 = now_s();
      bc_sendf(c, "{\"v\":1,\"op\":\"fs_stat\",\"path\":\"/\"}");
      drain(c, SBX_RESP_STAT);
      if (i >= 100) s[i - 100] = now_s() - t0;
    }
    report("fs_stat, kept connection", s, samples);

    for (int i = 0; i < samples; i++) {
      double t0 = now_s();
      bconn *n = bc_open(&srv);
      bc_sendf(n, "{\"v\":1,\"op\":\"fs_stat\",\"path\":\"/\"}");
      drain(n, SBX_RESP_STAT);
      bc_close(n);
      s[i] = now_s() - t0;
    }
    report("fs_stat, connection per RPC", s, samples);
  }

  if (want(sections, "exec")) {
    for (int i = 0; i < samples; i++) {
      double t0 = now_s();
      bc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"true\"]}");
      drain(c, SBX_RESP_EXIT);
      s[i] = now_s() - t0;
    }
    report("exec true", s, samples);
  }

  bool w = want(sections, "write"), r = want(sections, "read"), pu = want(sections, "push"),
       pl = want(sections, "pull");
  size_t size = mib << 20;
  uint8_t *data = NULL;
  if (w || r || pu || pl) {
    data = sbx_malloc(size + 1536);
    tar_header(data, "big.bin", size);
    for (size_t i = 0; i < size; i++) data[512 + i] = (uint8_t)(i * 2654435761u >> 11);
    memset(data + 512 + size, 0, 1024);
  }
  uint8_t *payload = data ? data + 512 : NULL;
  char path[512], dest[512];
  snprintf(path, sizeof path, "%s/big.bin", srv.dir);
  snprintf(dest, sizeof dest, "%s/pushed", srv.dir);

  /* Each throughput figure is the median of `runs` runs; a section that
   * another needs (write before read, push before pull) runs untimed. */
  run_t *tw = sbx_calloc((size_t)runs, sizeof *tw), *tr = sbx_calloc((size_t)runs, sizeof *tr);
  run_t *tpu = sbx_calloc((size_t)runs, sizeof *tpu), *tpl = sbx_calloc((size_t)runs, sizeof *tpl);
  for (int i = 0; i < runs && data; i++) {
    if (w || r) {
      clock_t3 k3 = start3(srv.pid);
      bc_sendf(c, "{\"v\":1,\"op\":\"fs_write\",\"path\":\"%s\"}", path);
      bc_upload(c, payload, size);
      drain(c, SBX_RESP_DONE);
      tw[i] = stop3(k3);
    }
    if (r) {
      clock_t3 k3 = start3(srv.pid);
      bc_sendf(c, "{\"v\":1,\"op\":\"fs_read\",\"path\":\"%s\"}", path);
      size_t got = drain(c, SBX_RESP_DONE);
      tr[i] = stop3(k3);
      if (got != size) die("fs_read size");
    }
    if (pu || pl) {
      clock_t3 k3 = start3(srv.pid);
      bc_sendf(c, "{\"v\":1,\"op\":\"fs_push\",\"dest\":\"%s\"}", dest);
      bc_upload(c, data, size + 1536);
      drain(c, SBX_RESP_DONE);
      tpu[i] = stop3(k3);
    }
    if (pl) {
      clock_t3 k3 = start3(srv.pid);
      bc_sendf(c, "{\"v\":1,\"op\":\"fs_pull\",\"path\":\"%s/big.bin\"}", dest);
      size_t got = drain(c, SBX_RESP_DONE);
      tpl[i] = stop3(k3);
      if (got < size) die("fs_pull size");
    }
  }
  double m = (double)mib;
  const char *names[4] = {"fs_write", "fs_read", "fs_push", "fs_pull"};
  run_t *ts[4] = {tw, tr, tpu, tpl};
  bool on[4] = {w, r, pu, pl};
  for (int i = 0; i < 4; i++) {
    if (!on[i]) continue;
    qsort(ts[i], (size_t)runs, sizeof(run_t), cmp_run);
    run_t med = ts[i][runs / 2];
    printf("%-28s %d MiB: median %6.0f MiB/s  (min %6.0f, max %6.0f)  cpu ms: silkd %4.0f, client %4.0f\n",
           names[i], (int)mib, m / med.wall, m / ts[i][runs - 1].wall, m / ts[i][0].wall, 1e3 * med.server,
           1e3 * med.client);
  }
  bc_close(c);
  sbx_free(tw);
  sbx_free(tr);
  sbx_free(tpu);
  sbx_free(tpl);
  sbx_free(data);
  sbx_free(s);
  silkd_stop(&srv);
  return 0;
}
