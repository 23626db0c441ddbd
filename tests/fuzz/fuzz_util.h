/* tests/fuzz/fuzz_util.h - what the harnesses share: a check that is a
 * finding when it fails, and a private temp dir made once per process. */
#ifndef SBX_FUZZ_UTIL_H
#define SBX_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A violated invariant aborts: libFuzzer keeps the input as a crash. */
#define FUZZ_CHECK(cond, ...)                                                \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "fuzz: check failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                   \
      abort();                                                               \
    }                                                                        \
  } while (0)

/* The harness's own directory under $TMPDIR (or /tmp), made on first use;
 * everything a harness writes stays beneath it. */
static inline const char *fuzz_tmpdir(void) {
  static char dir[4096];
  if (!dir[0]) {
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/sbx-fuzz-XXXXXX", t && *t ? t : "/tmp");
    FUZZ_CHECK(mkdtemp(dir) != NULL, "mkdtemp %s", dir);
  }
  return dir;
}

#endif
