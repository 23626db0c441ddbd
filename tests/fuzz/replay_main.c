/* tests/fuzz/replay_main.c - run files through LLVMFuzzerTestOneInput
 * without libFuzzer (any compiler), for the ctest replay tests and for
 * reproducing a crash file:  fuzz_<name>_replay [FILE|DIR]... [--raw FILE|DIR...]
 * A file after --raw is a fuzzer input as is, as crash files, the seed
 * corpora and tests/fuzz/regressions/ are. A file named before --raw is fed
 * after each of the 16 values of a leading control byte (fuzz_wire reads
 * the wire fixtures so, in every chunking mode and reader cap). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path, int raw) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); return -1; }
  uint8_t *buf = NULL;
  size_t len = 0, alloc = 0;
  for (;;) {
    if (alloc - len < 65536) {
      alloc = alloc ? alloc * 2 : 65536;
      buf = realloc(buf, alloc + 1);
      if (!buf) abort();
    }
    size_t n = fread(buf + 1 + len, 1, alloc - len, f);
    len += n;
    if (n == 0) break;
  }
  fclose(f);
  if (raw) {
    LLVMFuzzerTestOneInput(buf + 1, len); /* the file is a fuzzer input as is */
  } else {
    for (int c = 0; c < 16; c++) {
      buf[0] = (uint8_t)c;
      LLVMFuzzerTestOneInput(buf, len + 1);
    }
  }
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0, raw = 0, bad = 0, raw_files = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--raw") == 0) { raw = 1; continue; }
    struct stat st;
    if (stat(argv[i], &st) != 0) { perror(argv[i]); bad++; continue; }
    if (S_ISDIR(st.st_mode)) {
      DIR *d = opendir(argv[i]);
      struct dirent *e;
      while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
        if (run_file(p, raw) == 0) files++, raw_files += raw; else bad++;
      }
      if (d) closedir(d);
    } else {
      if (run_file(argv[i], raw) == 0) files++, raw_files += raw; else bad++;
    }
  }
  printf("%s: %d files replayed (%d x 16 control bytes, %d raw)\n", basename(argv[0]), files, files - raw_files, raw_files);
  return bad || files == 0 ? 1 : 0;
}
