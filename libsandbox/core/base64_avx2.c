/* AVX2 base64 after Muła and Lemire ("Faster Base64 Encoding and Decoding
 * using AVX2 Instructions", 2018): 24 bytes <-> 32 characters per step,
 * translation and validation with pshufb lookups, bit packing with
 * multiplies. Only these functions carry target("avx2"), so the library
 * still runs on CPUs without it; base64.c calls them only after
 * sbxi_b64_have_avx2(). Tails, padding and errors go to the scalar code. */
#include <string.h>

#include <sandbox/core.h>

#include "base64_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

bool sbxi_b64_have_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

/* 12 input bytes per 128-bit lane -> 16 6-bit indices, one per byte. */
static inline AVX2 __m256i enc_reshuffle(__m256i in) {
  /* Each 32-bit slot gets bytes [b1 b0 b2 b1] of its 3-byte group, so the
   * four 6-bit fields sit where the multiplies below can shift them. */
  in = _mm256_shuffle_epi8(in, _mm256_setr_epi8(1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10, 1, 0, 2, 1, 4, 3,
                                                5, 4, 7, 6, 8, 7, 10, 9, 11, 10));
  __m256i t0 = _mm256_and_si256(in, _mm256_set1_epi32(0x0fc0fc00));
  __m256i t1 = _mm256_mulhi_epu16(t0, _mm256_set1_epi32(0x04000040));
  __m256i t2 = _mm256_and_si256(in, _mm256_set1_epi32(0x003f03f0));
  __m256i t3 = _mm256_mullo_epi16(t2, _mm256_set1_epi32(0x01000010));
  return _mm256_or_si256(t1, t3);
}

/* Index 0..63 -> ASCII: one pshufb picks the offset of the index's range
 * (A-Z, a-z, 0-9, '+', '/'). */
static inline AVX2 __m256i enc_translate(__m256i idx) {
  const __m256i lut = _mm256_setr_epi8(65, 71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 0, 0, 65, 71, -4, -4,
                                       -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 0, 0);
  __m256i r = _mm256_subs_epu8(idx, _mm256_set1_epi8(51));
  __m256i upper = _mm256_cmpgt_epi8(idx, _mm256_set1_epi8(25));
  r = _mm256_sub_epi8(r, upper);
  return _mm256_add_epi8(idx, _mm256_shuffle_epi8(lut, r));
}

AVX2 size_t sbxi_b64_encode_avx2(char *dst, const void *src, size_t n) {
  const uint8_t *s = src;
  size_t i = 0, o = 0;
  /* Two 16-byte loads per step (at i and i + 12) put 12 bytes in each lane
   * without reading before src or past src + n. */
  for (; n - i >= 28; i += 24, o += 32) {
    __m128i lo = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i hi = _mm_loadu_si128((const __m128i *)(s + i + 12));
    __m256i in = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    _mm256_storeu_si256((__m256i *)(dst + o), enc_translate(enc_reshuffle(in)));
  }
  return o + sbxi_b64_encode_scalar(dst + o, s + i, n - i);
}

/* 32 sextets (one per byte) -> 24 bytes in the low 24 of the register. */
static inline AVX2 __m256i dec_pack(__m256i v) {
  __m256i ab_bc = _mm256_maddubs_epi16(v, _mm256_set1_epi32(0x01400140));
  __m256i abcd = _mm256_madd_epi16(ab_bc, _mm256_set1_epi32(0x00011000));
  abcd = _mm256_shuffle_epi8(abcd, _mm256_setr_epi8(2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1, 2, 1, 0, 6,
                                                    5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1));
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 1, 2, 4, 5, 6, -1, -1));
}

AVX2 int sbxi_b64_decode_avx2(void *dst, const char *src, size_t n, size_t *out_len, sbx_error *err) {
  if (n % 4) return sbxi_b64_decode_scalar(dst, src, n, out_len, err);
  uint8_t *d = dst;
  /* Bit k of lut_lo[low nibble] & lut_hi[high nibble] is set iff the byte
   * is outside the alphabet ('=', '-', '_', controls and bytes >= 0x80
   * included); roll maps each valid range onto its sextet values. */
  const __m256i lut_lo = _mm256_setr_epi8(0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x13, 0x1a, 0x1b,
                                          0x1b, 0x1b, 0x1a, 0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
                                          0x13, 0x1a, 0x1b, 0x1b, 0x1b, 0x1a);
  const __m256i lut_hi = _mm256_setr_epi8(0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08, 0x10, 0x10, 0x10, 0x10, 0x10,
                                          0x10, 0x10, 0x10, 0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08, 0x10, 0x10,
                                          0x10, 0x10, 0x10, 0x10, 0x10, 0x10);
  const __m256i lut_roll = _mm256_setr_epi8(0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 19, 4,
                                            -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m256i mask_2f = _mm256_set1_epi8(0x2f);
  size_t i = 0, o = 0;
  /* Stop 48 characters short: the final quad (maybe padded) is left to the
   * scalar code, and each 32-byte store (24 useful) then stays within the
   * n / 4 * 3 bytes dst is guaranteed to hold. */
  for (; n - i >= 48; i += 32, o += 24) {
    __m256i in = _mm256_loadu_si256((const __m256i *)(src + i));
    __m256i hi_nib = _mm256_and_si256(_mm256_srli_epi32(in, 4), mask_2f);
    __m256i lo_nib = _mm256_and_si256(in, mask_2f);
    __m256i lo = _mm256_shuffle_epi8(lut_lo, lo_nib);
    __m256i hi = _mm256_shuffle_epi8(lut_hi, hi_nib);
    if (!_mm256_testz_si256(lo, hi)) break; /* the scalar code names the byte */
    __m256i eq_2f = _mm256_cmpeq_epi8(in, mask_2f);
    __m256i roll = _mm256_shuffle_epi8(lut_roll, _mm256_add_epi8(eq_2f, hi_nib));
    _mm256_storeu_si256((__m256i *)(d + o), dec_pack(_mm256_add_epi8(in, roll)));
  }
  return sbxi_b64_decode_resume(d, src, n, i, o, out_len, err);
}

#else /* no x86: the scalar code is all there is */

bool sbxi_b64_have_avx2(void) { return false; }

size_t sbxi_b64_encode_avx2(char *dst, const void *src, size_t n) { return sbxi_b64_encode_scalar(dst, src, n); }

int sbxi_b64_decode_avx2(void *dst, const char *src, size_t n, size_t *out_len, sbx_error *err) {
  return sbxi_b64_decode_scalar(dst, src, n, out_len, err);
}

#endif
