/* Helpers of the client tests: a real silkd on a Unix socket in a private
 * temporary directory, started and stopped per test group. */
#ifndef SBX_CLIENT_TEST_H
#define SBX_CLIENT_TEST_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/path.h"

typedef struct silkd_proc {
  pid_t pid;
  char dir[64];
  char sock[128];
  char addr[160]; /* "unix:<sock>" */
} silkd_proc;

static inline int sock_ready(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  int ok = sbxi_path_fmt(sun.sun_path, sizeof sun.sun_path, NULL, "%s", path) == 0 &&
           connect(fd, (struct sockaddr *)&sun, sizeof sun) == 0;
  close(fd);
  return ok;
}

static inline void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* Start silkd; dir is created unless it is set already (a restart). Fails
 * the whole program loudly when silkd cannot be started. */
static inline void silkd_start(silkd_proc *p) {
  if (!p->dir[0]) {
    snprintf(p->dir, sizeof p->dir, "/tmp/sbx-client-test-XXXXXX");
    if (!mkdtemp(p->dir)) {
      perror("mkdtemp");
      exit(1);
    }
    snprintf(p->sock, sizeof p->sock, "%s/silkd.sock", p->dir);
    snprintf(p->addr, sizeof p->addr, "unix:%s", p->sock);
  }
  unlink(p->sock);
  char listen[160], bin[512];
  snprintf(listen, sizeof listen, "unix:%s", p->sock);
  snprintf(bin, sizeof bin, "%s/silkd", SBX_BUILD_BIN_DIR);
  p->pid = fork();
  if (p->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a crashed test leaves no daemon behind */
    execl(bin, "silkd", "--listen", listen, "--log-level", "error", (char *)NULL);
    fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
    _exit(127);
  }
  for (;;) { /* readiness, not timing: wait until it listens or dies */
    if (sock_ready(p->sock)) return;
    int st;
    if (waitpid(p->pid, &st, WNOHANG) == p->pid) break;
    sleep_ms(20);
  }
  fprintf(stderr, "FATAL: silkd (%s) did not start listening on %s\n", bin, p->sock);
  exit(1);
}

static inline void silkd_stop(silkd_proc *p) {
  if (p->pid > 0) {
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
  }
}

static inline void silkd_cleanup(silkd_proc *p) {
  silkd_stop(p);
  if (p->dir[0]) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p->dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", p->dir);
    p->dir[0] = 0;
  }
}

#endif
