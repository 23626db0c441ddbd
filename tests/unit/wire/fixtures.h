/* Test helpers: read the fixture corpus and compare JSON by value. */
#ifndef SBX_TEST_FIXTURES_H
#define SBX_TEST_FIXTURES_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* Read a whole file; NULL if it cannot be read. */
static inline char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  size_t r;
  while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* Value equality as §9.2 defines it, via jansson as an independent parser. */
static inline int json_value_equal(const char *a, size_t alen, const char *b, size_t blen) {
  json_error_t je;
  json_t *x = json_loadb(a, alen, JSON_REJECT_DUPLICATES, &je);
  json_t *y = json_loadb(b, blen, JSON_REJECT_DUPLICATES, &je);
  int eq = x && y && json_equal(x, y);
  json_decref(x);
  json_decref(y);
  return eq;
}

#endif
