/* bench-silkd: silkd over a Unix socket (issue 3).
 *
 *   fs_stat RTT on a kept connection and with a new connection per RPC,
 *   exec `true` RTT (medians, p90, p99 of N samples), and fs_read, fs_write,
 *   fs_push, fs_pull throughput of a 128 MiB file.
 *
 * usage: bench-silkd [samples (default 2000)] [MiB (default 128)]
 * It starts bin/silkd from its own directory in a temp dir.
 */
#include <time.h>

static char bench_bin_dir[4096];
#define SBX_BUILD_BIN_DIR bench_bin_dir
#include "../tests/unit/silkd/silkd_client.h"

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

static void die(const char *what) {
  fprintf(stderr, "bench-silkd: %s failed\n", what);
  exit(1);
}

/* Read frames to the final one; bulk payloads are only counted. */
static size_t drain(sc *c, sbx_wire_type final, uint8_t *scratch, size_t cap) {
  size_t total = 0;
  for (;;) {
    char *line;
    size_t len;
    if (sc_recv_line(c, &line, &len) != 1) die("recv");
    sbx_wire_bulk kind;
    size_t n;
    int r = sbx_wire_bulk_decode(line, len, &kind, scratch, cap, &n, NULL);
    if (r == 1) {
      total += n;
      sbx_free(line);
      continue;
    }
    sbx_wire_resp resp;
    if (sbx_wire_decode_resp(line, len, &resp, NULL) < 0) die("decode");
    sbx_free(line);
    sbx_wire_type t = resp.type;
    if (t == SBX_RESP_ERROR) {
      fprintf(stderr, "error: %s\n", resp.u.error.message);
      die("rpc");
    }
    sbx_wire_resp_free(&resp);
    if (t == final) return total;
  }
}

static void tar_header(uint8_t *h, const char *name, size_t size) {
  memset(h, 0, 512);
  snprintf((char *)h, 100, "%s", name);
  snprintf((char *)h + 100, 8, "%07o", 0644);
  snprintf((char *)h + 108, 8, "%07o", 0);
  snprintf((char *)h + 116, 8, "%07o", 0);
  snprintf((char *)h + 124, 12, "%011zo", size);
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

static void upload(sc *c, const uint8_t *p, size_t n) {
  for (size_t off = 0; off < n; off += 262144)
    if (sc_send_bulk(c, SBX_BULK_REQ_DATA, p + off, n - off < 262144 ? n - off : 262144) < 0) die("send");
  sc_sendf(c, "{\"v\":1,\"op\":\"data_end\"}");
}

int main(int argc, char **argv) {
  int samples = argc > 1 ? atoi(argv[1]) : 2000;
  size_t mib = argc > 2 ? (size_t)atoi(argv[2]) : 128;
  if (samples < 10) samples = 10;
  ssize_t k = readlink("/proc/self/exe", bench_bin_dir, sizeof bench_bin_dir - 1);
  if (k <= 0) die("readlink");
  bench_bin_dir[k] = 0;
  char *slash = strrchr(bench_bin_dir, '/');
  if (slash) *slash = 0;
  signal(SIGPIPE, SIG_IGN);
  silkd_srv srv;
  if (silkd_start(&srv) < 0) die("starting silkd");
  double *s = sbx_calloc((size_t)samples, sizeof *s);
  size_t cap = SBX_WIRE_FRAME_CAP;
  uint8_t *scratch = sbx_malloc(cap);

  sc *c = sc_open(&srv);
  for (int i = 0; i < samples + 100; i++) {
    double t0 = now_s();
    sc_sendf(c, "{\"v\":1,\"op\":\"fs_stat\",\"path\":\"/\"}");
    drain(c, SBX_RESP_STAT, scratch, cap);
    if (i >= 100) s[i - 100] = now_s() - t0;
  }
  report("fs_stat, kept connection", s, samples);

  for (int i = 0; i < samples; i++) {
    double t0 = now_s();
    sc *n = sc_open(&srv);
    sc_sendf(n, "{\"v\":1,\"op\":\"fs_stat\",\"path\":\"/\"}");
    drain(n, SBX_RESP_STAT, scratch, cap);
    sc_close(n);
    s[i] = now_s() - t0;
  }
  report("fs_stat, connection per RPC", s, samples);

  for (int i = 0; i < samples; i++) {
    double t0 = now_s();
    sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"true\"]}");
    drain(c, SBX_RESP_EXIT, scratch, cap);
    s[i] = now_s() - t0;
  }
  report("exec true", s, samples);

  size_t size = mib << 20;
  uint8_t *data = sbx_malloc(size + 1536);
  tar_header(data, "big.bin", size);
  uint8_t *payload = data + 512;
  for (size_t i = 0; i < size; i++) payload[i] = (uint8_t)(i * 2654435761u >> 11);
  memset(payload + size, 0, 1024);
  char path[512], dest[512];
  snprintf(path, sizeof path, "%s/big.bin", srv.dir);
  snprintf(dest, sizeof dest, "%s/pushed", srv.dir);

  /* Each throughput figure is the median of 3 runs. */
  enum { RUNS = 3 };
  double tw[RUNS], tr[RUNS], tpu[RUNS], tpl[RUNS];
  for (int r = 0; r < RUNS; r++) {
    double t0 = now_s();
    sc_sendf(c, "{\"v\":1,\"op\":\"fs_write\",\"path\":\"%s\"}", path);
    upload(c, payload, size);
    drain(c, SBX_RESP_DONE, scratch, cap);
    tw[r] = now_s() - t0;

    t0 = now_s();
    sc_sendf(c, "{\"v\":1,\"op\":\"fs_read\",\"path\":\"%s\"}", path);
    size_t got = drain(c, SBX_RESP_DONE, scratch, cap);
    tr[r] = now_s() - t0;
    if (got != size) die("fs_read size");

    t0 = now_s();
    sc_sendf(c, "{\"v\":1,\"op\":\"fs_push\",\"dest\":\"%s\"}", dest);
    upload(c, data, size + 1536);
    drain(c, SBX_RESP_DONE, scratch, cap);
    tpu[r] = now_s() - t0;

    t0 = now_s();
    sc_sendf(c, "{\"v\":1,\"op\":\"fs_pull\",\"path\":\"%s/big.bin\"}", dest);
    got = drain(c, SBX_RESP_DONE, scratch, cap);
    tpl[r] = now_s() - t0;
    if (got < size) die("fs_pull size");
  }
  double m = (double)mib;
  const char *names[4] = {"fs_write", "fs_read", "fs_push", "fs_pull"};
  double *ts[4] = {tw, tr, tpu, tpl};
  for (int i = 0; i < 4; i++) {
    qsort(ts[i], RUNS, sizeof(double), cmp_d);
    printf("%-28s %d MiB: median %6.0f MiB/s  (min %6.0f, max %6.0f)\n", names[i], (int)mib, m / ts[i][RUNS / 2],
           m / ts[i][RUNS - 1], m / ts[i][0]);
  }
  sc_close(c);
  sbx_free(data);
  sbx_free(scratch);
  sbx_free(s);
  silkd_stop(&srv);
  return 0;
}
