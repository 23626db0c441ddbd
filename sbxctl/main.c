/* sbxctl: placeholder main until its issue fills it in. */
#include <stdio.h>
#include <string.h>

#include <sandbox/sandbox.h>

static void usage(FILE *f) { fprintf(f, "usage: sbxctl [--version] [--help]\n"); }

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--version") == 0) {
      printf("sbxctl %s\n", sbx_version());
      return 0;
    }
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    }
    usage(stderr);
    return 2;
  }
  usage(stderr);
  return 2;
}
