/* exec.c - the exec verb (§5.2): validation, spawning, and the foreground
 * RPC that moves stdin in and stdout/stderr out with backpressure.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "silkd.h"

struct exec_rpc {
  struct conn *c;
  struct proc *p;
  struct fdwriter *in;
};

static void exec_free(struct exec_rpc *x) {
  fdwriter_free(x->in);
  sbx_free(x);
}

static bool exec_piece(void *owner, enum piece_kind k, const uint8_t *d, size_t n) {
  struct exec_rpc *x = owner;
  if (!conn_send_bulk(x->c, k == PIECE_STDERR ? SBX_BULK_STDERR : SBX_BULK_STDOUT, d, n)) return false;
  if (conn_out_len(x->c) >= SILKD_OUT_HIGH) {
    conn_want_writable(x->c);
    return false;
  }
  return true;
}

static void exec_finished(void *owner, int code) {
  struct exec_rpc *x = owner;
  struct conn *c = x->c;
  conn_send_exit(c, code);
  proc_remove(x->p);
  exec_free(x);
  conn_rpc_done(c);
}

static const struct proc_owner_ops exec_owner = {exec_piece, exec_finished};

static void exec_stdin_drained(void *arg, int err) {
  struct exec_rpc *x = arg;
  conn_pause_input(x->c, false);
}

static void exec_input(void *rpc, sbx_wire_op op, const uint8_t *d, size_t n) {
  struct exec_rpc *x = rpc;
  if (op == SBX_OP_STDIN) {
    if (fdwriter_write(x->in, d, n) > SILKD_STDIN_HIGH) conn_pause_input(x->c, true);
  } else if (op == SBX_OP_STDIN_CLOSE) {
    fdwriter_close_when_done(x->in);
  }
}

static void exec_input_end(void *rpc) {
  struct exec_rpc *x = rpc;
  fdwriter_close_when_done(x->in);
}

static void exec_writable(void *rpc) {
  struct exec_rpc *x = rpc;
  proc_resume_output(x->p);
}

static void exec_abort(void *rpc) {
  struct exec_rpc *x = rpc;
  struct conn *c = x->c;
  proc_orphan(x->p);
  exec_free(x);
  conn_rpc_done(c);
}

static const struct rpc_ops exec_ops = {
    .mode = SBX_INPUT_FED,
    .input = exec_input,
    .input_end = exec_input_end,
    .writable = exec_writable,
    .abort = exec_abort,
};

static void close_pair(int p[2]) {
  if (p[0] >= 0) close(p[0]);
  if (p[1] >= 0) close(p[1]);
}

void verb_exec(struct conn *c, sbx_wire_req *req) {
  sbx_req_exec *e = &req->u.exec;
  if (e->argv.len == 0) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "argv must not be empty");
    return;
  }
  bool detach = e->has_detach && e->detach;
  if (detach && e->session) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "detach is not supported with session");
    return;
  }
  if (e->session) {
    session_exec(c, req);
    return;
  }
  char msg[512];
  if (!env_keys_valid(&e->env, msg, sizeof msg)) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "%s", msg);
    return;
  }
  struct spawn_opts o = {0};
  char *home = NULL;
  if (e->user) {
    if (user_lookup(e->user, &o.uid, &o.gid, &home) < 0) {
      conn_send_error(c, SBX_ERR_BAD_REQUEST, "unknown user \"%s\"", e->user);
      return;
    }
    o.has_user = true;
  }
  const char **argv = sbx_calloc(e->argv.len + 1, sizeof *argv);
  memcpy(argv, e->argv.items, e->argv.len * sizeof *argv);
  o.argv = argv;
  o.envp = env_build(&e->env, home, e->user);
  o.cwd = e->cwd;
  o.new_pgrp = true; /* so that a kill reaches what the child starts */
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
    conn_send_error(c, SBX_ERR_INTERNAL, "spawn: %s (os error %d)", strerror(errno), errno);
    close_pair(in);
    close_pair(out);
    close_pair(err);
    goto out;
  }
  o.fd0 = in[0];
  o.fd1 = out[1];
  o.fd2 = err[1];
  pid_t pid;
  sbx_error se;
  int rc = spawn_child(&o, &pid, &se);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  if (rc < 0) {
    int en = se.os_errno;
    bool bad = en == ENOENT || en == ENOTDIR || en == EACCES;
    conn_send_error(c, bad ? SBX_ERR_BAD_REQUEST : SBX_ERR_INTERNAL, "%s", se.msg);
    close(in[1]);
    close(out[0]);
    close(err[0]);
    goto out;
  }
  struct proc *p = proc_new(pid, argv, detach, false);
  if (detach) {
    close(in[1]); /* the child reads EOF at once */
    proc_attach_output(p, out[0], err[0], SILKD_DRAIN_MS);
    conn_send_started(c, (uint32_t)pid);
    goto out;
  }
  struct exec_rpc *x = sbx_calloc(1, sizeof *x);
  x->c = c;
  x->p = p;
  x->in = fdwriter_new(in[1], exec_stdin_drained, x);
  proc_set_owner(p, &exec_owner, x);
  if (!conn_send_started(c, (uint32_t)pid)) {
    close(out[0]);
    close(err[0]);
    proc_orphan(p);
    exec_free(x);
    goto out;
  }
  proc_attach_output(p, out[0], err[0], SILKD_DRAIN_MS);
  conn_rpc_begin(c, &exec_ops, x);
out:
  sbx_free(home);
  sbx_free(argv);
  envp_free(o.envp);
}
