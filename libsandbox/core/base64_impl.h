/* Internal entry points of the base64 codec, shared between the scalar and
 * AVX2 files and exposed to the unit tests so both paths can be compared on
 * any CPU that has AVX2. The sbxi_ prefix keeps them out of the shared
 * library's exports (libsandbox.map). */
#ifndef SBX_BASE64_IMPL_H
#define SBX_BASE64_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sandbox/core.h>

size_t sbxi_b64_encode_scalar(char *dst, const void *src, size_t n);
int sbxi_b64_decode_scalar(void *dst, const char *src, size_t n, size_t *out_len, sbx_error *err);

/* Scalar decode of src[i, n) into dst + o, where the caller has already
 * decoded src[0, i) into dst[0, o): the vector code hands its tail (and any
 * block it refused) here, so every error message, offsets included, comes
 * from one place. n is a multiple of 4 and so is i. */
int sbxi_b64_decode_resume(uint8_t *dst, const char *src, size_t n, size_t i, size_t o, size_t *out_len,
                           sbx_error *err);

/* The AVX2 versions; only call them when sbxi_b64_have_avx2() is true. */
size_t sbxi_b64_encode_avx2(char *dst, const void *src, size_t n);
int sbxi_b64_decode_avx2(void *dst, const char *src, size_t n, size_t *out_len, sbx_error *err);
bool sbxi_b64_have_avx2(void);

/* The path sbx_b64_encode/decode dispatch to, "avx2" or "scalar"; it is
 * chosen on first use. */
const char *sbxi_b64_active(void);
/* Use the scalar path even where AVX2 is available (to compare the two, or
 * to rule the vector path out); the programs set it from SBX_B64_SCALAR
 * (core/env.h). Call it before other threads use base64. */
void sbxi_b64_force_scalar(bool on);

#endif
