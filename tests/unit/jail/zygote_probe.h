/* zygote_probe.h - find the jail driver's zygote from outside, as an
 * operator would: the child of this process whose command line is
 * "silkd --zygote ...". Shared by test_jail_zygote and bench/jail. */
#ifndef SBX_TEST_ZYGOTE_PROBE_H
#define SBX_TEST_ZYGOTE_PROBE_H

#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* The zygote's pid; -1: none is running. */
static inline pid_t zygote_pid(void) {
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

#endif
