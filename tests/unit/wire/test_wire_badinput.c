/* Bad input never crashes, never grows memory without bound, and always
 * names its problem: a table of malformed frames (curl-style data-driven
 * cases), the frame reader's cap and chunking, the bulk fast path, and a
 * 100 MB stream of garbage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sandbox/wire.h>

#include "fixtures.h"

typedef struct {
  const char *line;
  const char *expect; /* substring of the error message; NULL = must decode */
} bad_case;

static const bad_case bad_requests[] = {
    /* not JSON / not one object */
    {"", "empty frame"},
    {"   \r", "empty frame"},
    {"[1,2]", "not a JSON object"},
    {"\"op\"", "not a JSON object"},
    {"{\"v\":1,\"op\":\"info\"", "expected ',' or '}'"},
    {"{\"v\":1,\"op\":\"info\"}{}", "trailing data"},
    {"{\"v\":1,\"op\":\"info\"} x", "trailing data"},
    {"{\"v\":1,\"op\":\"inf", "unterminated string"},
    {"{\"v\":1,\"op\":\"info\",}", "expected member name"},
    {"{\"v\":1 \"op\":\"info\"}", "expected ',' or '}'"},
    {"{\"v\":01,\"op\":\"info\"}", "expected ',' or '}'"},
    {"{\"v\":1.,\"op\":\"info\"}", "bad number"},
    {"{\"v\":-,\"op\":\"info\"}", "bad number"},
    {"{\"v\":tru,\"op\":\"info\"}", "unexpected character"},
    {"{\"v\":1,\"op\":\"info\",\"x\":'a'}", "unexpected character"},
    {"{\"v\":1,\"op\":\"in\tfo\"}", "control character"},
    {"{\"v\":1,\"op\":\"info\",\"x\":\"\\q\"}", "bad escape"},
    {"{\"v\":1,\"op\":\"info\",\"x\":\"\\u12G4\"}", "bad \\u escape"},
    {"{\"v\":1,\"op\":\"info\",\"x\":\"\\ud800\"}", "lone surrogate"},
    {"{\"v\":1,\"op\":\"info\",\"x\":\"\\udc00\\ud800\"}", "lone surrogate"},
    {"{\"v\":1,\"op\":\"info\",\"x\":\"\\ud800\\u0041\"}", "lone surrogate"},
    {"{\"v\":1,\"op\":\"info\",\"x\":\"\xff\"}", "invalid UTF-8"},
    {"{\"v\":1,\"op\":\"info\",\"x\":\"\xc0\xaf\"}", "invalid UTF-8"},     /* overlong '/' */
    {"{\"v\":1,\"op\":\"info\",\"x\":\"\xed\xa0\x80\"}", "invalid UTF-8"}, /* encoded surrogate */
    {"{\"v\":1,\"op\":\"info\",\"x\":\"\xf4\x90\x80\x80\"}", "invalid UTF-8"},
    {"{\"v\":1,\"op\":\"info\",\"x\":\"\xe2\x82\"}", "invalid UTF-8"},
    {"{\"v\":1,\"op\":\"info\",\"op\":\"ps\"}", "duplicate member"},
    {"{\"v\":1,\"op\":\"info\",\"\\u006fp\":\"ps\"}", "duplicate member"},
    {"{\"v\":1,\"op\":\"info\",\"x\":{\"a\":1,\"a\":2}}", "duplicate member"},
    /* tag problems */
    {"{\"v\":1}", "missing member \"op\""},
    {"{\"v\":1,\"op\":7}", "member \"op\": expected string"},
    {"{\"v\":1,\"op\":\"launch\"}", "unknown op \"launch\""},
    {"{\"type\":\"info\"}", "missing member \"op\""},
    /* members: missing, null, wrong type */
    {"{\"v\":1,\"op\":\"kill\"}", "missing member \"pid\""},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":null}", "member \"pid\": must not be null"},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":\"12\"}", "member \"pid\": expected u32"},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":1.0}", "member \"pid\": expected u32"},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":1e3}", "member \"pid\": expected u32"},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":-1}", "member \"pid\": expected u32"},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":-0}", "member \"pid\": expected u32"},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":true}", "member \"pid\": expected u32"},
    {"{\"v\":1,\"op\":\"exec\",\"argv\":\"ls\"}", "member \"argv\": expected array of strings"},
    {"{\"v\":1,\"op\":\"exec\",\"argv\":[\"ls\",1]}", "member \"argv\": expected array of strings"},
    {"{\"v\":1,\"op\":\"exec\",\"argv\":[\"ls\"],\"env\":{\"A\":1}}", "member \"env\": expected object of strings"},
    {"{\"v\":1,\"op\":\"exec\",\"argv\":[\"ls\"],\"env\":[]}", "member \"env\": expected object of strings"},
    {"{\"v\":1,\"op\":\"exec\",\"argv\":[\"ls\"],\"detach\":1}", "member \"detach\": expected bool"},
    {"{\"v\":1,\"op\":\"exec\",\"argv\":[\"ls\"],\"detach\":\"true\"}", "member \"detach\": expected bool"},
    {"{\"v\":1,\"op\":\"exec\",\"argv\":[\"ls\"],\"cwd\":7}", "member \"cwd\": expected string"},
    {"{\"v\":1,\"op\":\"git_branch\",\"path\":\"/r\",\"action\":\"merge\"}", "member \"action\": expected one of"},
    {"{\"v\":1,\"op\":\"git_branch\",\"path\":\"/r\",\"action\":7}", "member \"action\": expected one of"},
    /* integer ranges */
    {"{\"v\":1,\"op\":\"port_forward\",\"port\":65535}", NULL},
    {"{\"v\":1,\"op\":\"port_forward\",\"port\":65536}", "member \"port\": expected u16"},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":4294967295}", NULL},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":4294967296}", "member \"pid\": expected u32"},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":1,\"signal\":2147483647}", NULL},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":1,\"signal\":2147483648}", "member \"signal\": expected i32"},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":1,\"signal\":-2147483648}", NULL},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":1,\"signal\":-2147483649}", "member \"signal\": expected i32"},
    {"{\"v\":1,\"op\":\"kill\",\"pid\":99999999999999999999999}", "member \"pid\": expected u32"},
    {"{\"v\":1,\"op\":\"pty_open\",\"cols\":80,\"rows\":-24}", "member \"rows\": expected u16"},
    /* base64 */
    {"{\"v\":1,\"op\":\"data\",\"data\":\"aGVsbG8\"}", "invalid base64"},
    {"{\"v\":1,\"op\":\"data\",\"data\":\"aGVs bG8=\"}", "invalid base64"},
    {"{\"v\":1,\"op\":\"data\",\"data\":\"a-_s\"}", "invalid base64"},
    {"{\"v\":1,\"op\":\"data\",\"data\":\"aGVsbG9=\"}", "invalid base64"}, /* non-zero trailing bits */
    {"{\"v\":1,\"op\":\"data\",\"data\":\"aG=sbG8=\"}", "invalid base64"},
    {"{\"v\":1,\"op\":\"data\",\"data\":null}", "member \"data\": must not be null"},
    {"{\"v\":1,\"op\":\"data\",\"data\":5}", "member \"data\": expected base64 string"},
    {"{\"v\":1,\"op\":\"data\"}", "missing member \"data\""},
    {"{\"op\":\"stdin\",\"data\":\"\"}", NULL},
    {"{\"data\":\"aGVsbG8=\",\"op\":\"data\",\"v\":1}", NULL},
    {"{\"v\":1,\"op\":\"data\",\"data\":\"ab\\/c\"}", NULL}, /* \/ is legal JSON */
    /* lenient parts: order, unknown members, null optionals, whitespace, CR */
    {" {\"op\":\"info\",\"v\":\"whatever\",\"future_field\":true,\"x\":{\"y\":[1,2.5e3,null,{}]}} \r", NULL},
    {"{\"v\":1,\"op\":\"exec\",\"argv\":[\"ls\"],\"cwd\":null,\"env\":null,\"detach\":null}", NULL},
};

static void test_bad_requests(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad_requests / sizeof bad_requests[0]; i++) {
    const bad_case *c = &bad_requests[i];
    sbx_wire_req r;
    sbx_error err;
    sbx_err_clear(&err);
    int rc = sbx_wire_decode_req(c->line, strlen(c->line), &r, &err);
    if (!c->expect) {
      if (rc != 0) fail_msg("case %zu should decode: %s\n  %s", i, err.msg, c->line);
      sbx_wire_req_free(&r);
      continue;
    }
    if (rc != SBX_E_PARSE) fail_msg("case %zu decoded (rc %d) but should fail with '%s'\n  %s", i, rc, c->expect, c->line);
    if (!strstr(err.msg, c->expect)) fail_msg("case %zu: error '%s' lacks '%s'\n  %s", i, err.msg, c->expect, c->line);
    assert_null(r.arena);
  }
}

static void test_bad_responses(void **state) {
  (void)state;
  static const bad_case cases[] = {
      {"{\"type\":\"exit\"}", "missing member \"code\""},
      {"{\"type\":\"exit\",\"code\":2147483648}", "expected i32"},
      {"{\"type\":\"error\",\"kind\":\"fatal\",\"message\":\"x\"}", "member \"kind\": expected one of"},
      {"{\"type\":\"stat\",\"info\":{\"kind\":\"file\",\"size\":1,\"mode\":420}}", "missing member \"mtime_epoch_secs\" in FileInfo"},
      {"{\"type\":\"procs\",\"procs\":[{\"pid\":1}]}", "missing member \"argv\" in ProcInfo"},
      {"{\"type\":\"procs\",\"procs\":[7]}", "expected array of objects"},
      {"{\"type\":\"procs\",\"procs\":[{\"pid\":1,\"argv\":[],\"detached\":false,\"state\":\"zombie\",\"started_at_epoch_secs\":0}]}",
       "expected one of the proc_state values"},
      {"{\"type\":\"bogus\"}", "unknown type \"bogus\""},
      {"{\"type\":\"stdout\",\"data\":\"!!!!\"}", "invalid base64"},
      {"{\"type\":\"git_status_result\",\"branch\":\"m\",\"ahead\":0,\"behind\":0,\"files\":[],\"truncated\":null}", NULL},
      {"{\"message\":\"m\",\"kind\":\"internal\",\"type\":\"error\",\"extra\":[1]}", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sbx_wire_resp r;
    sbx_error err;
    int rc = sbx_wire_decode_resp(cases[i].line, strlen(cases[i].line), &r, &err);
    if (!cases[i].expect) {
      if (rc) fail_msg("case %zu should decode: %s", i, err.msg);
      sbx_wire_resp_free(&r);
      continue;
    }
    if (rc != SBX_E_PARSE || !strstr(err.msg, cases[i].expect))
      fail_msg("case %zu: rc %d msg '%s', wanted '%s'", i, rc, rc ? err.msg : "", cases[i].expect);
  }
}

static void test_nul_in_strings(void **state) {
  (void)state;
  const char *line = "{\"v\":1,\"op\":\"exec\",\"argv\":[\"ls\",\"a\\u0000b\"],\"cwd\":\"/\"}";
  sbx_wire_req r;
  sbx_error err;
  assert_int_equal(sbx_wire_decode_req(line, strlen(line), &r, &err), 0);
  assert_non_null(r.nul_field);
  assert_string_equal(r.nul_field, "argv");
  sbx_wire_req_free(&r);
  line = "{\"v\":1,\"op\":\"fs_stat\",\"path\":\"/tmp/x\"}";
  assert_int_equal(sbx_wire_decode_req(line, strlen(line), &r, &err), 0);
  assert_null(r.nul_field);
  sbx_wire_req_free(&r);
}

static void test_deep_nesting(void **state) {
  (void)state;
  char line[512];
  for (int depth = SBX_WIRE_MAX_DEPTH - 2; depth <= SBX_WIRE_MAX_DEPTH + 2; depth++) {
    size_t o = (size_t)snprintf(line, sizeof line, "{\"v\":1,\"op\":\"info\",\"x\":");
    for (int i = 0; i < depth; i++) line[o++] = '[';
    for (int i = 0; i < depth; i++) line[o++] = ']';
    line[o++] = '}';
    sbx_wire_req r;
    sbx_error err;
    int rc = sbx_wire_decode_req(line, o, &r, &err);
    if (depth < SBX_WIRE_MAX_DEPTH) {
      assert_int_equal(rc, 0);
      sbx_wire_req_free(&r);
    } else {
      assert_int_equal(rc, SBX_E_PARSE);
      assert_non_null(strstr(err.msg, "nesting too deep"));
    }
  }
  /* 100k open brackets: refused quickly, no stack overflow */
  size_t n = 100000;
  char *deep = test_malloc(n + 32);
  size_t o = (size_t)sprintf(deep, "{\"op\":\"info\",\"x\":");
  memset(deep + o, '[', n);
  sbx_wire_req r;
  sbx_error err;
  assert_int_equal(sbx_wire_decode_req(deep, o + n, &r, &err), SBX_E_PARSE);
  test_free(deep);
}

static void test_many_members(void **state) {
  (void)state;
  /* 200k unknown members exercise the sorted duplicate check */
  sbx_buf b = SBX_BUF_INIT(SBX_WIRE_FRAME_CAP);
  sbx_error err;
  assert_int_equal(sbx_buf_adds(&b, "{\"v\":1,\"op\":\"info\"", &err), 0);
  for (int i = 0; i < 200000; i++) assert_int_equal(sbx_buf_printf(&b, &err, ",\"k%d\":%d", i, i), 0);
  assert_int_equal(sbx_buf_adds(&b, "}", &err), 0);
  sbx_wire_req r;
  assert_int_equal(sbx_wire_decode_req(b.ptr, b.len, &r, &err), 0);
  sbx_wire_req_free(&r);
  /* same with one duplicate at the end */
  b.len--;
  assert_int_equal(sbx_buf_adds(&b, ",\"k17\":0}", &err), 0);
  assert_int_equal(sbx_wire_decode_req(b.ptr, b.len, &r, &err), SBX_E_PARSE);
  assert_non_null(strstr(err.msg, "duplicate member"));
  sbx_buf_free(&b);
}

/* ---- frame reader ---- */
static void test_reader_chunking(void **state) {
  (void)state;
  const char *stream = "{\"v\":1,\"op\":\"info\"}\n\n{\"v\":1,\"op\":\"ps\"}\r\n{\"v\":1,\"op\":\"fs_stat\",\"path\":\"/x\"}";
  const char *want[] = {"{\"v\":1,\"op\":\"info\"}", "", "{\"v\":1,\"op\":\"ps\"}\r", "{\"v\":1,\"op\":\"fs_stat\",\"path\":\"/x\"}"};
  size_t total = strlen(stream);
  for (size_t chunk = 1; chunk <= total; chunk++) {
    sbx_frame_reader *r = sbx_frame_reader_new(0);
    size_t got = 0;
    for (size_t off = 0; off <= total; off += chunk) {
      size_t n = off + chunk > total ? total - off : chunk;
      sbx_frame_reader_feed(r, stream + off, n);
      if (off + chunk > total) sbx_frame_reader_finish(r);
      const char *line;
      size_t len;
      sbx_error err;
      int rc;
      while ((rc = sbx_frame_reader_next(r, &line, &len, &err)) == 1) {
        assert_true(got < 4);
        assert_int_equal(len, strlen(want[got]));
        assert_memory_equal(line, want[got], len);
        got++;
      }
      assert_int_equal(rc, 0);
    }
    assert_int_equal(got, 4);
    sbx_frame_reader_free(r);
  }
  /* an empty unterminated tail is not a frame */
  sbx_frame_reader *r = sbx_frame_reader_new(0);
  sbx_frame_reader_feed(r, "{}\n", 3);
  sbx_frame_reader_finish(r);
  const char *line;
  size_t len;
  assert_int_equal(sbx_frame_reader_next(r, &line, &len, NULL), 1);
  assert_int_equal(sbx_frame_reader_next(r, &line, &len, NULL), 0);
  assert_int_equal(sbx_frame_reader_next(r, &line, &len, NULL), 0);
  sbx_frame_reader_free(r);
}

static void test_reader_cap(void **state) {
  (void)state;
  size_t cap = SBX_WIRE_FRAME_CAP;
  char *big = test_malloc(cap + 2);
  memset(big, ' ', cap + 1);
  big[cap + 1] = '\n';
  /* exactly the cap: accepted, whether it arrives whole or in pieces */
  for (size_t piece = 1000; piece <= cap + 1; piece = piece * 64 + 3) {
    sbx_frame_reader *r = sbx_frame_reader_new(0);
    memcpy(big + cap, "\n", 1);
    size_t got = 0, off = 0;
    const char *line;
    size_t len;
    sbx_error err;
    while (off < cap + 1) {
      size_t n = off + piece > cap + 1 ? cap + 1 - off : piece;
      sbx_frame_reader_feed(r, big + off, n);
      off += n;
      while (sbx_frame_reader_next(r, &line, &len, &err) == 1) {
        assert_int_equal(len, cap);
        got++;
      }
      assert_true(sbx_frame_reader_pending(r) <= cap);
    }
    assert_int_equal(got, 1);
    sbx_frame_reader_free(r);
  }
  /* one byte more: refused, in one chunk or many, and it stays refused */
  big[cap] = ' ';
  for (size_t piece = 4096; piece <= cap + 2; piece *= 64) {
    sbx_frame_reader *r = sbx_frame_reader_new(0);
    size_t off = 0;
    int rc = 0;
    sbx_error err;
    const char *line;
    size_t len;
    while (off < cap + 2 && rc >= 0) {
      size_t n = off + piece > cap + 2 ? cap + 2 - off : piece;
      sbx_frame_reader_feed(r, big + off, n);
      off += n;
      while ((rc = sbx_frame_reader_next(r, &line, &len, &err)) == 1) fail_msg("oversize line returned");
      assert_true(sbx_frame_reader_pending(r) <= cap + piece);
    }
    assert_int_equal(rc, SBX_E_TOOBIG);
    sbx_frame_reader_feed(r, "{}\n", 3);
    assert_int_equal(sbx_frame_reader_next(r, &line, &len, &err), SBX_E_TOOBIG);
    sbx_frame_reader_free(r);
  }
  test_free(big);
}

/* 100 MB of random bytes with the odd LF: every frame is an error, the
 * reader never holds more than the cap, nothing crashes. */
static void test_garbage_stream(void **state) {
  (void)state;
  enum { CHUNK = 1 << 20 };
  char *chunk = test_malloc(CHUNK);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  sbx_frame_reader *r = sbx_frame_reader_new(0);
  size_t frames = 0, errors = 0;
  for (int c = 0; c < 100; c++) {
    for (size_t i = 0; i < CHUNK; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      chunk[i] = (char)(x & 0xff);
      if (c >= 50 && chunk[i] == '\n') chunk[i] = '{'; /* the second half has no LF at all */
    }
    sbx_frame_reader_feed(r, chunk, CHUNK);
    const char *line;
    size_t len;
    sbx_error err;
    int rc;
    while ((rc = sbx_frame_reader_next(r, &line, &len, &err)) == 1) {
      frames++;
      sbx_wire_req q;
      sbx_wire_resp p;
      if (sbx_wire_decode_req(line, len, &q, &err) == 0) sbx_wire_req_free(&q);
      else errors++;
      if (sbx_wire_decode_resp(line, len, &p, &err) == 0) sbx_wire_resp_free(&p);
      uint8_t out[256];
      sbx_wire_bulk k;
      size_t olen;
      (void)sbx_wire_bulk_decode(line, len, &k, out, sizeof out, &olen, &err);
    }
    assert_true(sbx_frame_reader_pending(r) <= SBX_WIRE_FRAME_CAP + CHUNK);
    if (rc == SBX_E_TOOBIG) break;
  }
  assert_true(frames > 1000);
  assert_int_equal(errors, frames);
  /* the LF-free second half must have tripped the cap */
  const char *line;
  size_t len;
  assert_int_equal(sbx_frame_reader_next(r, &line, &len, NULL), SBX_E_TOOBIG);
  sbx_frame_reader_free(r);
  test_free(chunk);
}

/* ---- bulk fast path ---- */
static void test_bulk_roundtrip(void **state) {
  (void)state;
  static const sbx_wire_bulk kinds[] = {SBX_BULK_STDOUT, SBX_BULK_STDERR, SBX_BULK_DATA, SBX_BULK_REQ_DATA,
                                        SBX_BULK_REQ_STDIN};
  size_t maxn = 300000;
  uint8_t *payload = test_malloc(maxn);
  for (size_t i = 0; i < maxn; i++) payload[i] = (uint8_t)(i * 131 + 7);
  char *frame = test_malloc(sbx_wire_bulk_frame_len(SBX_BULK_REQ_STDIN, maxn));
  uint8_t *out = test_malloc(maxn + 4);
  size_t sizes[] = {0, 1, 2, 3, 4, 5, 31, 32, 33, 95, 96, 97, 1000, 262144, maxn};
  for (size_t k = 0; k < 5; k++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      size_t n = sizes[s];
      size_t flen = sbx_wire_bulk_encode_into(frame, kinds[k], payload, n);
      assert_int_equal(flen, sbx_wire_bulk_frame_len(kinds[k], n));
      assert_int_equal(frame[flen - 1], '\n');
      sbx_wire_bulk got;
      size_t olen;
      sbx_error err;
      assert_int_equal(sbx_wire_bulk_decode(frame, flen - 1, &got, out, maxn + 4, &olen, &err), 1);
      assert_int_equal(got, kinds[k]);
      assert_int_equal(olen, n);
      assert_memory_equal(out, payload, n);
      /* the general decoders agree */
      if (kinds[k] >= SBX_BULK_REQ_DATA) {
        sbx_wire_req q;
        assert_int_equal(sbx_wire_decode_req(frame, flen - 1, &q, &err), 0);
        assert_int_equal(q.op, kinds[k] == SBX_BULK_REQ_DATA ? SBX_OP_DATA : SBX_OP_STDIN);
        assert_int_equal(q.u.data.data.len, n);
        assert_memory_equal(q.u.data.data.ptr, payload, n);
        sbx_wire_req_free(&q);
      } else {
        sbx_wire_resp p;
        assert_int_equal(sbx_wire_decode_resp(frame, flen - 1, &p, &err), 0);
        assert_int_equal(p.u.data.data.len, n);
        assert_memory_equal(p.u.data.data.ptr, payload, n);
        sbx_wire_resp_free(&p);
      }
    }
  test_free(out);
  test_free(frame);
  test_free(payload);
}

static void test_bulk_noncanonical(void **state) {
  (void)state;
  uint8_t out[64];
  size_t olen;
  sbx_wire_bulk k;
  sbx_error err;
  const char *reordered = "{\"data\":\"aGVsbG8=\",\"type\":\"stdout\"}";
  assert_int_equal(sbx_wire_bulk_decode(reordered, strlen(reordered), &k, out, sizeof out, &olen, &err), 0);
  sbx_wire_resp p;
  assert_int_equal(sbx_wire_decode_resp(reordered, strlen(reordered), &p, &err), 0);
  assert_int_equal(p.type, SBX_RESP_STDOUT);
  assert_memory_equal(p.u.stdout_.data.ptr, "hello", 5);
  sbx_wire_resp_free(&p);
  const char *extra = "{\"type\":\"stdout\",\"data\":\"aGVsbG8=\",\"x\":1}";
  assert_int_equal(sbx_wire_bulk_decode(extra, strlen(extra), &k, out, sizeof out, &olen, &err), 0);
  const char *escaped = "{\"type\":\"data\",\"data\":\"aGVs\\u0062G8=\"}";
  assert_int_equal(sbx_wire_bulk_decode(escaped, strlen(escaped), &k, out, sizeof out, &olen, &err), 0);
  assert_int_equal(sbx_wire_decode_resp(escaped, strlen(escaped), &p, &err), 0);
  assert_memory_equal(p.u.data.data.ptr, "hello", 5);
  sbx_wire_resp_free(&p);
  const char *bad = "{\"type\":\"stdout\",\"data\":\"aGVsbG8\"}";
  assert_true(sbx_wire_bulk_decode(bad, strlen(bad), &k, out, sizeof out, &olen, &err) < 0);
  assert_int_equal(sbx_wire_decode_resp(bad, strlen(bad), &p, &err), SBX_E_PARSE);
  const char *cr = "{\"v\":1,\"op\":\"stdin\",\"data\":\"aGk=\"}\r";
  assert_int_equal(sbx_wire_bulk_decode(cr, strlen(cr), &k, out, sizeof out, &olen, &err), 1);
  assert_int_equal(k, SBX_BULK_REQ_STDIN);
  assert_int_equal(olen, 2);
  /* too small a destination is an error, not an overflow */
  const char *fits = "{\"type\":\"stdout\",\"data\":\"aGVsbG8gd29ybGQ=\"}";
  assert_int_equal(sbx_wire_bulk_decode(fits, strlen(fits), &k, out, 4, &olen, &err), SBX_E_TOOBIG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_requests),   cmocka_unit_test(test_bad_responses),
      cmocka_unit_test(test_nul_in_strings), cmocka_unit_test(test_deep_nesting),
      cmocka_unit_test(test_many_members),   cmocka_unit_test(test_reader_chunking),
      cmocka_unit_test(test_reader_cap),     cmocka_unit_test(test_garbage_stream),
      cmocka_unit_test(test_bulk_roundtrip), cmocka_unit_test(test_bulk_noncanonical),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
