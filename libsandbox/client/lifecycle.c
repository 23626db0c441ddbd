/* Lifecycle verbs of the client: fork, checkpoints, branch, promote and
 * template delete (sandboxd-http.md §4.10-4.16). The ownership-proof
 * verbs send the node token in the header and the sandbox token in the
 * body (§2.5). Redirects of a checkpoint claim (a record on another node)
 * are not followed yet: the entry node must hold it. */
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "client/client_priv.h"

/* The JSON text of a body: sbx_malloc'd copy of what jansson made. */
static char *dump(json_t *o) {
  char *t = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  char *c = sbx_strdup(t ? t : "{}");
  free(t);
  return c;
}

static int proof_post(sbx_sandbox *s, const char *verb, json_t *body, int timeout_ms, sbx_buf *resp, sbx_error *err) {
  json_object_set_new(body, "token", json_string(s->token));
  char *text = dump(body);
  char path[160];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/%s", s->id, verb);
  int rc = http_call(s->client, &s->owner, verb, "POST", path, text, s->client->token, timeout_ms, resp, err);
  sbx_free(text);
  return rc;
}

/* A handle on a ClaimResult object (a fork child or a branch). */
static int handle_of(sbx_client *c, const sbx_addr *node, json_t *o, sbx_sandbox **out, sbx_error *err) {
  char *text = json_dumps(o, JSON_COMPACT);
  sbxi_claim_result res;
  sbxi_redirect red;
  int rc = sbxi_client_parse_claim(text ? text : "", text ? strlen(text) : 0, &res, &red, err);
  free(text);
  if (rc == 0 && !res.id[0]) rc = sbx_err(err, SBX_E_PROTO, "unexpected redirect");
  sbxi_redirect_free(&red);
  if (rc < 0) return rc;
  char origin[SBX_ADDR_HOST_MAX + 32];
  sbx_addr_origin(node, origin, sizeof origin);
  rc = sandbox_new(c, res.id, res.token, res.owner_addr[0] ? res.owner_addr : origin, out, err);
  if (rc == 0) snprintf((*out)->deadline, sizeof (*out)->deadline, "%s", res.deadline);
  return rc;
}

int sbx_sandbox_fork(sbx_sandbox *s, const sbx_fork_opts *opts, sbx_sandbox ***children, size_t *n, char **json,
                     sbx_error *err) {
  sbx_error tmp;
  if (!err) err = &tmp;
  *children = NULL;
  *n = 0;
  sbx_fork_opts o;
  if (sbxi_opts_load(&o, sizeof o, opts, SBXI_SIZE_TO(sbx_fork_opts, claim_ref_prefix), "fork options", err) < 0)
    return err->code;
  json_t *body = json_pack("{s:i}", "count", o.count > 0 ? o.count : 1);
  if (o.ttl_seconds) json_object_set_new(body, "ttl_seconds", json_integer(o.ttl_seconds));
  if (o.claim_ref_prefix) json_object_set_new(body, "claim_ref_prefix", json_string(o.claim_ref_prefix));
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  int rc = proof_post(s, "fork", body, s->client->claim_timeout_ms, &resp, err);
  json_t *j = rc == 0 ? sbxi_client_load(&resp, "fork", err) : NULL;
  if (rc == 0 && !j) rc = SBX_E_PARSE;
  json_t *arr = json_object_get(j, "children");
  if (rc == 0 && !json_is_array(arr)) rc = sbx_err(err, SBX_E_PARSE, "fork: answer without children");
  size_t k = json_array_size(arr);
  sbx_sandbox **v = rc == 0 ? sbx_calloc(k ? k : 1, sizeof *v) : NULL;
  for (size_t i = 0; rc == 0 && i < k; i++) rc = handle_of(s->client, &s->owner, json_array_get(arr, i), &v[i], err);
  if (rc < 0 && v) {
    for (size_t i = 0; i < k; i++) sbx_sandbox_free(v[i]);
    sbx_free(v);
  } else if (rc == 0) {
    *children = v;
    *n = k;
    if (json) *json = sbx_strndup(resp.ptr, resp.len);
  }
  json_decref(j);
  sbx_buf_free(&resp);
  return rc;
}

static void record_from(json_t *o, sbx_checkpoint *r) {
  memset(r, 0, sizeof *r);
  sbxi_client_str_field(o, "id", r->id, sizeof r->id);
  sbxi_client_str_field(o, "name", r->name, sizeof r->name);
  sbxi_client_str_field(o, "sandbox_id", r->sandbox_id, sizeof r->sandbox_id);
  sbxi_client_key_from(json_object_get(o, "key"), &r->key);
  sbxi_client_str_field(o, "tenant", r->tenant, sizeof r->tenant);
  sbxi_client_str_field(o, "created_at", r->created_at, sizeof r->created_at);
}

int sbx_sandbox_checkpoint(sbx_sandbox *s, const char *name, sbx_checkpoint *out, char **json, sbx_error *err) {
  sbx_error tmp;
  if (!err) err = &tmp;
  json_t *body = json_object();
  if (name) json_object_set_new(body, "name", json_string(name));
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  int rc = proof_post(s, "checkpoint", body, s->client->claim_timeout_ms, &resp, err);
  json_t *j = rc == 0 ? sbxi_client_load(&resp, "checkpoint", err) : NULL;
  if (rc == 0 && !json_is_object(json_object_get(j, "checkpoint")))
    rc = j ? sbx_err(err, SBX_E_PARSE, "checkpoint: answer without a record") : SBX_E_PARSE;
  if (rc == 0) {
    if (out) record_from(json_object_get(j, "checkpoint"), out);
    if (json) *json = sbx_strndup(resp.ptr, resp.len);
  }
  json_decref(j);
  sbx_buf_free(&resp);
  return rc;
}

int sbx_client_checkpoints(sbx_client *c, sbx_checkpoint **list, size_t *n, char **json, sbx_error *err) {
  sbx_error tmp;
  if (!err) err = &tmp;
  *list = NULL;
  *n = 0;
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  int rc = http_call(c, &c->entry, "checkpoints", "GET", "/v1/checkpoints", NULL, c->token, c->request_timeout_ms,
                     &resp, err);
  json_t *j = rc == 0 ? sbxi_client_load(&resp, "checkpoints", err) : NULL;
  if (rc == 0 && !j) rc = SBX_E_PARSE;
  if (rc == 0) {
    json_t *arr = json_object_get(j, "checkpoints");
    size_t k = json_array_size(arr);
    *list = sbx_calloc(k ? k : 1, sizeof **list);
    for (size_t i = 0; i < k; i++) record_from(json_array_get(arr, i), &(*list)[i]);
    *n = k;
    if (json) *json = sbx_strndup(resp.ptr, resp.len);
  }
  json_decref(j);
  sbx_buf_free(&resp);
  return rc;
}

static int check_ck_id(const char *id, sbx_error *err) {
  size_t len = id ? strlen(id) : 0;
  if (len == 0 || len > 63 || strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789_") != len)
    return sbx_err(err, SBX_E_INVAL, "invalid checkpoint id \"%s\"", id ? id : "");
  return 0;
}

int sbx_client_checkpoint_delete(sbx_client *c, const char *id, sbx_error *err) {
  int rc = check_ck_id(id, err);
  if (rc < 0) return rc;
  char path[128];
  snprintf(path, sizeof path, "/v1/checkpoints/%s", id);
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  rc = http_call(c, &c->entry, "delete checkpoint", "DELETE", path, NULL, c->token, c->request_timeout_ms, &resp, err);
  sbx_buf_free(&resp);
  return rc;
}

int sbx_client_branch(sbx_client *c, const char *checkpoint_id, const sbx_branch_opts *opts, sbx_sandbox **out,
                      char **json, sbx_error *err) {
  sbx_error tmp;
  if (!err) err = &tmp;
  *out = NULL;
  sbx_branch_opts o;
  if (sbxi_opts_load(&o, sizeof o, opts, SBXI_SIZE_TO(sbx_branch_opts, ttl_seconds), "branch options", err) < 0)
    return err->code;
  int rc = check_ck_id(checkpoint_id, err);
  if (rc < 0) return rc;
  char path[128];
  snprintf(path, sizeof path, "/v1/checkpoints/%s/claim", checkpoint_id);
  json_t *b = json_object();
  if (o.ttl_seconds) json_object_set_new(b, "ttl_seconds", json_integer(o.ttl_seconds));
  char *body = dump(b);
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  rc = http_call(c, &c->entry, "branch", "POST", path, body, c->token, c->claim_timeout_ms, &resp, err);
  sbx_free(body);
  json_t *j = rc == 0 ? sbxi_client_load(&resp, "branch", err) : NULL;
  if (rc == 0 && !j) rc = SBX_E_PARSE;
  if (rc == 0 && json_object_get(j, "redirect"))
    rc = sbx_err(err, SBX_E_UNSUPPORTED, "branch: the checkpoint is on another node (redirects are not followed)");
  if (rc == 0) rc = handle_of(c, &c->entry, j, out, err);
  if (rc == 0 && json) *json = sbx_strndup(resp.ptr, resp.len);
  json_decref(j);
  sbx_buf_free(&resp);
  return rc;
}

int sbx_sandbox_promote(sbx_sandbox *s, const char *template_, char *digest, size_t digest_len, char **json,
                        sbx_error *err) {
  sbx_error tmp;
  if (!err) err = &tmp;
  if (!template_ || !*template_) return sbx_err(err, SBX_E_INVAL, "promote: a template name is required");
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  int rc = proof_post(s, "promote", json_pack("{s:s}", "template", template_), s->client->claim_timeout_ms, &resp, err);
  json_t *j = rc == 0 ? sbxi_client_load(&resp, "promote", err) : NULL;
  if (rc == 0 && !j) rc = SBX_E_PARSE;
  if (rc == 0) {
    if (digest && digest_len) sbxi_client_str_field(j, "content_digest", digest, digest_len);
    if (json) *json = sbx_strndup(resp.ptr, resp.len);
  }
  json_decref(j);
  sbx_buf_free(&resp);
  return rc;
}

int sbx_client_template_delete(sbx_client *c, const char *template_, const char *net, const char *size,
                               sbx_error *err) {
  if (!template_ || !*template_) return sbx_err(err, SBX_E_INVAL, "template delete: a template name is required");
  char *t = curl_easy_escape(NULL, template_, 0), *nt = curl_easy_escape(NULL, net ? net : "none", 0),
       *sz = curl_easy_escape(NULL, size ? size : "small", 0);
  char path[1024];
  snprintf(path, sizeof path, "/v1/templates?template=%s&net=%s&size=%s", t ? t : "", nt ? nt : "", sz ? sz : "");
  curl_free(t);
  curl_free(nt);
  curl_free(sz);
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  int rc = http_call(c, &c->entry, "template delete", "DELETE", path, NULL, c->token, c->request_timeout_ms, &resp, err);
  sbx_buf_free(&resp);
  return rc;
}
