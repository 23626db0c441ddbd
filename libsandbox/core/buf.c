/* Bounded dynamic buffer: grows geometrically, never past its cap, and
 * frees itself when an append would pass the cap (curl dynbuf semantics). */
#include <stdio.h>
#include <string.h>

#include <sandbox/core.h>

#define SBX_BUF_MIN_ALLOC 64

void sbx_buf_init(sbx_buf *b, size_t cap) {
  b->ptr = NULL;
  b->len = 0;
  b->alloc = 0;
  b->cap = cap;
}

void sbx_buf_free(sbx_buf *b) {
  sbx_free(b->ptr);
  b->ptr = NULL;
  b->len = 0;
  b->alloc = 0;
}

void sbx_buf_reset(sbx_buf *b) {
  b->len = 0;
  if (b->ptr) b->ptr[0] = '\0';
}

/* Ensure room for len + extra + NUL. */
static int grow(sbx_buf *b, size_t extra, sbx_error *err) {
  size_t need;
  if (__builtin_add_overflow(b->len, extra, &need) || need > b->cap) {
    size_t cap = b->cap;
    sbx_buf_free(b);
    return sbx_err(err, SBX_E_TOOBIG, "buffer cap of %zu bytes exceeded", cap);
  }
  if (need + 1 <= b->alloc) return 0;
  size_t a = b->alloc ? b->alloc : SBX_BUF_MIN_ALLOC;
  while (a < need + 1) a = a > SIZE_MAX / 2 ? need + 1 : a * 2;
  if (a > b->cap + 1) a = b->cap + 1;
  b->ptr = sbx_realloc(b->ptr, a);
  b->alloc = a;
  return 0;
}

int sbx_buf_add(sbx_buf *b, const void *data, size_t n, sbx_error *err) {
  int rc = grow(b, n, err);
  if (rc < 0) return rc;
  if (n) memcpy(b->ptr + b->len, data, n);
  b->len += n;
  b->ptr[b->len] = '\0';
  return 0;
}

int sbx_buf_addc(sbx_buf *b, char c, sbx_error *err) { return sbx_buf_add(b, &c, 1, err); }

int sbx_buf_adds(sbx_buf *b, const char *s, sbx_error *err) { return sbx_buf_add(b, s, strlen(s), err); }

int sbx_buf_printf(sbx_buf *b, sbx_error *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return sbx_err(err, SBX_E_INVAL, "bad format");
  int rc = grow(b, (size_t)n, err);
  if (rc < 0) return rc;
  va_start(ap, fmt);
  vsnprintf(b->ptr + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return 0;
}

int sbx_buf_reserve(sbx_buf *b, size_t n, char **where, sbx_error *err) {
  int rc = grow(b, n, err);
  if (rc < 0) return rc;
  *where = b->ptr + b->len;
  return 0;
}

void sbx_buf_commit(sbx_buf *b, size_t n) {
  b->len += n;
  b->ptr[b->len] = '\0';
}

char *sbx_buf_steal(sbx_buf *b, size_t *len) {
  char *p = b->ptr;
  if (len) *len = b->len;
  if (!p) p = sbx_strdup("");
  b->ptr = NULL;
  b->len = 0;
  b->alloc = 0;
  return p;
}
