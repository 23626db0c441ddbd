/* The git verbs and the LSP broker on a sandbox handle. git verbs borrow a
 * connection like every one-shot verb; an LSP stream holds a connection of
 * its own for its whole life (never parked), as a pty does. */
#include <string.h>

#include "client/client_priv.h"

#define ONE_RPC(s, err, call)            \
  do {                                   \
    sbx_agent *a;                        \
    int rc_ = conn_get((s), &a, (err));  \
    if (rc_ < 0) return rc_;             \
    rc_ = (call);                        \
    conn_put((s), a);                    \
    return rc_;                          \
  } while (0)

int sbx_sandbox_git_clone(sbx_sandbox *s, const sbx_git_clone_opts *opts, sbx_error *err) {
  sbx_git_clone_opts o;
  int rc = sbxi_opts_load(&o, sizeof o, opts, SBXI_SIZE_TO(sbx_git_clone_opts, auth), "git clone options", err);
  if (rc < 0) return rc;
  if (!opts || !o.url || !o.path) return sbx_err(err, SBX_E_INVAL, "git clone: url and path are required");
  sbx_req_git_clone req = {.url = o.url, .path = o.path, .branch = o.branch, .auth = o.auth};
  if (o.depth > 0) {
    req.has_depth = true;
    req.depth = o.depth;
  }
  ONE_RPC(s, err, sbx_agent_git_clone(a, &req, err));
}

int sbx_sandbox_git_status(sbx_sandbox *s, const char *path, sbx_wire_resp *out, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_git_status(a, path, out, err));
}

int sbx_sandbox_git_add(sbx_sandbox *s, const char *path, const char *const *files, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_git_add(a, path, files, err));
}

int sbx_sandbox_git_commit(sbx_sandbox *s, const char *path, const char *message, const char *author, char *hash,
                           size_t hash_len, sbx_error *err) {
  sbx_req_git_commit req = {.path = path, .message = message, .author = author};
  ONE_RPC(s, err, sbx_agent_git_commit(a, &req, hash, hash_len, err));
}

int sbx_sandbox_git_push(sbx_sandbox *s, const char *path, const char *auth, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_git_push(a, path, auth, err));
}

int sbx_sandbox_git_pull(sbx_sandbox *s, const char *path, const char *auth, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_git_pull(a, path, auth, err));
}

int sbx_sandbox_git_branch(sbx_sandbox *s, const char *path, sbx_wire_git_branch_action action, const char *name,
                           sbx_wire_resp *out, sbx_error *err) {
  sbx_req_git_branch req = {.path = path, .action = action, .name = name};
  ONE_RPC(s, err, sbx_agent_git_branch(a, &req, out, err));
}

int sbx_sandbox_lsp_stop(sbx_sandbox *s, const char *id, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_lsp_stop(a, id, err));
}

/* ---- LSP streams ---- */

struct sbx_lsp {
  sbx_agent *a;
  char id[64];
  bool ended;
};

int sbx_sandbox_lsp_open(sbx_sandbox *s, const sbx_lsp_opts *opts, sbx_lsp **out, sbx_error *err) {
  sbx_lsp_opts o;
  int rc = sbxi_opts_load(&o, sizeof o, opts, SBXI_SIZE_TO(sbx_lsp_opts, root), "lsp options", err);
  if (rc < 0) return rc;
  if (!opts || !o.language) return sbx_err(err, SBX_E_INVAL, "lsp: language is required");
  char id[64];
  sbx_agent *a;
  if ((rc = conn_get(s, &a, err)) < 0) return rc;
  rc = sbx_agent_lsp_start(a, o.language, o.root, id, sizeof id, err);
  conn_put(s, a);
  if (rc < 0) return rc;
  /* the stream holds its connection for its whole life */
  a = NULL;
  if ((rc = conn_dial(s, &a, err)) == 0 && (rc = sbx_agent_lsp_attach(a, id, err)) == 0) {
    sbx_lsp *l = sbx_calloc(1, sizeof *l);
    l->a = a;
    memcpy(l->id, id, sizeof id);
    *out = l;
    return 0;
  }
  if (a) sbx_agent_close(a);
  /* started but never attached: stop it rather than wait for its reap */
  sbx_error e2;
  sbx_sandbox_lsp_stop(s, id, &e2);
  return rc;
}

const char *sbx_lsp_id(const sbx_lsp *l) { return l->id; }
int sbx_lsp_fd(const sbx_lsp *l) { return sbx_agent_fd(l->a); }

int sbx_lsp_write(sbx_lsp *l, const void *data, size_t n, sbx_error *err) {
  const char *p = data;
  while (n > 0) {
    size_t k = n > 256 * 1024 ? 256 * 1024 : n;
    int rc = sbx_agent_send_bulk(l->a, SBX_BULK_REQ_DATA, p, k, err);
    if (rc < 0) return rc;
    p += k;
    n -= k;
  }
  return 0;
}

int sbx_lsp_close_input(sbx_lsp *l, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_DATA_END};
  return sbx_agent_send(l->a, &r, err);
}

int sbx_lsp_read(sbx_lsp *l, int (*on_data)(void *ud, const void *data, size_t n), void *ud, int timeout_ms,
                 sbx_error *err) {
  if (l->ended) return 1;
  for (;;) {
    sbx_wire_resp resp;
    int rc = sbx_agent_poll_recv(l->a, &resp, timeout_ms, err);
    if (rc <= 0) return rc;
    timeout_ms = 0; /* then only what is already here */
    if (resp.type == SBX_RESP_DATA) {
      rc = on_data ? on_data(ud, resp.u.data.data.ptr, resp.u.data.data.len) : 0;
    } else if (resp.type == SBX_RESP_DONE) {
      l->ended = true;
      rc = 1;
    } else if (resp.type == SBX_RESP_ERROR) {
      rc = sbx_err(err, SBX_E_REMOTE, "lsp: %s: %s", sbx_wire_error_kind_name(resp.u.error.kind),
                   resp.u.error.message);
      if (err) err->detail = (int)resp.u.error.kind;
    } else {
      rc = sbx_err(err, SBX_E_PROTO, "lsp: unexpected %s frame", sbx_wire_type_name(resp.type));
    }
    sbx_wire_resp_free(&resp);
    if (rc != 0) return rc;
  }
}

void sbx_lsp_close(sbx_lsp *l) {
  if (!l) return;
  sbx_agent_close(l->a); /* end of stream: silkd kills the server */
  sbx_free(l);
}
