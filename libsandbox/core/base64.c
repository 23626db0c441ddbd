/* Base64, RFC 4648 standard alphabet with '=' padding, decoded strictly
 * (silkd wire spec §1.7). Bulk frames carry nearly every byte on the wire
 * as base64, so both directions are table driven here and vectorised in
 * base64_avx2.c; the variant is chosen once, at the first call. The scalar
 * decoder is the single source of error messages: the vector code hands it
 * any block it refuses, so both paths report the same offset. */
#include <stdlib.h>
#include <string.h>

#include <sandbox/core.h>

#include "base64_impl.h"

/* ---- tables, built by the compiler ----
 * The decode tables place each character's bits at their final position in
 * the 3 output bytes, so a quad decodes to the OR of four lookups, stored as
 * one 32-bit word. An invalid character sets a bit in the fourth byte, so a
 * single test per quad validates all four. */
#define B64_VAL(c)                                                                                 \
  ((c) >= 'A' && (c) <= 'Z'   ? (c) - 'A'                                                          \
   : (c) >= 'a' && (c) <= 'z' ? (c) - 'a' + 26                                                     \
   : (c) >= '0' && (c) <= '9' ? (c) - '0' + 52                                                     \
   : (c) == '+'               ? 62                                                                 \
   : (c) == '/'               ? 63                                                                 \
                              : -1)
#define B64_CHR(v)                                                                                 \
  ((v) + ((v) < 26 ? 'A' : (v) < 52 ? 'a' - 26 : (v) < 62 ? '0' - 52 : (v) == 62 ? '+' - 62 : '/' - 63))

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define BYTE_AT(v, k) ((uint32_t)(v) << (8 * (k)))
#else
#define BYTE_AT(v, k) ((uint32_t)(v) << (24 - 8 * (k)))
#endif
#define BAD BYTE_AT(1, 3)

/* V6 masks the -1 of an invalid character, whose value is never used, so
 * that no compiler sees a negative shift in the unused branch. */
#define V6(c) (B64_VAL(c) & 63)
#define D0(c) (B64_VAL(c) < 0 ? BAD : BYTE_AT(V6(c) << 2, 0))
#define D1(c) (B64_VAL(c) < 0 ? BAD : BYTE_AT(V6(c) >> 4, 0) | BYTE_AT((V6(c) & 15) << 4, 1))
#define D2(c) (B64_VAL(c) < 0 ? BAD : BYTE_AT(V6(c) >> 2, 1) | BYTE_AT((V6(c) & 3) << 6, 2))
#define D3(c) (B64_VAL(c) < 0 ? BAD : BYTE_AT(V6(c), 2))
/* Two output characters for 12 input bits, in memory order. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define E12(i) ((uint16_t)(B64_CHR((i) >> 6) | B64_CHR((i) & 63) << 8))
#else
#define E12(i) ((uint16_t)(B64_CHR((i) >> 6) << 8 | B64_CHR((i) & 63)))
#endif

#define T4(F, b) F((b)), F((b) + 1), F((b) + 2), F((b) + 3)
#define T16(F, b) T4(F, b), T4(F, (b) + 4), T4(F, (b) + 8), T4(F, (b) + 12)
#define T64(F, b) T16(F, b), T16(F, (b) + 16), T16(F, (b) + 32), T16(F, (b) + 48)
#define T256(F, b) T64(F, b), T64(F, (b) + 64), T64(F, (b) + 128), T64(F, (b) + 192)
#define T1024(F, b) T256(F, b), T256(F, (b) + 256), T256(F, (b) + 512), T256(F, (b) + 768)

static const uint32_t dec0[256] = {T256(D0, 0)};
static const uint32_t dec1[256] = {T256(D1, 0)};
static const uint32_t dec2[256] = {T256(D2, 0)};
static const uint32_t dec3[256] = {T256(D3, 0)};
#define VAL8(c) ((int8_t)B64_VAL(c))
static const int8_t val[256] = {T256(VAL8, 0)};
static const uint16_t enc12[4096] = {T1024(E12, 0), T1024(E12, 1024), T1024(E12, 2048), T1024(E12, 3072)};
static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* ---- encode ---- */
static inline uint64_t load_be64(const uint8_t *p) {
  uint64_t w;
  memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  w = __builtin_bswap64(w);
#endif
  return w;
}

static inline void put12(char *d, unsigned bits) { memcpy(d, &enc12[bits], 2); }

size_t sbxi_b64_encode_scalar(char *dst, const void *src, size_t n) {
  const uint8_t *s = src;
  size_t i = 0, o = 0;
  /* An 8-byte load yields two 3-byte groups; the last two bytes are read
   * again by the next round. */
  for (; n - i >= 8; i += 6, o += 8) {
    uint64_t w = load_be64(s + i);
    put12(dst + o, (unsigned)(w >> 52));
    put12(dst + o + 2, (unsigned)(w >> 40) & 0xfff);
    put12(dst + o + 4, (unsigned)(w >> 28) & 0xfff);
    put12(dst + o + 6, (unsigned)(w >> 16) & 0xfff);
  }
  for (; n - i >= 3; i += 3, o += 4) {
    unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 | s[i + 2];
    put12(dst + o, v >> 12);
    put12(dst + o + 2, v & 0xfff);
  }
  if (n - i == 1) {
    dst[o] = alphabet[s[i] >> 2];
    dst[o + 1] = alphabet[(s[i] & 3) << 4];
    dst[o + 2] = '=';
    dst[o + 3] = '=';
    o += 4;
  } else if (n - i == 2) {
    dst[o] = alphabet[s[i] >> 2];
    dst[o + 1] = alphabet[(s[i] & 3) << 4 | s[i + 1] >> 4];
    dst[o + 2] = alphabet[(s[i + 1] & 15) << 2];
    dst[o + 3] = '=';
    o += 4;
  }
  return o;
}

/* ---- decode ---- */
static int bad_byte(const uint8_t *s, size_t at, sbx_error *err) {
  if (s[at] == '=') return sbx_err(err, SBX_E_PARSE, "invalid base64: padding '=' at offset %zu is not at the end", at);
  if (s[at] >= 0x20 && s[at] < 0x7f)
    return sbx_err(err, SBX_E_PARSE, "invalid base64: character '%c' (0x%02x) at offset %zu", s[at], s[at], at);
  return sbx_err(err, SBX_E_PARSE, "invalid base64: byte 0x%02x at offset %zu", s[at], at);
}

/* A quad that failed the table check: name its first offending byte. */
static int quad_error(const uint8_t *s, size_t i, sbx_error *err) {
  size_t j = i;
  while (j < i + 3 && val[s[j]] >= 0) j++;
  return bad_byte(s, j, err);
}

static int trailing_bits(size_t at, sbx_error *err) {
  return sbx_err(err, SBX_E_PARSE, "invalid base64: non-zero trailing bits at offset %zu", at);
}

/* The last quad: the only place '=' may appear ("xy==" or "xyz="). */
static int decode_final(uint8_t *d, const uint8_t *s, size_t i, size_t o, size_t *out_len, sbx_error *err) {
  int a = val[s[i]], b = val[s[i + 1]], c = val[s[i + 2]], e = val[s[i + 3]];
  if (a < 0) return bad_byte(s, i, err);
  if (b < 0) return bad_byte(s, i + 1, err);
  d[o++] = (uint8_t)(a << 2 | b >> 4);
  if (s[i + 2] == '=') {
    if (s[i + 3] != '=') return bad_byte(s, i + 2, err);
    if (b & 15) return trailing_bits(i + 1, err);
  } else if (c < 0) {
    return bad_byte(s, i + 2, err);
  } else if (s[i + 3] == '=') {
    if (c & 3) return trailing_bits(i + 2, err);
    d[o++] = (uint8_t)(b << 4 | c >> 2);
  } else if (e < 0) {
    return bad_byte(s, i + 3, err);
  } else {
    d[o++] = (uint8_t)(b << 4 | c >> 2);
    d[o++] = (uint8_t)(c << 6 | e);
  }
  *out_len = o;
  return 0;
}

static inline uint32_t quad(const uint8_t *s) { return dec0[s[0]] | dec1[s[1]] | dec2[s[2]] | dec3[s[3]]; }

int sbxi_b64_decode_resume(uint8_t *d, const char *src, size_t n, size_t i, size_t o, size_t *out_len,
                           sbx_error *err) {
  const uint8_t *s = (const uint8_t *)src;
  if (i >= n) {
    *out_len = o;
    return 0;
  }
  size_t last = n - 4;
  /* Each quad is stored as 4 bytes, one past its 3; the next quad overwrites
   * it, and the final quad (stored byte by byte) always follows, so no
   * store passes dst's n / 4 * 3 bytes. */
  for (; last - i >= 8; i += 8, o += 6) {
    uint32_t x = quad(s + i), y = quad(s + i + 4);
    if ((x | y) & BAD) break;
    memcpy(d + o, &x, 4);
    memcpy(d + o + 3, &y, 4);
  }
  for (; i < last; i += 4, o += 3) {
    uint32_t x = quad(s + i);
    if (x & BAD) return quad_error(s, i, err);
    memcpy(d + o, &x, 4);
  }
  return decode_final(d, s, i, o, out_len, err);
}

int sbxi_b64_decode_scalar(void *dst, const char *src, size_t n, size_t *out_len, sbx_error *err) {
  if (n % 4)
    return sbx_err(err, SBX_E_PARSE,
                   "invalid base64: length %zu is not a multiple of 4 (incomplete group at offset %zu)", n,
                   n - n % 4);
  return sbxi_b64_decode_resume(dst, src, n, 0, 0, out_len, err);
}

/* ---- dispatch ---- */
typedef size_t (*encode_fn)(char *, const void *, size_t);
typedef int (*decode_fn)(void *, const char *, size_t, size_t *, sbx_error *);

static encode_fn encode_impl;
static decode_fn decode_impl;

static bool force_scalar;

void sbxi_b64_force_scalar(bool on) {
  __atomic_store_n(&force_scalar, on, __ATOMIC_RELAXED);
  __atomic_store_n(&encode_impl, NULL, __ATOMIC_RELAXED); /* the next call picks again */
  __atomic_store_n(&decode_impl, NULL, __ATOMIC_RELAXED);
}

/* Racing first calls compute the same answer, so relaxed atomics suffice. */
static encode_fn pick(decode_fn *dec) {
  bool avx2 = !__atomic_load_n(&force_scalar, __ATOMIC_RELAXED) && sbxi_b64_have_avx2();
  encode_fn enc = avx2 ? sbxi_b64_encode_avx2 : sbxi_b64_encode_scalar;
  *dec = avx2 ? sbxi_b64_decode_avx2 : sbxi_b64_decode_scalar;
  __atomic_store_n(&decode_impl, *dec, __ATOMIC_RELAXED);
  __atomic_store_n(&encode_impl, enc, __ATOMIC_RELAXED);
  return enc;
}

size_t sbx_b64_encode(char *dst, const void *src, size_t n) {
  encode_fn f = __atomic_load_n(&encode_impl, __ATOMIC_RELAXED);
  decode_fn unused;
  if (!f) f = pick(&unused);
  return f(dst, src, n);
}

int sbx_b64_decode(void *dst, const char *src, size_t n, size_t *out_len, sbx_error *err) {
  decode_fn f = __atomic_load_n(&decode_impl, __ATOMIC_RELAXED);
  if (!f) pick(&f);
  return f(dst, src, n, out_len, err);
}

const char *sbxi_b64_active(void) {
  decode_fn f = __atomic_load_n(&decode_impl, __ATOMIC_RELAXED);
  if (!f) pick(&f);
  return f == sbxi_b64_decode_avx2 ? "avx2" : "scalar";
}
