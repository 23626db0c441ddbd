/* sbxctl mcp: the lifecycle tools (fork, checkpoint, branch_checkpoint,
 * list_checkpoints, delete_checkpoint, promote, wake), named and shaped as
 * the cocoonstack/sandbox MCP server's so agents prompted for it work
 * unchanged. Every answer carries "keeps" where the node says what
 * survives ("filesystem" with the jail: children and branches start fresh
 * processes). Sandboxes made here are released on shutdown like those of
 * create_sandbox. */
#include <stdio.h>
#include <string.h>

#include "mcp.h"

static const char *life_arg(json_t *a, const char *k) { return json_string_value(json_object_get(a, k)); }

/* The "keeps" field of a lifecycle answer (NULL when absent). */
static const char *keeps_of(const char *json) {
  static __thread char buf[32];
  json_t *j = json ? json_loads(json, 0, NULL) : NULL;
  const char *k = json_string_value(json_object_get(j, "keeps"));
  snprintf(buf, sizeof buf, "%s", k ? k : "");
  json_decref(j);
  return buf[0] ? buf : NULL;
}

/* Hand s to the registry; on shutdown it is released at once. */
static bool keep_sandbox(mcp_call *c, sbx_sandbox *s) {
  if (mcp_registry_add(c->reg, s)) {
    fprintf(stderr, "sbxctl mcp: created %s\n", sbx_sandbox_id(s));
    return true;
  }
  sbx_error e2;
  sbx_sandbox_release(s, &e2);
  sbx_sandbox_free(s);
  return false;
}

static void set_keeps(json_t *out, const char *json) {
  const char *k = keeps_of(json);
  if (k) json_object_set_new(out, "keeps", json_string(k));
}

int mcp_fork(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  json_int_t count = json_integer_value(json_object_get(a, "count"));
  if (count < 1) return sbx_err(err, SBX_E_INVAL, "fork: count must be at least 1");
  sbx_fork_opts o = SBX_FORK_OPTS_INIT(.count = (int)count, .ttl_seconds = MCP_DEFAULT_TTL);
  sbx_sandbox **kids = NULL;
  size_t n = 0;
  char *json = NULL;
  int rc = sbx_sandbox_fork(s, &o, &kids, &n, &json, err);
  if (rc < 0) {
    mcp_explain("fork", sbx_sandbox_id(s), err);
    return rc;
  }
  json_t *ids = json_array();
  bool shutting = false;
  for (size_t i = 0; i < n; i++) {
    json_array_append_new(ids, json_string(sbx_sandbox_id(kids[i])));
    shutting |= !keep_sandbox(c, kids[i]);
  }
  sbx_free(kids);
  *out = json_pack("{s:o,s:s}", "sandbox_ids", ids, "parent", sbx_sandbox_id(s));
  set_keeps(*out, json);
  sbx_free(json);
  if (shutting) {
    json_decref(*out);
    *out = NULL;
    return sbx_err(err, SBX_E_BUSY, "fork: the server is shutting down");
  }
  return 0;
}

int mcp_checkpoint(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  (void)c;
  sbx_checkpoint ck;
  char *json = NULL;
  int rc = sbx_sandbox_checkpoint(s, life_arg(a, "name"), &ck, &json, err);
  if (rc < 0) {
    mcp_explain("checkpoint", sbx_sandbox_id(s), err);
    return rc;
  }
  *out = json_pack("{s:s,s:s,s:s}", "checkpoint_id", ck.id, "name", ck.name, "sandbox_id", ck.sandbox_id);
  set_keeps(*out, json);
  sbx_free(json);
  return 0;
}

int mcp_branch_checkpoint(mcp_call *c, json_t *a, json_t **out, sbx_error *err) {
  sbx_branch_opts o = SBX_BRANCH_OPTS_INIT(.ttl_seconds = MCP_DEFAULT_TTL);
  sbx_sandbox *s;
  char *json = NULL;
  const char *ck = life_arg(a, "checkpoint_id");
  int rc = sbx_client_branch(c->client, ck, &o, &s, &json, err);
  if (rc < 0) {
    mcp_explain("branch_checkpoint", NULL, err);
    return rc;
  }
  json_t *res = json_pack("{s:s,s:s,s:s}", "sandbox_id", sbx_sandbox_id(s), "deadline", sbx_sandbox_deadline(s),
                          "checkpoint_id", ck);
  set_keeps(res, json);
  sbx_free(json);
  if (!keep_sandbox(c, s)) {
    json_decref(res);
    return sbx_err(err, SBX_E_BUSY, "branch_checkpoint: the server is shutting down");
  }
  *out = res;
  return 0;
}

int mcp_list_checkpoints(mcp_call *c, json_t *a, json_t **out, sbx_error *err) {
  (void)a;
  sbx_checkpoint *list = NULL;
  size_t n = 0;
  int rc = sbx_client_checkpoints(c->client, &list, &n, NULL, err);
  if (rc < 0) {
    mcp_explain("list_checkpoints", NULL, err);
    return rc;
  }
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:s,s:s}", "checkpoint_id", list[i].id, "name", list[i].name,
                                         "sandbox_id", list[i].sandbox_id, "created_at", list[i].created_at,
                                         "template", list[i].key.template_));
  sbx_free(list);
  *out = json_pack("{s:o}", "checkpoints", arr);
  return 0;
}

int mcp_delete_checkpoint(mcp_call *c, json_t *a, json_t **out, sbx_error *err) {
  const char *ck = life_arg(a, "checkpoint_id");
  int rc = sbx_client_checkpoint_delete(c->client, ck, err);
  if (rc < 0) {
    mcp_explain("delete_checkpoint", NULL, err);
    return rc;
  }
  *out = json_pack("{s:s,s:b}", "checkpoint_id", ck, "deleted", 1);
  return 0;
}

int mcp_promote(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  (void)c;
  char digest[80] = "", *json = NULL;
  const char *name = life_arg(a, "template_name");
  int rc = sbx_sandbox_promote(s, name, digest, sizeof digest, &json, err);
  if (rc < 0) {
    mcp_explain("promote", sbx_sandbox_id(s), err);
    return rc;
  }
  *out = json_pack("{s:s,s:s,s:s}", "template", name, "content_digest", digest, "sandbox_id", sbx_sandbox_id(s));
  set_keeps(*out, json);
  sbx_free(json);
  return 0;
}

int mcp_wake(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  (void)c, (void)a;
  int rc = sbx_sandbox_wake(s, err);
  if (rc < 0) mcp_explain("wake", sbx_sandbox_id(s), err);
  else *out = json_pack("{s:s,s:b}", "sandbox_id", sbx_sandbox_id(s), "hibernated", 0);
  return rc;
}
