/* tests/fuzz/fuzz_util.h - what the harnesses share: a check that is a
 * finding when it fails, and a private temp dir made once per process. */
#ifndef SBX_FUZZ_UTIL_H
#define SBX_FUZZ_UTIL_H

#include <ftw.h>
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

static char fuzz_tmpdir_path[4096];

static inline int fuzz_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  return remove(p);
}

static inline void fuzz_tmpdir_remove(void) {
  nftw(fuzz_tmpdir_path, fuzz_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* The harness's own directory under $TMPDIR (or /tmp), made on first use
 * and removed at exit; everything a harness writes stays beneath it. */
static inline const char *fuzz_tmpdir(void) {
  if (!fuzz_tmpdir_path[0]) {
    const char *t = getenv("TMPDIR");
    snprintf(fuzz_tmpdir_path, sizeof fuzz_tmpdir_path, "%s/sbx-fuzz-XXXXXX", t && *t ? t : "/tmp");
    FUZZ_CHECK(mkdtemp(fuzz_tmpdir_path) != NULL, "mkdtemp %s", fuzz_tmpdir_path);
    atexit(fuzz_tmpdir_remove);
  }
  return fuzz_tmpdir_path;
}

#endif
