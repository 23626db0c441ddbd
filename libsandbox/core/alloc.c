/* The one allocation wrapper: abort on exhaustion (see core.h for why). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sandbox/core.h>
#include <sandbox/sandbox.h>

#include "cleanup.h"

static void __attribute__((noreturn)) oom(size_t n) {
  /* No allocation and no stdio buffering here: we are out of memory. */
  char msg[96];
  int len = snprintf(msg, sizeof msg, "libsandbox: out of memory allocating %zu bytes\n", n);
  if (len > 0) {
    ssize_t ignored = write(STDERR_FILENO, msg, (size_t)len);
    (void)ignored;
  }
  abort();
}

void *sbx_malloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) oom(n);
  return p;
}

void *sbx_calloc(size_t nmemb, size_t size) {
  void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
  if (!p) oom(nmemb * size);
  return p;
}

void *sbx_realloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) oom(n);
  return q;
}

void *sbx_reallocarray(void *p, size_t nmemb, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(nmemb, size, &total)) oom(SIZE_MAX);
  return sbx_realloc(p, total);
}

char *sbx_strdup(const char *s) { return sbx_strndup(s, strlen(s)); }

char *sbx_strndup(const char *s, size_t n) {
  size_t len = strnlen(s, n);
  char *p = sbx_malloc(len + 1);
  memcpy(p, s, len);
  p[len] = '\0';
  return p;
}

void sbx_free(void *p) { free(p); }

/* errno is kept: a cleanup runs as the scope returns, after the failing
 * call whose errno the caller is about to read. */
void sbxi_closep(int *fd) {
  if (fd && *fd >= 0) {
    int saved = errno;
    close(*fd);
    *fd = -1;
    errno = saved;
  }
}

uint64_t sbx_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The version compiled into the library (SBX_VERSION_* of the headers it
 * was built with), for callers that compare it with the headers they were
 * built against. */
const char *sbx_version(void) { return SBX_VERSION_STRING; }
unsigned sbx_version_num(void) { return SBX_VERSION_NUM; }
