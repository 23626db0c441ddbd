/* pty.c - pty_open and pty_resize (§5.9). The shell's master side is one
 * more output source of the process table (so ps, kill, attach and logs see
 * it); input goes to the master through an fdwriter on a duplicate.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "silkd.h"

struct pty_rpc {
  struct conn *c;
  struct proc *p;
  struct fdwriter *in;
};

static bool pty_piece(void *owner, enum piece_kind k, const uint8_t *d, size_t n) {
  struct pty_rpc *x = owner;
  if (!conn_send_bulk(x->c, SBX_BULK_STDOUT, d, n)) return false;
  if (conn_out_len(x->c) >= SILKD_OUT_HIGH) {
    conn_want_writable(x->c);
    return false;
  }
  return true;
}

static void pty_finished(void *owner, int code) {
  struct pty_rpc *x = owner;
  struct conn *c = x->c;
  conn_send_exit(c, code);
  proc_remove(x->p);
  fdwriter_free(x->in);
  sbx_free(x);
  conn_rpc_done(c);
}

static const struct proc_owner_ops pty_owner = {pty_piece, pty_finished};

static void pty_input(void *rpc, sbx_wire_op op, const uint8_t *d, size_t n) {
  struct pty_rpc *x = rpc;
  if (op != SBX_OP_STDIN) return; /* stdin_close, data, data_end: ignored */
  if (fdwriter_write(x->in, d, n) > SILKD_STDIN_HIGH) conn_pause_input(x->c, true);
}

static void pty_drained(void *arg, int err) {
  struct pty_rpc *x = arg;
  conn_pause_input(x->c, false);
}

static void pty_input_end(void *rpc) {
  struct pty_rpc *x = rpc;
  /* End of input kills the shell and its jobs; exit{137} follows from the
   * reap. */
  proc_signal(x->p, SIGKILL);
}

static void pty_writable(void *rpc) {
  struct pty_rpc *x = rpc;
  proc_resume_output(x->p);
}

static void pty_abort(void *rpc) {
  struct pty_rpc *x = rpc;
  struct conn *c = x->c;
  proc_orphan(x->p);
  fdwriter_free(x->in);
  sbx_free(x);
  conn_rpc_done(c);
}

static const struct rpc_ops pty_ops = {
    .mode = SBX_INPUT_FED,
    .input = pty_input,
    .input_end = pty_input_end,
    .writable = pty_writable,
    .abort = pty_abort,
};

void verb_pty_open(struct conn *c, sbx_wire_req *req) {
  sbx_req_pty_open *q = &req->u.pty_open;
  char msg[512];
  if (!env_keys_valid(&q->env, msg, sizeof msg)) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "%s", msg);
    return;
  }
  struct spawn_opts o = {0};
  char *home = NULL;
  if (q->user) {
    if (user_lookup(q->user, &o.uid, &o.gid, &home) < 0) {
      conn_send_error(c, SBX_ERR_BAD_REQUEST, "unknown user \"%s\"", q->user);
      return;
    }
    o.has_user = true;
  }
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), slave = -1;
  char name[128];
  struct winsize ws = {.ws_row = q->rows, .ws_col = q->cols};
  if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 || ptsname_r(master, name, sizeof name) != 0 ||
      (slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 || ioctl(master, TIOCSWINSZ, &ws) < 0) {
    sbx_error e;
    sbx_err_os(&e, errno, "openpty");
    conn_send_sbx_error(c, &e, SBX_ERR_INTERNAL);
    if (master >= 0) close(master);
    sbx_free(home);
    return;
  }
  const char *shell = getenv("SHELL");
  if (!shell || !*shell) shell = silkd_shell();
  const char *argv[] = {shell, "-i", NULL};
  o.argv = argv;
  o.envp = env_build(&q->env, home, q->user);
  o.cwd = q->cwd;
  o.fd0 = o.fd1 = o.fd2 = slave;
  o.setsid_ctty = true;
  pid_t pid;
  sbx_error se;
  int rc = spawn_child(&o, &pid, &se);
  close(slave);
  envp_free(o.envp);
  sbx_free(home);
  if (rc < 0) {
    sbx_error e;
    sbx_err_os(&e, se.os_errno, "spawn shell");
    conn_send_sbx_error(c, &e, SBX_ERR_INTERNAL);
    close(master);
    return;
  }
  struct proc *p = proc_new(pid, argv, false, true);
  proc_set_pty_master(p, master);
  struct pty_rpc *x = sbx_calloc(1, sizeof *x);
  x->c = c;
  x->p = p;
  x->in = fdwriter_new(fcntl(master, F_DUPFD_CLOEXEC, 3), pty_drained, x);
  proc_set_owner(p, &pty_owner, x);
  if (!conn_send_started(c, (uint32_t)pid)) {
    proc_orphan(p);
    fdwriter_free(x->in);
    sbx_free(x);
    return;
  }
  proc_attach_output(p, master, -1, SILKD_PTY_DRAIN_MS);
  conn_rpc_begin(c, &pty_ops, x);
}

void verb_pty_resize(struct conn *c, sbx_wire_req *req) {
  uint32_t pid = req->u.pty_resize.pid;
  struct proc *p = pid && pid <= 2147483647u ? proc_find((pid_t)pid) : NULL;
  if (!p) {
    conn_send_error(c, SBX_ERR_NOT_FOUND, "no such pid");
    return;
  }
  int m = proc_pty_master(p);
  if (m < 0) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "not a pty");
    return;
  }
  int fd = fcntl(m, F_DUPFD_CLOEXEC, 3);
  struct winsize ws = {.ws_row = req->u.pty_resize.rows, .ws_col = req->u.pty_resize.cols};
  if (fd < 0 || ioctl(fd, TIOCSWINSZ, &ws) < 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "resize: %s (os error %d)", strerror(e), e);
    return;
  }
  close(fd);
  conn_send_simple(c, SBX_RESP_DONE);
}
