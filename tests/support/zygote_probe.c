/* zygote_probe.c - the zygote finder (see zygote_probe.h). */
#include "zygote_probe.h"

pid_t zygote_pid(void) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  pid_t found = -1;
  int pid;
  while (found < 0 && fscanf(f, "%d", &pid) == 1) {
    char cp[64], cmd[256];
    snprintf(cp, sizeof cp, "/proc/%d/cmdline", pid);
    FILE *c = fopen(cp, "r");
    if (!c) continue;
    size_t n = fread(cmd, 1, sizeof cmd - 1, c);
    fclose(c);
    cmd[n] = '\0';
    /* argv[0] then argv[1]: the mode flag must be the second argument */
    if (strlen(cmd) + 1 < n && strcmp(cmd + strlen(cmd) + 1, "--zygote") == 0) found = pid;
  }
  fclose(f);
  return found;
}
