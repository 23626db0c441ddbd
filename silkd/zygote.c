/* silkd --zygote fd:N: the jail driver's zygote.
 *
 * The driver starts this once; the loop itself is the driver's
 * (libsandbox/jailexec/zygote_serve.c: it builds each jail exactly as
 * the exec path does). Each child then lands here, in its finished jail, and
 * serves as a freshly exec'd silkd --listen fd:3 would. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jailexec/jailexec.h"
#include "zygote.h"

static char **zyg_argv;

static int zygote_child(void *arg) {
  /* /proc/1/cmdline as the exec path shows it: "--zygote" and "--listen"
   * have the same length, so the child rewrites its argv in place. */
  memcpy(zyg_argv[1], "--listen", 8);
  if (strlen(zyg_argv[2]) == 4) memcpy(zyg_argv[2], "fd:3", 4);
  static char a0[] = "silkd", a1[] = "--listen", a2[] = "fd:3";
  char *argv[] = {a0, a1, a2, NULL};
  return silkd_run(3, argv);
}

int silkd_zygote_main(int argc, char **argv) {
  if (argc != 3 || strncmp(argv[2], "fd:", 3) != 0) {
    fprintf(stderr, "usage: silkd --zygote fd:N\n");
    return 2;
  }
  char *end;
  long fd = strtol(argv[2] + 3, &end, 10);
  if (*end || fd < 0 || fd > 65535) {
    fprintf(stderr, "silkd: bad zygote fd %s\n", argv[2]);
    return 2;
  }
  zyg_argv = argv;
  int rc = sbxi_jail_zygote_serve((int)fd, zygote_child, NULL);
  if (rc < 0) {
    fprintf(stderr, "silkd: zygote: %s\n", strerror(-rc));
    return 1;
  }
  return 0;
}
