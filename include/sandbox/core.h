/* sandbox/core.h - allocation, bounded buffers, logging, base64, time. */
#ifndef SANDBOX_CORE_H
#define SANDBOX_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sandbox/error.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the one allocation wrapper ----
 * Out-of-memory aborts with a message (as crun's xmalloc): under Linux
 * overcommit a NULL from malloc means the process is already lost, and
 * aborting keeps every caller free of an untestable error path. Caps on
 * untrusted sizes are enforced before allocating (see sbx_buf). */
void *sbx_malloc(size_t n);
void *sbx_calloc(size_t nmemb, size_t size);
void *sbx_realloc(void *p, size_t n);
void *sbx_reallocarray(void *p, size_t nmemb, size_t size);
char *sbx_strdup(const char *s);
char *sbx_strndup(const char *s, size_t n);
void sbx_free(void *p);

/* ---- bounded dynamic buffer (as curl's dynbuf) ----
 * Grows geometrically up to a hard cap. An append that would pass the cap
 * frees the buffer and fails with SBX_E_TOOBIG, so a failed buffer never
 * holds half an answer. The content is always NUL-terminated. */
typedef struct sbx_buf {
  char *ptr;
  size_t len;
  size_t alloc;
  size_t cap; /* hard limit on len */
} sbx_buf;

#define SBX_BUF_INIT(capacity) {NULL, 0, 0, (capacity)}

void sbx_buf_init(sbx_buf *b, size_t cap);
void sbx_buf_free(sbx_buf *b);
void sbx_buf_reset(sbx_buf *b); /* len = 0, memory kept */
int sbx_buf_add(sbx_buf *b, const void *data, size_t n, sbx_error *err);
int sbx_buf_addc(sbx_buf *b, char c, sbx_error *err);
int sbx_buf_adds(sbx_buf *b, const char *s, sbx_error *err);
int sbx_buf_printf(sbx_buf *b, sbx_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Make room for n more bytes and return where to write them; the caller
 * then calls sbx_buf_commit with what it wrote (<= n). */
int sbx_buf_reserve(sbx_buf *b, size_t n, char **where, sbx_error *err);
void sbx_buf_commit(sbx_buf *b, size_t n);
/* Hand the content over to the caller (who frees it with sbx_free). */
char *sbx_buf_steal(sbx_buf *b, size_t *len);

/* ---- logging: leveled, to stderr, plain text or JSON lines ---- */
typedef enum sbx_log_level {
  SBX_LOG_ERROR = 0,
  SBX_LOG_WARN = 1,
  SBX_LOG_INFO = 2,
  SBX_LOG_DEBUG = 3,
} sbx_log_level;

typedef enum sbx_log_format { SBX_LOG_PLAIN = 0, SBX_LOG_JSON = 1 } sbx_log_format;

void sbx_log_setup(const char *component, sbx_log_level level, sbx_log_format fmt);
void sbx_log_set_level(sbx_log_level level);
sbx_log_level sbx_log_get_level(void);
/* Parses "error|warn|info|debug"; returns -1 if unknown. */
int sbx_log_level_parse(const char *s);
void sbx_log(sbx_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbx_log_fd(int fd); /* where lines go; stderr by default */
/* Sets the format alone (a config file read after sbx_log_setup). */
void sbx_log_set_format(sbx_log_format fmt);

/* A line with structured fields: members of the JSON object in the JSON
 * format, " key=value" after the message in plain text. A field with str
 * NULL is the number num. */
typedef struct sbx_log_field {
  const char *key;
  const char *str;
  double num;
} sbx_log_field;
#define SBX_LOG_STR(k, v) ((sbx_log_field){(k), (v), 0})
#define SBX_LOG_NUM(k, v) ((sbx_log_field){(k), NULL, (double)(v)})
void sbx_log_fields(sbx_log_level level, const sbx_log_field *fields, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define sbx_error_log(...) sbx_log(SBX_LOG_ERROR, __VA_ARGS__)
#define sbx_warn(...) sbx_log(SBX_LOG_WARN, __VA_ARGS__)
#define sbx_info(...) sbx_log(SBX_LOG_INFO, __VA_ARGS__)
#define sbx_debug(...)                                                  \
  do {                                                                  \
    if (sbx_log_get_level() >= SBX_LOG_DEBUG) sbx_log(SBX_LOG_DEBUG, __VA_ARGS__); \
  } while (0)

/* ---- base64: RFC 4648 standard alphabet, '=' padding, strict ---- */
static inline size_t sbx_b64_encoded_len(size_t n) { return (n + 2) / 3 * 4; }
/* An upper bound; the exact size depends on the padding. */
static inline size_t sbx_b64_decoded_max(size_t n) { return n / 4 * 3; }

/* Writes exactly sbx_b64_encoded_len(n) bytes (no NUL). */
size_t sbx_b64_encode(char *dst, const void *src, size_t n);
/* Strict decode: the length must be a multiple of 4, only the standard
 * alphabet, '=' only as final padding, no whitespace, zero trailing bits.
 * dst must hold sbx_b64_decoded_max(n) bytes. Returns 0 and sets *out_len,
 * or SBX_E_PARSE with a message naming the offending offset. */
int sbx_b64_decode(void *dst, const char *src, size_t n, size_t *out_len, sbx_error *err);

/* Monotonic time in nanoseconds. */
uint64_t sbx_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif
