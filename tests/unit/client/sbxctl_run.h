/* Run the sbxctl remote commands in a child process, as the binary would,
 * with the test's stdin bytes and capturing stdout and stderr. The sources
 * are compiled in, so the tests do not depend on how sbxctl/main.c
 * dispatches to them. */
#ifndef SBX_SBXCTL_RUN_H
#define SBX_SBXCTL_RUN_H

#include <poll.h>
#include <pty.h>

#include "../../../sbxctl/cmd_exec.c"
#include "../../../sbxctl/cmd_completion.c"
#include "../../../sbxctl/cmd_fs.c"
#include "../../../sbxctl/cmd_search.c"
#include "../../../sbxctl/cmd_git.c"
#include "../../../sbxctl/cmd_sandbox.c"
#include "../../../sbxctl/cmd_lifecycle.c"
#include "../../../sbxctl/cmd_shell.c"
#include "../../../sbxctl/cmd_portfwd.c"
#include "../../../sbxctl/remote.c"
#include "../../../sbxctl/remote_state.c"

typedef struct run_result {
  int status; /* exit code, or 128 + signal */
  sbx_buf out, err;
} run_result;

static inline void run_result_free(run_result *r) {
  sbx_buf_free(&r->out);
  sbx_buf_free(&r->err);
}

/* argv without "sbxctl"; in = NULL gives an empty stdin. on_spawn (if set)
 * is called with the child pid and its stdout so far each time output
 * arrives, e.g. to send it a signal. */
static inline int run_sbxctl(const char *const *args, const char *in, run_result *r,
                             void (*on_output)(pid_t pid, const sbx_buf *out, void *ud), void *ud) {
  int pin[2], pout[2], perr[2];
  if (pipe(pin) || pipe(pout) || pipe(perr)) return -1;
  sbx_buf_init(&r->out, 256 << 20);
  sbx_buf_init(&r->err, 1 << 20);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pin[0], 0);
    dup2(pout[1], 1);
    dup2(perr[1], 2);
    for (int fd = 3; fd < 64; fd++) close(fd);
    char *argv[64];
    int n = 0;
    argv[n++] = "sbxctl";
    for (int i = 0; args[i] && n < 63; i++) argv[n++] = (char *)args[i];
    argv[n] = NULL;
    int rc = sbxctl_remote_main(n, argv);
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  close(pin[0]);
  close(pout[1]);
  close(perr[1]);
  if (in && *in) {
    if (write(pin[1], in, strlen(in)) < 0) perror("write stdin");
  }
  close(pin[1]);
  int open_fds = 2;
  struct pollfd pf[2] = {{pout[0], POLLIN, 0}, {perr[0], POLLIN, 0}};
  char buf[65536];
  while (open_fds > 0) {
    if (poll(pf, 2, -1) < 0) continue;
    for (int i = 0; i < 2; i++) {
      if (!pf[i].revents) continue;
      ssize_t k = read(pf[i].fd, buf, sizeof buf);
      if (k <= 0) {
        close(pf[i].fd);
        pf[i].fd = -1;
        open_fds--;
        continue;
      }
      sbx_error e;
      sbx_buf_add(i == 0 ? &r->out : &r->err, buf, (size_t)k, &e);
      if (i == 0 && on_output) on_output(pid, &r->out, ud);
    }
  }
  int st;
  waitpid(pid, &st, 0);
  r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return 0;
}

#endif
