/* Internal: a validating JSON tokenizer for single frames.
 *
 * The whole line is checked against RFC 8259 plus the wire's extra rules
 * (UTF-8 strictly, no lone surrogates, no duplicate member names, bounded
 * nesting and token count) before any member is bound to a C field, so an
 * unknown member is ignored only if it is valid JSON. Tokens are a flat
 * array in document order; `next` skips a whole subtree.
 */
#ifndef SBX_WIRE_JSON_H
#define SBX_WIRE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sandbox/error.h>

enum { JT_OBJ, JT_ARR, JT_STR, JT_NUM, JT_TRUE, JT_FALSE, JT_NULL };

#define JTF_ESCAPED 1u /* string: contains backslash escapes */
#define JTF_NUL 2u     /* string: decodes to something holding U+0000 */
#define JTF_INT 4u     /* number: integer literal (no fraction, no exponent) */
#define JTF_NEG 8u     /* number: leading minus */

typedef struct jtok {
  uint8_t type;
  uint8_t flags;
  uint16_t unused;
  uint32_t start; /* string: first byte inside the quotes; else first byte */
  uint32_t len;   /* raw length (string: without quotes) */
  uint32_t next;  /* index of the first token after this subtree */
} jtok;

#define JSON_INLINE_TOKENS 64
#define JSON_MAX_TOKENS (1u << 21)

typedef struct jdoc {
  const char *src;
  size_t len;
  jtok *tok;
  uint32_t ntok;
  uint32_t cap;
  jtok inline_tok[JSON_INLINE_TOKENS];
} jdoc;

/* Tokenize a line holding exactly one JSON object. */
int sbxi_json_parse(jdoc *d, const char *src, size_t len, sbx_error *err);
void sbxi_json_release(jdoc *d);

/* Decoded length of a string token (no NUL added). */
size_t sbxi_json_str_len(const jdoc *d, const jtok *t);
/* Unescape a string token into dst (sbxi_json_str_len bytes). */
void sbxi_json_str_copy(const jdoc *d, const jtok *t, char *dst);
/* Compare a string token with a NUL-free C string of length n. */
bool sbxi_json_str_eq(const jdoc *d, const jtok *t, const char *s, size_t n);


#endif
