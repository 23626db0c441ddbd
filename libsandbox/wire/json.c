/* A validating JSON tokenizer for one frame (see json.h for the contract).
 * Recursion depth is bounded by SBX_WIRE_MAX_DEPTH and the token count by
 * JSON_MAX_TOKENS, so no input can exhaust the stack or grow memory past a
 * fixed multiple of the (already capped) frame length. */
#include <stdlib.h>
#include <string.h>

#include <sandbox/core.h>
#include <sandbox/wire.h>

#include "json.h"
#include "util/util.h"

typedef struct {
  jdoc *d;
  size_t pos;
  sbx_error *err;
} jparser;

static int fail(jparser *p, const char *what) {
  return sbx_err(p->err, SBX_E_PARSE, "%s at offset %zu", what, p->pos);
}

static inline void skip_ws(jparser *p) {
  const char *s = p->d->src;
  size_t n = p->d->len;
  while (p->pos < n && (s[p->pos] == ' ' || s[p->pos] == '\t' || s[p->pos] == '\n' || s[p->pos] == '\r')) p->pos++;
}

static int push_tok(jparser *p, uint8_t type, uint32_t *idx) {
  jdoc *d = p->d;
  if (d->ntok == d->cap) {
    if (d->cap >= JSON_MAX_TOKENS) return fail(p, "too many JSON values");
    uint32_t ncap = d->cap * 4;
    if (d->tok == d->inline_tok) {
      d->tok = sbx_reallocarray(NULL, ncap, sizeof(jtok));
      memcpy(d->tok, d->inline_tok, sizeof d->inline_tok);
    } else {
      d->tok = sbx_reallocarray(d->tok, ncap, sizeof(jtok));
    }
    d->cap = ncap;
  }
  *idx = d->ntok++;
  jtok *t = &d->tok[*idx];
  t->type = type;
  t->flags = 0;
  t->unused = 0;
  t->start = (uint32_t)p->pos;
  t->len = 0;
  t->next = *idx + 1;
  return 0;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int hex4(const char *s, size_t avail, unsigned *out) {
  if (avail < 4) return -1;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(s[i]);
    if (h < 0) return -1;
    v = v << 4 | (unsigned)h;
  }
  *out = v;
  return 0;
}


#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull
static inline bool word_is_plain(uint64_t v) {
  /* No '"', no '\\', no byte < 0x20, no byte >= 0x80 among 8 bytes. */
  uint64_t q = v ^ (ONES * '"');
  uint64_t b = v ^ (ONES * '\\');
  uint64_t special = ((q - ONES) & ~q) | ((b - ONES) & ~b) | ((v - ONES * 0x20) & ~v) | v;
  return (special & HIGHS) == 0;
}

static int parse_string(jparser *p, uint32_t idx) {
  jdoc *d = p->d;
  const unsigned char *s = (const unsigned char *)d->src;
  size_t n = d->len;
  size_t i = p->pos + 1; /* past the quote */
  uint8_t flags = 0;
  d->tok[idx].start = (uint32_t)i;
  for (;;) {
    while (i + 8 <= n) {
      uint64_t v;
      memcpy(&v, s + i, 8);
      if (!word_is_plain(v)) break;
      i += 8;
    }
    if (i >= n) {
      p->pos = i;
      return fail(p, "unterminated string");
    }
    unsigned c = s[i];
    if (c == '"') break;
    if (c == '\\') {
      flags |= JTF_ESCAPED;
      if (i + 1 >= n) {
        p->pos = i;
        return fail(p, "unterminated string");
      }
      char e = (char)s[i + 1];
      if (e == 'u') {
        unsigned cp;
        if (hex4((const char *)s + i + 2, n - i - 2, &cp) < 0) {
          p->pos = i;
          return fail(p, "bad \\u escape");
        }
        i += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          unsigned lo;
          if (i + 1 < n && s[i] == '\\' && s[i + 1] == 'u' && hex4((const char *)s + i + 2, n - i - 2, &lo) == 0 &&
              lo >= 0xDC00 && lo <= 0xDFFF) {
            i += 6;
          } else {
            p->pos = i;
            return fail(p, "lone surrogate in string");
          }
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          p->pos = i;
          return fail(p, "lone surrogate in string");
        } else if (cp == 0) {
          flags |= JTF_NUL;
        }
      } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
        i += 2;
      } else {
        p->pos = i;
        return fail(p, "bad escape in string");
      }
    } else if (c < 0x20) {
      p->pos = i;
      return fail(p, "control character in string");
    } else if (c >= 0x80) {
      size_t k = sbxi_utf8_seq(s + i, n - i);
      if (!k) {
        p->pos = i;
        return fail(p, "invalid UTF-8 in string");
      }
      i += k;
    } else {
      i++;
    }
  }
  d->tok[idx].len = (uint32_t)(i - d->tok[idx].start);
  d->tok[idx].flags = flags;
  p->pos = i + 1;
  return 0;
}

static int parse_number(jparser *p, uint32_t idx) {
  const char *s = p->d->src;
  size_t n = p->d->len, i = p->pos;
  uint8_t flags = JTF_INT;
  if (s[i] == '-') {
    flags |= JTF_NEG;
    i++;
  }
  if (i < n && s[i] == '0') {
    i++;
  } else if (i < n && s[i] >= '1' && s[i] <= '9') {
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
  } else {
    p->pos = i;
    return fail(p, "bad number");
  }
  if (i < n && s[i] == '.') {
    flags &= (uint8_t)~JTF_INT;
    i++;
    if (i >= n || s[i] < '0' || s[i] > '9') {
      p->pos = i;
      return fail(p, "bad number");
    }
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    flags &= (uint8_t)~JTF_INT;
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= n || s[i] < '0' || s[i] > '9') {
      p->pos = i;
      return fail(p, "bad number");
    }
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
  }
  p->d->tok[idx].len = (uint32_t)(i - p->pos);
  p->d->tok[idx].flags = flags;
  p->pos = i;
  return 0;
}

static size_t unescape(const char *src, size_t len, char *dst) {
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    char c = src[i];
    if (c != '\\') {
      if (dst) dst[o] = c;
      o++;
      i++;
      continue;
    }
    char e = src[i + 1];
    if (e != 'u') {
      char r = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
      if (dst) dst[o] = r;
      o++;
      i += 2;
      continue;
    }
    unsigned cp = 0;
    hex4(src + i + 2, 4, &cp);
    i += 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      unsigned lo = 0;
      hex4(src + i + 2, 4, &lo);
      i += 6;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    unsigned char b[4];
    size_t k;
    if (cp < 0x80) {
      b[0] = (unsigned char)cp;
      k = 1;
    } else if (cp < 0x800) {
      b[0] = (unsigned char)(0xC0 | cp >> 6);
      b[1] = (unsigned char)(0x80 | (cp & 0x3F));
      k = 2;
    } else if (cp < 0x10000) {
      b[0] = (unsigned char)(0xE0 | cp >> 12);
      b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
      b[2] = (unsigned char)(0x80 | (cp & 0x3F));
      k = 3;
    } else {
      b[0] = (unsigned char)(0xF0 | cp >> 18);
      b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
      b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
      b[3] = (unsigned char)(0x80 | (cp & 0x3F));
      k = 4;
    }
    if (dst) memcpy(dst + o, b, k);
    o += k;
  }
  return o;
}

size_t sbxi_json_str_len(const jdoc *d, const jtok *t) {
  if (!(t->flags & JTF_ESCAPED)) return t->len;
  return unescape(d->src + t->start, t->len, NULL);
}

void sbxi_json_str_copy(const jdoc *d, const jtok *t, char *dst) {
  if (!(t->flags & JTF_ESCAPED))
    memcpy(dst, d->src + t->start, t->len);
  else
    unescape(d->src + t->start, t->len, dst);
}

bool sbxi_json_str_eq(const jdoc *d, const jtok *t, const char *s, size_t n) {
  if (!(t->flags & JTF_ESCAPED)) return t->len == n && memcmp(d->src + t->start, s, n) == 0;
  if (sbxi_json_str_len(d, t) != n) return false;
  char stackbuf[256];
  char *tmp = n <= sizeof stackbuf ? stackbuf : sbx_malloc(n);
  sbxi_json_str_copy(d, t, tmp);
  bool eq = memcmp(tmp, s, n) == 0;
  if (tmp != stackbuf) sbx_free(tmp);
  return eq;
}

/* ---- duplicate member detection ---- */
typedef struct {
  const char *p;
  size_t n;
} keyspan;

static int keyspan_cmp(const void *a, const void *b) {
  const keyspan *x = a, *y = b;
  if (x->n != y->n) return x->n < y->n ? -1 : 1;
  return memcmp(x->p, y->p, x->n);
}

static int check_duplicates(jparser *p, uint32_t obj) {
  jdoc *d = p->d;
  uint32_t keys_small[16];
  size_t nkeys = 0;
  bool any_escaped = false;
  for (uint32_t i = obj + 1; i < d->tok[obj].next; i = d->tok[i + 1].next) {
    if (nkeys < 16) keys_small[nkeys] = i;
    nkeys++;
    if (d->tok[i].flags & JTF_ESCAPED) any_escaped = true;
  }
  if (nkeys < 2) return 0;
  if (nkeys <= 16 && !any_escaped) {
    for (size_t a = 0; a < nkeys; a++)
      for (size_t b = a + 1; b < nkeys; b++) {
        const jtok *x = &d->tok[keys_small[a]], *y = &d->tok[keys_small[b]];
        if (x->len == y->len && memcmp(d->src + x->start, d->src + y->start, x->len) == 0)
          return fail(p, "duplicate member name");
      }
    return 0;
  }
  /* General path: decode every key, sort, compare neighbours. */
  keyspan *spans = sbx_reallocarray(NULL, nkeys, sizeof *spans);
  size_t scratch_len = 0;
  for (uint32_t i = obj + 1; i < d->tok[obj].next; i = d->tok[i + 1].next)
    if (d->tok[i].flags & JTF_ESCAPED) scratch_len += sbxi_json_str_len(d, &d->tok[i]);
  char *scratch = scratch_len ? sbx_malloc(scratch_len) : NULL;
  size_t k = 0, so = 0;
  for (uint32_t i = obj + 1; i < d->tok[obj].next; i = d->tok[i + 1].next, k++) {
    const jtok *t = &d->tok[i];
    if (t->flags & JTF_ESCAPED) {
      size_t len = sbxi_json_str_len(d, t);
      sbxi_json_str_copy(d, t, scratch + so);
      spans[k] = (keyspan){scratch + so, len};
      so += len;
    } else {
      spans[k] = (keyspan){d->src + t->start, t->len};
    }
  }
  qsort(spans, nkeys, sizeof *spans, keyspan_cmp);
  int rc = 0;
  for (size_t a = 1; a < nkeys && rc == 0; a++)
    if (keyspan_cmp(&spans[a - 1], &spans[a]) == 0) rc = fail(p, "duplicate member name");
  sbx_free(spans);
  sbx_free(scratch);
  return rc;
}

static int parse_value(jparser *p, int depth);

static int parse_container(jparser *p, int depth, bool is_obj) {
  if (depth >= SBX_WIRE_MAX_DEPTH) return fail(p, "nesting too deep");
  uint32_t idx;
  int rc = push_tok(p, is_obj ? JT_OBJ : JT_ARR, &idx);
  if (rc < 0) return rc;
  const char *s = p->d->src;
  size_t n = p->d->len;
  char close = is_obj ? '}' : ']';
  p->pos++;
  skip_ws(p);
  if (p->pos < n && s[p->pos] == close) {
    p->pos++;
    p->d->tok[idx].next = p->d->ntok;
    return 0;
  }
  for (;;) {
    skip_ws(p);
    if (is_obj) {
      if (p->pos >= n || s[p->pos] != '"') return fail(p, "expected member name");
      uint32_t kidx;
      if ((rc = push_tok(p, JT_STR, &kidx)) < 0 || (rc = parse_string(p, kidx)) < 0) return rc;
      skip_ws(p);
      if (p->pos >= n || s[p->pos] != ':') return fail(p, "expected ':'");
      p->pos++;
    }
    if ((rc = parse_value(p, depth + 1)) < 0) return rc;
    skip_ws(p);
    if (p->pos < n && s[p->pos] == ',') {
      p->pos++;
      continue;
    }
    if (p->pos < n && s[p->pos] == close) {
      p->pos++;
      break;
    }
    return fail(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
  }
  p->d->tok[idx].next = p->d->ntok;
  return is_obj ? check_duplicates(p, idx) : 0;
}

static int parse_literal(jparser *p, uint8_t type, const char *word, size_t wlen) {
  if (p->d->len - p->pos < wlen || memcmp(p->d->src + p->pos, word, wlen) != 0) return fail(p, "unexpected character");
  uint32_t idx;
  int rc = push_tok(p, type, &idx);
  if (rc < 0) return rc;
  p->d->tok[idx].len = (uint32_t)wlen;
  p->pos += wlen;
  return 0;
}

static int parse_value(jparser *p, int depth) {
  skip_ws(p);
  if (p->pos >= p->d->len) return fail(p, "unexpected end of input");
  char c = p->d->src[p->pos];
  uint32_t idx;
  int rc;
  switch (c) {
  case '{': return parse_container(p, depth, true);
  case '[': return parse_container(p, depth, false);
  case '"':
    if ((rc = push_tok(p, JT_STR, &idx)) < 0) return rc;
    return parse_string(p, idx);
  case 't': return parse_literal(p, JT_TRUE, "true", 4);
  case 'f': return parse_literal(p, JT_FALSE, "false", 5);
  case 'n': return parse_literal(p, JT_NULL, "null", 4);
  default:
    if (c == '-' || (c >= '0' && c <= '9')) {
      if ((rc = push_tok(p, JT_NUM, &idx)) < 0) return rc;
      return parse_number(p, idx);
    }
    return fail(p, "unexpected character");
  }
}

int sbxi_json_parse(jdoc *d, const char *src, size_t len, sbx_error *err) {
  d->src = src;
  d->len = len;
  d->tok = d->inline_tok;
  d->ntok = 0;
  d->cap = JSON_INLINE_TOKENS;
  jparser p = {d, 0, err};
  if (len > SBX_WIRE_FRAME_CAP + 2) return sbx_err(err, SBX_E_TOOBIG, "frame of %zu bytes exceeds the cap", len);
  skip_ws(&p);
  if (p.pos >= len) return fail(&p, "empty frame");
  if (src[p.pos] != '{') return fail(&p, "frame is not a JSON object");
  int rc = parse_container(&p, 0, true);
  if (rc < 0) return rc;
  skip_ws(&p);
  if (p.pos != len) return fail(&p, "trailing data after the object");
  return 0;
}

void sbxi_json_release(jdoc *d) {
  if (d->tok && d->tok != d->inline_tok) sbx_free(d->tok);
  d->tok = NULL;
  d->ntok = 0;
}
