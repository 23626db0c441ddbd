/* Terminals (pty_open on a connection of its own, resize on another) and
 * raw port streams (§4.22 upgrade). */
#include <string.h>
#include <unistd.h>

#include "client/client_priv.h"

struct sbx_pty {
  sbx_sandbox *s;
  sbx_agent *a;
  uint32_t pid;
  bool exited;
};

int sbx_sandbox_open_pty(sbx_sandbox *s, const sbx_pty_opts *opts, sbx_pty **out, sbx_error *err) {
  sbx_pty_opts o;
  int rc = sbxi_opts_load(&o, sizeof o, opts, SBXI_SIZE_TO(sbx_pty_opts, user), "pty options", err);
  if (rc < 0) return rc;
  sbx_wire_req r = {.op = SBX_OP_PTY_OPEN};
  r.u.pty_open.cols = o.cols ? o.cols : 80;
  r.u.pty_open.rows = o.rows ? o.rows : 24;
  r.u.pty_open.cwd = o.cwd;
  r.u.pty_open.user = o.user;
  sbx_wire_kv *kv = NULL;
  rc = env_to_map(o.env, &r.u.pty_open.env, &kv, err);
  if (rc < 0) return rc;
  sbx_agent *a = NULL;
  /* a pty holds its connection for its whole life: never a parked one */
  if ((rc = conn_dial(s, &a, err)) == 0 && (rc = sbx_agent_send(a, &r, err)) == 0) {
    sbx_wire_resp resp;
    if ((rc = sbx_agent_recv(a, &resp, err)) == 0) {
      if (resp.type == SBX_RESP_STARTED) {
        sbx_pty *p = sbx_calloc(1, sizeof *p);
        p->s = s;
        p->a = a;
        p->pid = resp.u.started.pid;
        *out = p;
        a = NULL;
      } else if (resp.type == SBX_RESP_ERROR) {
        rc = sbx_err(err, SBX_E_REMOTE, "pty_open: %s: %s", sbx_wire_error_kind_name(resp.u.error.kind),
                     resp.u.error.message);
        if (err) err->detail = (int)resp.u.error.kind;
      } else {
        rc = sbx_err(err, SBX_E_PROTO, "pty_open: unexpected %s frame", sbx_wire_type_name(resp.type));
      }
      sbx_wire_resp_free(&resp);
    }
  }
  for (size_t i = 0; kv && i < r.u.pty_open.env.len; i++) sbx_free((void *)kv[i].key);
  sbx_free(kv);
  sbx_agent_close(a);
  return rc;
}

uint32_t sbx_pty_pid(const sbx_pty *p) { return p->pid; }
int sbx_pty_fd(const sbx_pty *p) { return sbx_agent_fd(p->a); }

int sbx_pty_write(sbx_pty *p, const void *data, size_t n, sbx_error *err) {
  const char *c = data;
  while (n > 0) {
    size_t k = n > 65536 ? 65536 : n;
    int rc = sbx_agent_send_bulk(p->a, SBX_BULK_REQ_STDIN, c, k, err);
    if (rc < 0) return rc;
    c += k;
    n -= k;
  }
  return 0;
}

int sbx_pty_read(sbx_pty *p, int (*on_output)(void *ud, const void *data, size_t n), void *ud, int timeout_ms,
                 int *exit_code, sbx_error *err) {
  if (p->exited) return 1;
  for (;;) {
    sbx_wire_resp resp;
    int rc = sbx_agent_poll_recv(p->a, &resp, timeout_ms, err);
    if (rc <= 0) return rc;
    timeout_ms = 0; /* then only what is already here */
    if (resp.type == SBX_RESP_STDOUT || resp.type == SBX_RESP_STDERR) {
      rc = on_output ? on_output(ud, resp.u.data.data.ptr, resp.u.data.data.len) : 0;
    } else if (resp.type == SBX_RESP_EXIT) {
      if (exit_code) *exit_code = resp.u.exit.code;
      p->exited = true;
      rc = 1;
    } else if (resp.type == SBX_RESP_ERROR) {
      rc = sbx_err(err, SBX_E_REMOTE, "pty: %s: %s", sbx_wire_error_kind_name(resp.u.error.kind),
                   resp.u.error.message);
      if (err) err->detail = (int)resp.u.error.kind;
    } else {
      rc = sbx_err(err, SBX_E_PROTO, "pty: unexpected %s frame", sbx_wire_type_name(resp.type));
    }
    sbx_wire_resp_free(&resp);
    if (rc != 0) return rc;
  }
}

int sbx_pty_resize(sbx_pty *p, uint16_t cols, uint16_t rows, sbx_error *err) {
  sbx_agent *a;
  int rc = conn_get(p->s, &a, err); /* a request on the pty's own connection would end it (§5.9) */
  if (rc < 0) return rc;
  rc = sbx_agent_pty_resize(a, p->pid, cols, rows, err);
  conn_put(p->s, a);
  return rc;
}

void sbx_pty_close(sbx_pty *p) {
  if (!p) return;
  sbx_agent_close(p->a); /* end of stream: silkd kills the shell */
  sbx_free(p);
}

int sbx_sandbox_dial_port(sbx_sandbox *s, uint16_t port, int *fd, sbx_buf *pending, sbx_error *err) {
  if (port == 0) return sbx_err(err, SBX_E_INVAL, "dial_port: port 0");
  return dial_upgrade(s, port, NULL, 0, fd, pending, err);
}
