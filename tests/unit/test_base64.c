/* Base64: RFC 4648 vectors, round trips at every small length and a few
 * large ones, a table of malformed inputs (curl-style data-driven cases),
 * every byte outside the alphabet at every offset of several lengths, and
 * byte-for-byte agreement between the scalar and AVX2 paths, errors
 * included. Buffers are allocated at their exact sizes so ASan catches any
 * read past the input or write past the documented output size. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <sandbox/core.h>

#include "core/base64_impl.h"
#include "core/env.h"

typedef size_t (*encode_fn)(char *, const void *, size_t);
typedef int (*decode_fn)(void *, const char *, size_t, size_t *, sbx_error *);

typedef struct {
  const char *name;
  encode_fn enc;
  decode_fn dec;
} impl;

static impl impls[3];
static size_t n_impls;

static int setup(void **state) {
  (void)state;
  impls[n_impls++] = (impl){"public", sbx_b64_encode, sbx_b64_decode};
  impls[n_impls++] = (impl){"scalar", sbxi_b64_encode_scalar, sbxi_b64_decode_scalar};
  if (sbxi_b64_have_avx2())
    impls[n_impls++] = (impl){"avx2", sbxi_b64_encode_avx2, sbxi_b64_decode_avx2};
  else
    fprintf(stderr, "note: no AVX2 on this CPU; only the scalar path is tested\n");
  return 0;
}

/* xorshift64*: reproducible data without libc's rand state. */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rnd(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1du;
}
static void fill_random(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(rnd() >> 56);
}

/* An independent bit-at-a-time oracle. */
static const char oracle_abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static void oracle_encode(char *dst, const uint8_t *src, size_t n) {
  size_t bits = 0, o = 0;
  unsigned acc = 0;
  for (size_t i = 0; i < n; i++) {
    acc = acc << 8 | src[i];
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      dst[o++] = oracle_abc[(acc >> bits) & 63];
    }
  }
  if (bits) dst[o++] = oracle_abc[(acc << (6 - bits)) & 63];
  while (o % 4) dst[o++] = '=';
}

/* Exact-size copies so ASan sees every out-of-bounds access. */
static char *exact_copy(const void *p, size_t n) {
  char *c = sbx_malloc(n);
  if (n) memcpy(c, p, n);
  return c;
}

/* Encode with every implementation, check against the oracle, decode back. */
static void round_trip(const uint8_t *data, size_t n) {
  size_t elen = sbx_b64_encoded_len(n);
  char *want = sbx_malloc(elen + 1);
  oracle_encode(want, data, n);
  uint8_t *src = (uint8_t *)exact_copy(data, n);
  for (size_t k = 0; k < n_impls; k++) {
    char *enc = sbx_malloc(elen);
    size_t got = impls[k].enc(enc, src, n);
    if (got != elen || memcmp(enc, want, elen) != 0) fail_msg("%s encode differs at length %zu", impls[k].name, n);
    for (size_t j = 0; j < n_impls; j++) {
      size_t dmax = sbx_b64_decoded_max(elen);
      uint8_t *dec = sbx_malloc(dmax);
      size_t outlen = (size_t)-1;
      sbx_error err = {0};
      int rc = impls[j].dec(dec, enc, elen, &outlen, &err);
      if (rc != 0) fail_msg("%s decode of length %zu failed: %s", impls[j].name, n, err.msg);
      if (outlen != n || (n && memcmp(dec, data, n) != 0))
        fail_msg("%s decode of length %zu returned wrong bytes", impls[j].name, n);
      sbx_free(dec);
    }
    sbx_free(enc);
  }
  sbx_free(src);
  sbx_free(want);
}

static void test_rfc4648_vectors(void **state) {
  (void)state;
  static const struct {
    const char *raw, *b64;
  } v[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},        {"foo", "Zm9v"},
           {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    size_t n = strlen(v[i].raw), e = strlen(v[i].b64);
    assert_int_equal(sbx_b64_encoded_len(n), e);
    for (size_t k = 0; k < n_impls; k++) {
      char out[16];
      assert_int_equal(impls[k].enc(out, v[i].raw, n), e);
      assert_memory_equal(out, v[i].b64, e);
      uint8_t dec[16];
      size_t outlen;
      sbx_error err;
      assert_int_equal(impls[k].dec(dec, v[i].b64, e, &outlen, &err), 0);
      assert_int_equal(outlen, n);
      assert_memory_equal(dec, v[i].raw, n);
    }
    round_trip((const uint8_t *)v[i].raw, n);
  }
}

static void test_round_trip_small(void **state) {
  (void)state;
  uint8_t buf[2001] = {0};
  for (size_t n = 0; n <= 2000; n++) {
    fill_random(buf, n);
    round_trip(buf, n);
  }
  /* Runs of one value exercise every table entry's neighbours. */
  for (int b = 0; b < 256; b++) {
    memset(buf, b, 100);
    round_trip(buf, 100);
  }
}

static void test_round_trip_large(void **state) {
  (void)state;
  static const size_t sizes[] = {256 << 10, (3 << 20) + 1, (4 << 20) + 2, 6291432};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    uint8_t *buf = sbx_malloc(sizes[i]);
    fill_random(buf, sizes[i]);
    round_trip(buf, sizes[i]);
    sbx_free(buf);
  }
}

/* Decode with every implementation: all must agree on the code, the message
 * and (on success) the bytes. Returns the code; *msg gets the message. */
static int decode_all(const char *in, size_t n, char *msg, size_t msgsz) {
  char *src = exact_copy(in, n);
  size_t dmax = sbx_b64_decoded_max(n);
  int first_rc = 0;
  char first_msg[SBX_ERROR_MSG_MAX] = "";
  uint8_t *first_out = sbx_malloc(dmax);
  size_t first_len = 0;
  for (size_t k = 0; k < n_impls; k++) {
    uint8_t *out = sbx_malloc(dmax);
    size_t outlen = 0;
    sbx_error err = {0};
    int rc = impls[k].dec(out, src, n, &outlen, &err);
    if (rc != 0 && rc != SBX_E_PARSE) fail_msg("%s: unexpected code %d", impls[k].name, rc);
    if (rc != 0 && err.code != rc) fail_msg("%s: err.code %d, returned %d", impls[k].name, err.code, rc);
    if (k == 0) {
      first_rc = rc;
      snprintf(first_msg, sizeof first_msg, "%s", rc ? err.msg : "");
      first_len = outlen;
      if (rc == 0 && outlen) memcpy(first_out, out, outlen);
    } else {
      if (rc != first_rc)
        fail_msg("%s returns %d, %s %d on '%.*s'", impls[k].name, rc, impls[0].name, first_rc, (int)n, in);
      if (rc && strcmp(err.msg, first_msg) != 0)
        fail_msg("%s says '%s', %s '%s'", impls[k].name, err.msg, impls[0].name, first_msg);
      if (!rc && (outlen != first_len || memcmp(out, first_out, outlen) != 0))
        fail_msg("%s decodes to other bytes", impls[k].name);
    }
    sbx_free(out);
  }
  sbx_free(first_out);
  sbx_free(src);
  if (msg) snprintf(msg, msgsz, "%s", first_msg);
  return first_rc;
}

typedef struct {
  const char *in;
  size_t len;
  const char *expect; /* substring of the message; NULL = must decode */
} b64_case;
#define C(in, expect) {in, sizeof(in) - 1, expect}

static const b64_case cases[] = {
    C("", NULL),
    C("Zg==", NULL),
    C("Zm8=", NULL),
    C("+/+/", NULL),
    C("////", NULL),
    C("AAAA", NULL),
    /* length */
    C("Z", "length 1 is not a multiple of 4"),
    C("Zm9", "length 3 is not a multiple of 4"),
    C("Zm9vY", "at offset 4"),
    C("Zg=", "length 3"),
    C("Zg", "length 2"),
    C("Zm9vYg=", "length 7"),
    /* padding in the wrong place */
    C("====", "padding '=' at offset 0"),
    C("Z===", "padding '=' at offset 1"),
    C("Zm=v", "padding '=' at offset 2"),
    C("Zg==Zg==", "padding '=' at offset 2"),
    C("Zm9v====", "padding '=' at offset 4"),
    C("Zm9=Zm9v", "padding '=' at offset 3"),
    C("=m9v", "padding '=' at offset 0"),
    C("Zg=\x41", "padding '=' at offset 2"),
    /* outside the alphabet */
    C("Zm-v", "'-' (0x2d) at offset 2"),
    C("Zm_v", "'_' (0x5f) at offset 2"),
    C("Zm9v\n", "length 5"),
    C("Zm9v\r\n==", "byte 0x0d at offset 4"),
    C(" Zm9", "' ' (0x20) at offset 0"),
    C("Zm9 ", "' ' (0x20) at offset 3"),
    C("Zm\t9", "byte 0x09 at offset 2"),
    C("Zm9\x80", "byte 0x80 at offset 3"),
    C("\xffZm9", "byte 0xff at offset 0"),
    C("Zm9\0", "byte 0x00 at offset 3"),
    C("Zm.v", "'.' (0x2e) at offset 2"),
    C("Zm:v", "':' (0x3a) at offset 2"),
    C("Zm@v", "'@' (0x40) at offset 2"),
    C("Zm[v", "'[' (0x5b) at offset 2"),
    C("Zm`v", "'`' (0x60) at offset 2"),
    C("Zm{v", "'{' (0x7b) at offset 2"),
    C("Zm*v", "'*' (0x2a) at offset 2"),
    C("Zm,v", "',' (0x2c) at offset 2"),
    C("aGVsbG8gd29ybGQ-", "'-' (0x2d) at offset 15"),
    /* non-zero trailing bits */
    C("Zh==", "trailing bits at offset 1"),
    C("Zm9=", "trailing bits at offset 2"),
    C("aGVsbG9=", "trailing bits at offset 6"),
    C("AB==", "trailing bits at offset 1"),
    C("AAB=", "trailing bits at offset 2"),
    C("AA==", NULL),
    C("AAA=", NULL),
    C("AAF=", "trailing bits at offset 2"),
    C("AAQ=", NULL),
};

static void test_case_table(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t n = cases[i].len; /* cases may hold NUL bytes */
    char msg[SBX_ERROR_MSG_MAX];
    int rc = decode_all(cases[i].in, n, msg, sizeof msg);
    if (!cases[i].expect) {
      if (rc) fail_msg("case %zu '%s' should decode: %s", i, cases[i].in, msg);
      continue;
    }
    if (rc != SBX_E_PARSE || !strstr(msg, cases[i].expect))
      fail_msg("case %zu '%s': rc %d msg '%s', wanted '%s'", i, cases[i].in, rc, msg, cases[i].expect);
    if (!strstr(msg, "invalid base64")) fail_msg("case %zu: message '%s' does not say what failed", i, msg);
  }
}

/* Every byte outside the alphabet, at every offset, for lengths that put the
 * offset in the scalar prologue, inside 32-byte vector blocks, on their
 * edges and in the scalar tail. Both paths must agree on the message, and it
 * must name the offset (except '=' in the final quad, which may be legal). */
static void test_every_bad_byte_everywhere(void **state) {
  (void)state;
  static const size_t lens[] = {4, 8, 44, 48, 52, 64, 96, 128, 132, 260};
  bool in_alphabet[256] = {0};
  for (const char *p = oracle_abc; *p; p++) in_alphabet[(uint8_t)*p] = true;
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    size_t n = lens[li];
    size_t raw_n = n / 4 * 3;
    uint8_t raw[256];
    fill_random(raw, raw_n);
    char good[264];
    oracle_encode(good, raw, raw_n);
    assert_int_equal(decode_all(good, n, NULL, 0), 0);
    for (size_t pos = 0; pos < n; pos++) {
      for (int b = 0; b < 256; b++) {
        if (in_alphabet[b]) continue;
        char bad[264];
        memcpy(bad, good, n);
        bad[pos] = (char)b;
        char msg[SBX_ERROR_MSG_MAX];
        int rc = decode_all(bad, n, msg, sizeof msg);
        bool maybe_legal = b == '=' && pos >= n - 2;
        if (maybe_legal) continue;
        char want[48];
        snprintf(want, sizeof want, "at offset %zu", pos);
        if (rc != SBX_E_PARSE || !strstr(msg, want))
          fail_msg("len %zu, byte 0x%02x at %zu: rc %d msg '%s'", n, b, pos, rc, msg);
      }
    }
  }
}

/* The last sextet before padding must have its unused low bits clear. */
static void test_trailing_bits(void **state) {
  (void)state;
  for (int v = 0; v < 64; v++) {
    char in2[8] = {'Q', 'U', 'J', 'D', 'Q', oracle_abc[v], '=', '='};
    char msg[SBX_ERROR_MSG_MAX];
    int rc = decode_all(in2, 8, msg, sizeof msg);
    if ((v & 15) == 0 ? rc != 0 : (rc != SBX_E_PARSE || !strstr(msg, "trailing bits at offset 5")))
      fail_msg("'%.8s': rc %d '%s'", in2, rc, msg);
    char in1[8] = {'Q', 'U', 'J', 'D', 'Q', 'U', oracle_abc[v], '='};
    rc = decode_all(in1, 8, msg, sizeof msg);
    if ((v & 3) == 0 ? rc != 0 : (rc != SBX_E_PARSE || !strstr(msg, "trailing bits at offset 6")))
      fail_msg("'%.8s': rc %d '%s'", in1, rc, msg);
  }
}

/* Random corruption of long inputs: several bad bytes, padding in the
 * middle, URL-safe characters; the first offence is what gets reported. */
static void test_random_corruption_agrees(void **state) {
  (void)state;
  static const char junk[] = "=-_ \n\r\t.\x80\xff\0";
  uint8_t raw[3000];
  char enc[4004];
  for (int iter = 0; iter < 4000; iter++) {
    size_t raw_n = rnd() % sizeof raw;
    fill_random(raw, raw_n);
    oracle_encode(enc, raw, raw_n);
    size_t n = sbx_b64_encoded_len(raw_n);
    if (n == 0) continue;
    int hits = 1 + (int)(rnd() % 3);
    for (int h = 0; h < hits; h++) enc[rnd() % n] = junk[rnd() % (sizeof junk - 1)];
    enc[n] = '\0'; /* for strspn below */
    char msg[SBX_ERROR_MSG_MAX];
    int rc = decode_all(enc, n, msg, sizeof msg);
    /* The first byte outside the alphabet is the offence, unless it is '='
     * in the last two places, where it may be legal padding. */
    size_t first = strspn(enc, oracle_abc);
    if (first >= n - 2 && enc[first] == '=') continue;
    char want[48];
    snprintf(want, sizeof want, "at offset %zu", first);
    if (rc != SBX_E_PARSE || !strstr(msg, want)) fail_msg("first bad byte at %zu, rc %d, message '%s'", first, rc, msg);
  }
  /* Pure noise, mostly invalid, sometimes not. */
  for (int iter = 0; iter < 20000; iter++) {
    size_t n = (rnd() % 64) * 4;
    for (size_t i = 0; i < n; i++) enc[i] = rnd() % 4 ? oracle_abc[rnd() % 64] : (char)(rnd() >> 56);
    decode_all(enc, n, NULL, 0);
  }
}

/* A NULL err is allowed: the code alone comes back. */
static void test_null_err(void **state) {
  (void)state;
  uint8_t out[8];
  size_t outlen;
  for (size_t k = 0; k < n_impls; k++) {
    assert_int_equal(impls[k].dec(out, "Zm-v", 4, &outlen, NULL), SBX_E_PARSE);
    assert_int_equal(impls[k].dec(out, "Zm9", 3, &outlen, NULL), SBX_E_PARSE);
    assert_int_equal(impls[k].dec(out, "Zm9v", 4, &outlen, NULL), 0);
    assert_int_equal(outlen, 3);
  }
}

/* The programs map SBX_B64_SCALAR onto the dispatch (core/env.h); it is
 * checked in a fresh copy of this program acting as one (see main). */
static void test_env_forces_scalar(void **state) {
  (void)state;
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  assert_true(n > 0);
  self[n] = '\0';
  static const struct {
    const char *env;
    bool avx2_if_available;
  } runs[] = {{"SBX_B64_SCALAR=1", false}, {"SBX_B64_SCALAR=0", true}, {"SBX_B64_SCALAR=", true}};
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "env %s '%s' --print-b64-path", runs[i].env, self);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[64] = "";
    if (!fgets(out, sizeof out, p)) out[0] = '\0';
    assert_int_equal(pclose(p), 0);
    const char *want = runs[i].avx2_if_available && sbxi_b64_have_avx2() ? "avx2\n" : "scalar\n";
    if (strcmp(out, want) != 0) fail_msg("%s: path '%s', wanted '%s'", runs[i].env, out, want);
  }
}

/* The setter the programs call switches the dispatch in process, both ways,
 * and the output does not change. */
static void test_force_scalar_setter(void **state) {
  (void)state;
  char a[8], b[8];
  sbxi_b64_force_scalar(true);
  assert_string_equal(sbxi_b64_active(), "scalar");
  sbx_b64_encode(a, "hello", 5);
  sbxi_b64_force_scalar(false);
  assert_string_equal(sbxi_b64_active(), sbxi_b64_have_avx2() ? "avx2" : "scalar");
  sbx_b64_encode(b, "hello", 5);
  assert_memory_equal(a, "aGVsbG8=", 8);
  assert_memory_equal(b, "aGVsbG8=", 8);
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--print-b64-path") == 0) {
    sbxi_env_apply(NULL); /* as the programs do */
    printf("%s\n", sbxi_b64_active());
    return 0;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rfc4648_vectors),
      cmocka_unit_test(test_round_trip_small),
      cmocka_unit_test(test_round_trip_large),
      cmocka_unit_test(test_case_table),
      cmocka_unit_test(test_every_bad_byte_everywhere),
      cmocka_unit_test(test_trailing_bits),
      cmocka_unit_test(test_random_corruption_agrees),
      cmocka_unit_test(test_null_err),
      cmocka_unit_test(test_env_forces_scalar),
      cmocka_unit_test(test_force_scalar_setter),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
