/* The git verbs (§5.11) and the LSP broker's three verbs (§5.12). Every
 * git verb and lsp_start/lsp_stop answers one frame; lsp_request opens a
 * raw byte stream that the caller drives with sbx_agent_send_bulk (data)
 * and sbx_agent_next_data after sbx_agent_lsp_attach returns. */
#include <stdio.h>
#include <string.h>

#include <sandbox/agent.h>

#include "agent/agent_priv.h"

/* Send req and expect the single frame want; *out keeps it (or it is
 * freed when out is NULL). */
static int one(sbx_agent *a, const sbx_wire_req *req, sbx_wire_type want, sbx_wire_resp *out, sbx_error *err) {
  int rc = sbx_agent_send(a, req, err);
  if (rc < 0) return rc;
  sbx_wire_resp r;
  if ((rc = agent_recv_reply(a, want, &r, sbx_wire_op_name(req->op), err)) < 0) return rc;
  if (out) *out = r;
  else sbx_wire_resp_free(&r);
  return 0;
}

int sbx_agent_git_clone(sbx_agent *a, const sbx_req_git_clone *req, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_GIT_CLONE};
  r.u.git_clone = *req;
  return one(a, &r, SBX_RESP_DONE, NULL, err);
}

int sbx_agent_git_status(sbx_agent *a, const char *path, sbx_wire_resp *out, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_GIT_STATUS};
  r.u.git_status.path = path;
  return one(a, &r, SBX_RESP_GIT_STATUS_RESULT, out, err);
}

int sbx_agent_git_add(sbx_agent *a, const char *path, const char *const *files, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_GIT_ADD};
  size_t n = 0;
  while (files && files[n]) n++;
  r.u.git_add.path = path;
  r.u.git_add.files.items = (const char **)files;
  r.u.git_add.files.len = n;
  return one(a, &r, SBX_RESP_DONE, NULL, err);
}

int sbx_agent_git_commit(sbx_agent *a, const sbx_req_git_commit *req, char *hash, size_t hash_len, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_GIT_COMMIT};
  r.u.git_commit = *req;
  sbx_wire_resp resp;
  int rc = one(a, &r, SBX_RESP_GIT_COMMIT_RESULT, &resp, err);
  if (rc < 0) return rc;
  if (hash && hash_len) snprintf(hash, hash_len, "%s", resp.u.git_commit_result.hash);
  sbx_wire_resp_free(&resp);
  return 0;
}

static int remote_verb(sbx_agent *a, sbx_wire_op op, const char *path, const char *auth, sbx_error *err) {
  sbx_wire_req r = {.op = op};
  r.u.git_push.path = path;
  r.u.git_push.auth = auth;
  return one(a, &r, SBX_RESP_DONE, NULL, err);
}

int sbx_agent_git_push(sbx_agent *a, const char *path, const char *auth, sbx_error *err) {
  return remote_verb(a, SBX_OP_GIT_PUSH, path, auth, err);
}

int sbx_agent_git_pull(sbx_agent *a, const char *path, const char *auth, sbx_error *err) {
  return remote_verb(a, SBX_OP_GIT_PULL, path, auth, err);
}

int sbx_agent_git_branch(sbx_agent *a, const sbx_req_git_branch *req, sbx_wire_resp *out, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_GIT_BRANCH};
  r.u.git_branch = *req;
  bool list = req->action == SBX_GIT_BRANCH_LIST;
  return one(a, &r, list ? SBX_RESP_GIT_BRANCHES : SBX_RESP_DONE, list ? out : NULL, err);
}

int sbx_agent_lsp_start(sbx_agent *a, const char *language, const char *root, char *id, size_t id_len,
                        sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_LSP_START};
  r.u.lsp_start.language = language;
  r.u.lsp_start.root = root;
  sbx_wire_resp resp;
  int rc = one(a, &r, SBX_RESP_LSP_STARTED, &resp, err);
  if (rc < 0) return rc;
  if (id && id_len) snprintf(id, id_len, "%s", resp.u.lsp_started.server_id);
  sbx_wire_resp_free(&resp);
  return 0;
}

int sbx_agent_lsp_stop(sbx_agent *a, const char *id, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_LSP_STOP};
  r.u.lsp_stop.server_id = id;
  return one(a, &r, SBX_RESP_DONE, NULL, err);
}

int sbx_agent_lsp_attach(sbx_agent *a, const char *id, sbx_error *err) {
  sbx_wire_req r = {.op = SBX_OP_LSP_REQUEST};
  r.u.lsp_request.server_id = id;
  return one(a, &r, SBX_RESP_READY, NULL, err);
}
