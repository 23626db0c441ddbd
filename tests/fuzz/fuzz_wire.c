/* tests/fuzz/fuzz_wire.c - libFuzzer target for the silkd wire codec.
 *
 * Input layout: byte 0 is a control byte, the rest is the byte stream.
 *   control & 3        how the stream is cut into chunks for the reader:
 *                      0 one chunk, 1 one byte at a time, 2 and 3 chunk sizes
 *                      taken from the stream's own bytes
 *   (control >> 2) & 3 reader cap: the default (8 MiB), 16, 64 or 256 bytes
 *
 * For every input:
 *   - the streaming frame reader runs over the stream twice, once fed whole
 *     and once in the chunks above; both runs must give the same frames and
 *     the same final status (the reader must not depend on chunking);
 *   - each frame goes through sbx_wire_decode_req, sbx_wire_decode_resp and
 *     sbx_wire_bulk_decode;
 *   - each successfully decoded message is re-encoded, and the re-encoding
 *     must decode again and re-encode to the same bytes (a fixpoint);
 *   - a frame the bulk fast path accepts must decode to the same payload with
 *     the full decoder, and bulk-encoding that payload must round-trip.
 * Any violation calls abort(): an identity violation is a finding like a crash.
 *
 * tests/fuzz/run builds and runs it; replay_main.c replays files through it
 * without libFuzzer (the ctest test fuzz_wire_replay).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sandbox/sandbox.h>

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "fuzz_wire: check failed at %s:%d: %s\n", __FILE__, \
              __LINE__, #cond);                                            \
      fprintf(stderr, "fuzz_wire: " __VA_ARGS__);                          \
      fputc('\n', stderr);                                                 \
      abort();                                                             \
    }                                                                      \
  } while (0)

static void dump_line(const char *what, const char *p, size_t n) {
  fprintf(stderr, "fuzz_wire: %s (%zu bytes): ", what, n);
  fwrite(p, 1, n > 4096 ? 4096 : n, stderr);
  fputc('\n', stderr);
}

static size_t strip_lf(const sbx_buf *b) {
  return b->len > 0 && b->ptr[b->len - 1] == '\n' ? b->len - 1 : b->len;
}

/* One side of the codec (requests or responses) seen through a common
 * shape, so the fixpoint check below is written once for both. */
typedef union {
  sbx_wire_req req;
  sbx_wire_resp resp;
} wire_msg;

typedef struct {
  const char *what;
  int (*decode)(const char *line, size_t len, wire_msg *m, sbx_error *err);
  int (*encode)(sbx_buf *out, const wire_msg *m, sbx_error *err);
  void (*release)(wire_msg *m);
  int (*kind)(const wire_msg *m);
  const char *(*kind_name)(int kind);
} wire_side;

static int req_decode(const char *l, size_t n, wire_msg *m, sbx_error *e) { return sbx_wire_decode_req(l, n, &m->req, e); }
static int req_encode(sbx_buf *o, const wire_msg *m, sbx_error *e) { return sbx_wire_encode_req(o, &m->req, e); }
static void req_release(wire_msg *m) { sbx_wire_req_free(&m->req); }
static int req_kind(const wire_msg *m) { return (int)m->req.op; }
static const char *req_kind_name(int k) { return sbx_wire_op_name((sbx_wire_op)k); }
static int resp_decode(const char *l, size_t n, wire_msg *m, sbx_error *e) { return sbx_wire_decode_resp(l, n, &m->resp, e); }
static int resp_encode(sbx_buf *o, const wire_msg *m, sbx_error *e) { return sbx_wire_encode_resp(o, &m->resp, e); }
static void resp_release(wire_msg *m) { sbx_wire_resp_free(&m->resp); }
static int resp_kind(const wire_msg *m) { return (int)m->resp.type; }
static const char *resp_kind_name(int k) { return sbx_wire_type_name((sbx_wire_type)k); }

static const wire_side request_side = {"request", req_decode, req_encode, req_release, req_kind, req_kind_name};
static const wire_side response_side = {"response", resp_decode, resp_encode, resp_release, resp_kind,
                                        resp_kind_name};

/* encode(decode(line)) must decode again and re-encode to the same bytes. */
static void check_fixpoint(const wire_side *side, const char *line, size_t len) {
  sbx_error err;
  wire_msg msg;
  if (side->decode(line, len, &msg, &err) != 0) return;
  const char *name = side->kind_name(side->kind(&msg));

  sbx_buf e1 = SBX_BUF_INIT(SBX_WIRE_FRAME_CAP + 1), e2 = SBX_BUF_INIT(SBX_WIRE_FRAME_CAP + 1);
  int rc = side->encode(&e1, &msg, &err);
  if (rc == SBX_E_TOOBIG) goto out; /* a lossy (U+FFFD) expansion can pass the cap */
  if (rc != 0) dump_line(side->what, line, len);
  CHECK(rc == 0, "encode of a decoded %s %s failed: %s", name, side->what, err.msg);

  wire_msg again;
  rc = side->decode(e1.ptr, strip_lf(&e1), &again, &err);
  if (rc != 0) { dump_line(side->what, line, len); dump_line("re-encoding", e1.ptr, e1.len); }
  CHECK(rc == 0, "re-encoded %s %s does not decode: %s", name, side->what, err.msg);
  CHECK(side->kind(&again) == side->kind(&msg), "%s kind changed from %s to %s", side->what, name,
        side->kind_name(side->kind(&again)));
  rc = side->encode(&e2, &again, &err);
  CHECK(rc == 0, "second encode failed: %s", err.msg);
  if (e1.len != e2.len || memcmp(e1.ptr, e2.ptr, e1.len) != 0) {
    dump_line(side->what, line, len);
    dump_line("encode 1", e1.ptr, e1.len);
    dump_line("encode 2", e2.ptr, e2.len);
    CHECK(0, "%s encoding is not a fixpoint", side->what);
  }
  side->release(&again);
out:
  side->release(&msg);
  sbx_buf_free(&e1);
  sbx_buf_free(&e2);
}

/* The full decoder's payload of a bulk frame; returns 0 if it did not decode. */
static int full_decode_payload(const char *line, size_t len, sbx_wire_bulk kind, uint8_t **out, size_t *n) {
  sbx_error err;
  if (kind == SBX_BULK_REQ_DATA || kind == SBX_BULK_REQ_STDIN) {
    sbx_wire_req req;
    if (sbx_wire_decode_req(line, len, &req, &err) != 0) return 0;
    sbx_wire_op want = kind == SBX_BULK_REQ_DATA ? SBX_OP_DATA : SBX_OP_STDIN;
    CHECK(req.op == want, "bulk kind %d but full decoder says op %s", kind, sbx_wire_op_name(req.op));
    const sbx_wire_bytes *b = kind == SBX_BULK_REQ_DATA ? &req.u.data.data : &req.u.stdin_.data;
    *n = b->len;
    *out = malloc(b->len + 1);
    if (b->len) memcpy(*out, b->ptr, b->len);
    sbx_wire_req_free(&req);
    return 1;
  }
  sbx_wire_resp resp;
  if (sbx_wire_decode_resp(line, len, &resp, &err) != 0) return 0;
  sbx_wire_type want = kind == SBX_BULK_STDOUT ? SBX_RESP_STDOUT : kind == SBX_BULK_STDERR ? SBX_RESP_STDERR : SBX_RESP_DATA;
  CHECK(resp.type == want, "bulk kind %d but full decoder says type %s", kind, sbx_wire_type_name(resp.type));
  const sbx_wire_bytes *b = kind == SBX_BULK_STDOUT ? &resp.u.stdout_.data
                            : kind == SBX_BULK_STDERR ? &resp.u.stderr_.data
                                                      : &resp.u.data.data;
  *n = b->len;
  *out = malloc(b->len + 1);
  if (b->len) memcpy(*out, b->ptr, b->len);
  sbx_wire_resp_free(&resp);
  return 1;
}

static void check_bulk(const char *line, size_t len) {
  sbx_error err;
  size_t cap = sbx_b64_decoded_max(len);
  uint8_t *dst = malloc(cap ? cap : 1); /* exact size: ASan sees any overrun */
  sbx_wire_bulk kind = SBX_BULK_NONE;
  size_t n = 0;
  int rc = sbx_wire_bulk_decode(line, len, &kind, dst, cap, &n, &err);
  CHECK(rc <= 1, "bulk decode returned %d", rc);
  if (rc == 1) {
    CHECK(kind >= SBX_BULK_STDOUT && kind <= SBX_BULK_REQ_STDIN, "bad bulk kind %d", kind);
    CHECK(n <= cap, "bulk payload %zu over the buffer %zu", n, cap);

    uint8_t *full = NULL;
    size_t full_n = 0;
    int ok = full_decode_payload(line, len, kind, &full, &full_n);
    if (!ok) dump_line("bulk frame", line, len);
    CHECK(ok, "the bulk fast path accepts a frame the full decoder refuses");
    if (full_n != n || (n && memcmp(full, dst, n) != 0)) dump_line("bulk frame", line, len);
    CHECK(full_n == n && (n == 0 || memcmp(full, dst, n) == 0), "bulk and full decoder disagree on the payload");
    free(full);

    /* bulk encode of the payload must be exactly frame_len and decode back */
    size_t flen = sbx_wire_bulk_frame_len(kind, n);
    char *frame = malloc(flen);
    size_t w = sbx_wire_bulk_encode_into(frame, kind, dst, n);
    CHECK(w == flen, "bulk_encode_into wrote %zu, frame_len says %zu", w, flen);
    CHECK(flen > 0 && frame[flen - 1] == '\n', "bulk frame does not end with LF");
    uint8_t *dst2 = malloc(n ? n : 1);
    sbx_wire_bulk kind2 = SBX_BULK_NONE;
    size_t n2 = 0;
    size_t cap2 = sbx_b64_decoded_max(flen - 1);
    uint8_t *big = cap2 > n ? malloc(cap2) : NULL;
    rc = sbx_wire_bulk_decode(frame, flen - 1, &kind2, big ? big : dst2, big ? cap2 : n, &n2, &err);
    if (rc != 1) dump_line("bulk re-encoding", frame, flen);
    CHECK(rc == 1, "bulk re-encoding is not a bulk frame (rc %d: %s)", rc, rc < 0 ? err.msg : "");
    CHECK(kind2 == kind && n2 == n && (n == 0 || memcmp(big ? big : dst2, dst, n) == 0),
          "bulk encode/decode identity violated");
    free(big);
    free(dst2);
    free(frame);
  }
  free(dst);
}

static void check_frame(const char *line, size_t len) {
  check_fixpoint(&request_side, line, len);
  check_fixpoint(&response_side, line, len);
  check_bulk(line, len);
}

/* ---- the reader, run whole and chunked ---- */
typedef struct {
  char **lines;
  size_t *lens;
  size_t count, alloc;
  int status; /* 0, or the negative code that stopped the reader */
} frame_log;

static void log_add(frame_log *log, const char *line, size_t len) {
  if (log->count == log->alloc) {
    log->alloc = log->alloc ? log->alloc * 2 : 16;
    log->lines = realloc(log->lines, log->alloc * sizeof *log->lines);
    log->lens = realloc(log->lens, log->alloc * sizeof *log->lens);
  }
  log->lines[log->count] = malloc(len + 1);
  if (len) memcpy(log->lines[log->count], line, len);
  log->lens[log->count++] = len;
}

static void log_free(frame_log *log) {
  for (size_t i = 0; i < log->count; i++) free(log->lines[i]);
  free(log->lines);
  free(log->lens);
}

/* Take every available frame; returns 0 or the reader's error. */
static int drain(sbx_frame_reader *r, frame_log *log, size_t cap) {
  for (;;) {
    const char *line = NULL;
    size_t len = 0;
    sbx_error err;
    int rc = sbx_frame_reader_next(r, &line, &len, &err);
    if (rc == 0) {
      /* the fed input is used up: what is held is one incomplete line */
      CHECK(sbx_frame_reader_pending(r) <= cap, "reader holds %zu bytes, over its cap %zu",
            sbx_frame_reader_pending(r), cap);
      return 0;
    }
    if (rc < 0) {
      CHECK(rc == SBX_E_TOOBIG, "reader failed with %d (%s), not TOOBIG", rc, err.msg);
      /* the error is sticky until reset */
      rc = sbx_frame_reader_next(r, &line, &len, &err);
      CHECK(rc == SBX_E_TOOBIG, "reader error is not sticky (got %d)", rc);
      return SBX_E_TOOBIG;
    }
    CHECK(rc == 1, "reader returned %d", rc);
    CHECK(len <= cap, "reader gave a %zu-byte frame over its cap %zu", len, cap);
    CHECK(len == 0 || memchr(line, '\n', len) == NULL, "frame holds an LF");
    log_add(log, line, len);
  }
}

static void run_reader(const uint8_t *data, size_t size, int mode, size_t cap, frame_log *log) {
  sbx_frame_reader *r = sbx_frame_reader_new(cap == SBX_WIRE_FRAME_CAP ? 0 : cap);
  CHECK(r != NULL, "sbx_frame_reader_new failed");
  size_t pos = 0;
  while (pos < size && log->status == 0) {
    size_t n;
    switch (mode) {
    case 0: n = size - pos; break;
    case 1: n = 1; break;
    case 2: n = 1 + data[pos] % 16; break;
    default: n = 1 + data[pos] % 251; break;
    }
    if (n > size - pos) n = size - pos;
    sbx_frame_reader_feed(r, data + pos, n);
    pos += n;
    log->status = drain(r, log, cap);
  }
  if (log->status == 0) {
    sbx_frame_reader_finish(r);
    log->status = drain(r, log, cap);
    if (log->status == 0) CHECK(sbx_frame_reader_at_eof(r), "reader not at EOF after finish and drain");
  }
  sbx_frame_reader_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const size_t caps[4] = {SBX_WIRE_FRAME_CAP, 16, 64, 256};
  if (size == 0) return 0;
  int mode = data[0] & 3;
  size_t cap = caps[(data[0] >> 2) & 3];
  data++;
  size--;

  frame_log whole = {0}, chunked = {0};
  run_reader(data, size, 0, cap, &whole);
  run_reader(data, size, mode, cap, &chunked);

  CHECK(whole.status == chunked.status, "reader status %d fed whole, %d in chunks (mode %d)", whole.status,
        chunked.status, mode);
  CHECK(whole.count == chunked.count, "reader gave %zu frames fed whole, %zu in chunks (mode %d)", whole.count,
        chunked.count, mode);
  for (size_t i = 0; i < whole.count; i++) {
    CHECK(whole.lens[i] == chunked.lens[i] && memcmp(whole.lines[i], chunked.lines[i], whole.lens[i]) == 0,
          "frame %zu differs between whole and chunked feeding (mode %d)", i, mode);
    check_frame(chunked.lines[i], chunked.lens[i]);
  }
  log_free(&whole);
  log_free(&chunked);
  return 0;
}
