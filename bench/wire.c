/* bench-wire: throughput of the bytes that dominate silkd traffic.
 *
 *   (a) base64 encode/decode of 256 KiB payloads, scalar and AVX2 paths and
 *       the runtime-dispatched public entry points;
 *   (b) bulk frames: sbx_wire_bulk_encode_into, sbx_wire_bulk_decode, and
 *       the full receive path (sbx_frame_reader fed 64 KiB chunks, then
 *       sbx_wire_bulk_decode of every line);
 *   (c) small frames: sbx_wire_decode_req / _resp + free, in frames/s.
 *
 * Every figure is the median of --runs runs (default 7) with min and max,
 * set against its target. --check makes a missed target the exit status.
 * SBX_B64_SCALAR=1 in the environment sends (b) through the scalar base64.
 * Usage: bench-wire [--runs N] [--ms MILLISECONDS_PER_RUN] [--check] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sandbox/core.h>
#include <sandbox/wire.h>

#include "bench_util.h"
#include "core/base64_impl.h"
#include "core/env.h"

#define PAYLOAD (256u << 10)
#define CHUNK (64u << 10)
#define STREAM_FRAMES 8
#define MIB (1024.0 * 1024.0)

#define TARGET_BULK_MIBS 2048.0 /* 2 GiB/s of payload */
#define TARGET_SMALL_MFPS 1.0   /* 1 M frames/s */

typedef size_t (*encode_fn)(char *, const void *, size_t);
typedef int (*decode_fn)(void *, const char *, size_t, size_t *, sbx_error *);

typedef struct {
  uint8_t *payload;
  char *b64;
  size_t b64_len;
  uint8_t *out;
  size_t out_cap;
  encode_fn enc;
  decode_fn dec;
  char *frame; /* one bulk frame with its LF */
  size_t frame_len;
  char *stream; /* STREAM_FRAMES frames back to back */
  size_t stream_len;
  sbx_frame_reader *reader;
  const char *line; /* small frame */
  size_t line_len;
} bench_ctx;

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench-wire: %s: %s\n", what, msg);
  exit(2);
}

/* ---- (a) base64 ---- */
static void body_b64_encode(void *p, size_t iters) {
  bench_ctx *c = p;
  for (size_t i = 0; i < iters; i++) {
    c->enc(c->b64, c->payload, PAYLOAD);
    bench_clobber(c->b64);
  }
}

static void body_b64_decode(void *p, size_t iters) {
  bench_ctx *c = p;
  size_t n;
  for (size_t i = 0; i < iters; i++) {
    if (c->dec(c->out, c->b64, c->b64_len, &n, NULL) != 0) die("base64 decode", "failed");
    bench_clobber(c->out);
  }
}

/* ---- (b) bulk frames ---- */
static void body_bulk_encode(void *p, size_t iters) {
  bench_ctx *c = p;
  for (size_t i = 0; i < iters; i++) {
    sbx_wire_bulk_encode_into(c->frame, SBX_BULK_STDOUT, c->payload, PAYLOAD);
    bench_clobber(c->frame);
  }
}

static void bulk_decode_line(bench_ctx *c, const char *line, size_t len) {
  sbx_wire_bulk kind;
  size_t n;
  sbx_error err;
  int rc = sbx_wire_bulk_decode(line, len, &kind, c->out, c->out_cap, &n, &err);
  if (rc != 1 || n != PAYLOAD) die("bulk decode", rc < 0 ? err.msg : "not a bulk frame");
  bench_clobber(c->out);
}

static void body_bulk_decode(void *p, size_t iters) {
  bench_ctx *c = p;
  for (size_t i = 0; i < iters; i++) bulk_decode_line(c, c->frame, c->frame_len - 1);
}

/* What a connection does: chunks off the socket, lines out of the reader. */
static void body_reader_decode(void *p, size_t iters) {
  bench_ctx *c = p;
  for (size_t i = 0; i < iters; i++) {
    size_t frames = 0;
    for (size_t off = 0; off < c->stream_len; off += CHUNK) {
      size_t n = c->stream_len - off < CHUNK ? c->stream_len - off : CHUNK;
      sbx_frame_reader_feed(c->reader, c->stream + off, n);
      const char *line;
      size_t len;
      sbx_error err;
      int rc;
      while ((rc = sbx_frame_reader_next(c->reader, &line, &len, &err)) == 1) {
        bulk_decode_line(c, line, len);
        frames++;
      }
      if (rc < 0) die("frame reader", err.msg);
    }
    if (frames != STREAM_FRAMES) die("frame reader", "wrong frame count");
  }
}

/* ---- (c) small frames ---- */
static void body_decode_req(void *p, size_t iters) {
  bench_ctx *c = p;
  for (size_t i = 0; i < iters; i++) {
    sbx_wire_req req;
    sbx_error err;
    if (sbx_wire_decode_req(c->line, c->line_len, &req, &err) != 0) die("decode_req", err.msg);
    bench_clobber(&req);
    sbx_wire_req_free(&req);
  }
}

static void body_decode_resp(void *p, size_t iters) {
  bench_ctx *c = p;
  for (size_t i = 0; i < iters; i++) {
    sbx_wire_resp resp;
    sbx_error err;
    if (sbx_wire_decode_resp(c->line, c->line_len, &resp, &err) != 0) die("decode_resp", err.msg);
    bench_clobber(&resp);
    sbx_wire_resp_free(&resp);
  }
}

/* ---- setup and checks: a fast wrong answer is no answer ---- */
static void setup(bench_ctx *c) {
  c->payload = sbx_malloc(PAYLOAD);
  uint64_t x = 0x243f6a8885a308d3u;
  for (size_t i = 0; i < PAYLOAD; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c->payload[i] = (uint8_t)x;
  }
  c->b64_len = sbx_b64_encoded_len(PAYLOAD);
  c->b64 = sbx_malloc(c->b64_len);
  c->out_cap = sbx_b64_decoded_max(c->b64_len) + 64;
  c->out = sbx_malloc(c->out_cap);
  c->frame_len = sbx_wire_bulk_frame_len(SBX_BULK_STDOUT, PAYLOAD);
  c->frame = sbx_malloc(c->frame_len);
  if (sbx_wire_bulk_encode_into(c->frame, SBX_BULK_STDOUT, c->payload, PAYLOAD) != c->frame_len)
    die("bulk encode", "length differs from sbx_wire_bulk_frame_len");
  if (c->frame[c->frame_len - 1] != '\n') die("bulk encode", "frame does not end in LF");
  c->stream_len = c->frame_len * STREAM_FRAMES;
  c->stream = sbx_malloc(c->stream_len);
  for (size_t i = 0; i < STREAM_FRAMES; i++) memcpy(c->stream + i * c->frame_len, c->frame, c->frame_len);
  c->reader = sbx_frame_reader_new(0);

  sbx_wire_bulk kind;
  size_t n;
  sbx_error err;
  memset(c->out, 0, c->out_cap);
  if (sbx_wire_bulk_decode(c->frame, c->frame_len - 1, &kind, c->out, c->out_cap, &n, &err) != 1)
    die("bulk decode", "canonical frame not taken by the fast path");
  if (kind != SBX_BULK_STDOUT || n != PAYLOAD || memcmp(c->out, c->payload, PAYLOAD) != 0)
    die("bulk decode", "round trip differs");
}

static const char REQ_STAT[] = "{\"v\":1,\"op\":\"fs_stat\",\"path\":\"/tmp/x.txt\"}";
static const char REQ_INFO[] = "{\"v\":1,\"op\":\"info\"}";
static const char RESP_INFO[] =
    "{\"type\":\"info\",\"version\":\"0.1.0\",\"proto\":2,\"uptime_secs\":12,\"procs\":1,\"sessions\":0}";

static void check_small_frames(void) {
  sbx_wire_req req;
  sbx_wire_resp resp;
  sbx_error err;
  if (sbx_wire_decode_req(REQ_STAT, sizeof REQ_STAT - 1, &req, &err) != 0) die("fs_stat", err.msg);
  if (req.op != SBX_OP_FS_STAT || strcmp(req.u.fs_stat.path, "/tmp/x.txt") != 0) die("fs_stat", "wrong decode");
  sbx_wire_req_free(&req);
  if (sbx_wire_decode_req(REQ_INFO, sizeof REQ_INFO - 1, &req, &err) != 0) die("info", err.msg);
  if (req.op != SBX_OP_INFO) die("info", "wrong decode");
  sbx_wire_req_free(&req);
  if (sbx_wire_decode_resp(RESP_INFO, sizeof RESP_INFO - 1, &resp, &err) != 0) die("info response", err.msg);
  if (resp.type != SBX_RESP_INFO || resp.u.info.proto != 2 || resp.u.info.uptime_secs != 12 ||
      strcmp(resp.u.info.version, "0.1.0") != 0)
    die("info response", "wrong decode");
  sbx_wire_resp_free(&resp);
}

typedef struct {
  size_t runs;
  uint64_t run_ns;
  bool all_ok;
} bench_opts;

static void measure(bench_opts *o, const char *name, bench_body body, bench_ctx *c, double units, const char *unit,
                    double target) {
  double rates[BENCH_MAX_RUNS];
  size_t n = bench_rates(body, c, units, o->run_ns, o->runs, rates);
  if (!bench_report(name, rates, n, unit, target)) o->all_ok = false;
}

static void usage(void) {
  fprintf(stderr, "usage: bench-wire [--runs N (5..%d)] [--ms MILLISECONDS_PER_RUN] [--check]\n", BENCH_MAX_RUNS);
  exit(2);
}

int main(int argc, char **argv) {
  bench_opts o = {7, 100 * 1000000ull, true};
  bool check = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      long v = strtol(argv[++i], NULL, 10);
      if (v < 5 || v > BENCH_MAX_RUNS) usage();
      o.runs = (size_t)v;
    } else if (strcmp(argv[i], "--ms") == 0 && i + 1 < argc) {
      long v = strtol(argv[++i], NULL, 10);
      if (v < 1 || v > 10000) usage();
      o.run_ns = (uint64_t)v * 1000000ull;
    } else if (strcmp(argv[i], "--check") == 0) {
      check = true;
    } else {
      usage();
    }
  }

  sbxi_env_apply(NULL);
  bench_ctx c = {0};
  setup(&c);
  check_small_frames();
  bool avx2 = sbxi_b64_have_avx2();
  const char *path = sbxi_b64_active();
  bool forced = avx2 && strcmp(path, "scalar") == 0;
  double mib = PAYLOAD / MIB;
  printf("bench-wire: %zu runs of ~%llu ms each; figures are median (min max)\n", o.runs,
         (unsigned long long)(o.run_ns / 1000000));
  printf("CPU AVX2: %s; dispatched base64 path: %s%s\n", avx2 ? "yes" : "no", path,
         forced ? " (SBX_B64_SCALAR set)" : "");

  printf("(a) base64, 256 KiB payload, MiB/s of payload\n");
  c.enc = sbxi_b64_encode_scalar;
  c.dec = sbxi_b64_decode_scalar;
  measure(&o, "encode scalar", body_b64_encode, &c, mib, "MiB/s", 0);
  measure(&o, "decode scalar", body_b64_decode, &c, mib, "MiB/s", 0);
  if (avx2) {
    c.enc = sbxi_b64_encode_avx2;
    c.dec = sbxi_b64_decode_avx2;
    measure(&o, "encode avx2", body_b64_encode, &c, mib, "MiB/s", 0);
    measure(&o, "decode avx2", body_b64_decode, &c, mib, "MiB/s", 0);
  }
  c.enc = sbx_b64_encode;
  c.dec = sbx_b64_decode;
  measure(&o, "encode sbx_b64_encode", body_b64_encode, &c, mib, "MiB/s", TARGET_BULK_MIBS);
  measure(&o, "decode sbx_b64_decode", body_b64_decode, &c, mib, "MiB/s", TARGET_BULK_MIBS);

  printf("(b) bulk stdout frames, 256 KiB payload, MiB/s of payload (base64: %s)\n", path);
  measure(&o, "sbx_wire_bulk_encode_into", body_bulk_encode, &c, mib, "MiB/s", TARGET_BULK_MIBS);
  measure(&o, "sbx_wire_bulk_decode", body_bulk_decode, &c, mib, "MiB/s", TARGET_BULK_MIBS);
  measure(&o, "frame_reader 64 KiB chunks + decode", body_reader_decode, &c, mib * STREAM_FRAMES, "MiB/s",
          TARGET_BULK_MIBS);

  printf("(c) small frames, decode + free, M frames/s\n");
  c.line = REQ_STAT;
  c.line_len = sizeof REQ_STAT - 1;
  measure(&o, "decode_req fs_stat", body_decode_req, &c, 1e-6, "Mframe/s", TARGET_SMALL_MFPS);
  c.line = REQ_INFO;
  c.line_len = sizeof REQ_INFO - 1;
  measure(&o, "decode_req info", body_decode_req, &c, 1e-6, "Mframe/s", TARGET_SMALL_MFPS);
  c.line = RESP_INFO;
  c.line_len = sizeof RESP_INFO - 1;
  measure(&o, "decode_resp info", body_decode_resp, &c, 1e-6, "Mframe/s", TARGET_SMALL_MFPS);

  printf("%s\n", o.all_ok ? "all targets met" : "some targets MISSED");
  sbx_frame_reader_free(c.reader);
  sbx_free(c.stream);
  sbx_free(c.frame);
  sbx_free(c.out);
  sbx_free(c.b64);
  sbx_free(c.payload);
  return check && !o.all_ok ? 1 : 0;
}
