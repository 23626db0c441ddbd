/* What a user checks after killing an exec: which processes of its tree
 * still run. Every exec leads its own process group (its pid), so the tree
 * is the group; silkd runs on this host in the tests, so its pids are ours
 * to read in /proc. */
#ifndef SBX_TEST_PROC_TREE_H
#define SBX_TEST_PROC_TREE_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Live (not zombie) processes whose process group is pgid; with comm, only
 * those running that command. */
static inline int pgrp_live(pid_t pgid, const char *comm) {
  int n = 0;
  DIR *d = opendir("/proc");
  if (!d) return -1;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
    char path[300], buf[1024] = {0};
    snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    char *lp = strchr(buf, '('), *rp = strrchr(buf, ')');
    if (!k || !lp || !rp) continue;
    char state;
    int ppid, pgrp;
    if (sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) != 3) continue;
    if (pgrp != pgid || state == 'Z' || state == 'X') continue;
    if (comm && ((size_t)(rp - lp - 1) != strlen(comm) || strncmp(lp + 1, comm, strlen(comm)) != 0)) continue;
    n++;
  }
  closedir(d);
  return n;
}

/* Poll until the group has `want` processes running comm, and return the
 * count seen last. The 60 s bound is not a speed check: a SIGKILLed process
 * is gone in milliseconds; it only turns a surviving process into a failure
 * that says so, instead of the test's timeout. */
static inline int pgrp_settle(pid_t pgid, const char *comm, int want) {
  int n = pgrp_live(pgid, comm);
  for (int i = 0; i < 6000 && n != want; i++) {
    usleep(10000);
    n = pgrp_live(pgid, comm);
  }
  return n;
}

#endif
