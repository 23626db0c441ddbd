/* Node-level control plane: the sandbox index, node info, pools, drain. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "client/client_priv.h"

void sbxi_client_str_field(json_t *o, const char *name, char *dst, size_t cap) {
  const char *v = json_string_value(json_object_get(o, name));
  snprintf(dst, cap, "%s", v ? v : "");
}

static int64_t int_field(json_t *o, const char *name) {
  json_t *v = json_object_get(o, name);
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}

void sbxi_client_key_from(json_t *k, sbx_client_pool_key *key) {
  sbxi_client_str_field(k, "template", key->template_, sizeof key->template_);
  sbxi_client_str_field(k, "net", key->net, sizeof key->net);
  sbxi_client_str_field(k, "size", key->size, sizeof key->size);
}

static void row_from(json_t *o, sbx_sandbox_row *r) {
  memset(r, 0, sizeof *r);
  sbxi_client_str_field(o, "id", r->id, sizeof r->id);
  sbxi_client_key_from(json_object_get(o, "key"), &r->key);
  sbxi_client_str_field(o, "deadline", r->deadline, sizeof r->deadline);
  sbxi_client_str_field(o, "claimed_at", r->claimed_at, sizeof r->claimed_at);
  r->hibernated = json_is_true(json_object_get(o, "hibernated"));
  r->archived = json_is_true(json_object_get(o, "archived"));
  sbxi_client_str_field(o, "from_checkpoint", r->from_checkpoint, sizeof r->from_checkpoint);
  sbxi_client_str_field(o, "claim_ref", r->claim_ref, sizeof r->claim_ref);
  sbxi_client_str_field(o, "token", r->token, sizeof r->token);
}

json_t *sbxi_client_load(const sbx_buf *b, const char *verb, sbx_error *err) {
  json_error_t je;
  json_t *j = json_loadb(b->ptr ? b->ptr : "", b->len, 0, &je);
  if (!j || !json_is_object(j)) {
    json_decref(j);
    sbx_err(err, SBX_E_PARSE, "%s: bad JSON answer: %s", verb, j ? "not an object" : je.text);
    return NULL;
  }
  return j;
}

int sbx_client_sandboxes(sbx_client *c, const char *claim_ref, sbx_sandbox_row **rows, size_t *n, char **json,
                         sbx_error *err) {
  sbx_buf path = SBX_BUF_INIT(4096);
  int rc = sbx_buf_adds(&path, "/v1/sandboxes", err);
  if (rc == 0 && claim_ref) {
    char *q = curl_easy_escape(NULL, claim_ref, (int)strlen(claim_ref));
    rc = sbx_buf_printf(&path, err, "?claim_ref=%s", q ? q : "");
    curl_free(q);
  }
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  if (rc == 0) rc = http_call(c, &c->entry, "sandboxes", "GET", path.ptr, NULL, c->token, c->request_timeout_ms,
                              &resp, err);
  json_t *j = rc == 0 ? sbxi_client_load(&resp, "sandboxes", err) : NULL;
  if (rc == 0 && !j) rc = SBX_E_PARSE;
  if (rc == 0) {
    json_t *arr = json_object_get(j, "sandboxes");
    size_t k = json_array_size(arr);
    *rows = sbx_calloc(k ? k : 1, sizeof **rows);
    for (size_t i = 0; i < k; i++) row_from(json_array_get(arr, i), &(*rows)[i]);
    *n = k;
    if (json) *json = sbx_strndup(resp.ptr, resp.len);
  }
  json_decref(j);
  sbx_buf_free(&resp);
  sbx_buf_free(&path);
  return rc;
}

int sbx_client_sandbox_info(sbx_client *c, const char *id, sbx_sandbox_row *row, char **json, sbx_error *err) {
  int rc = sbx_client_check_header_value("sandbox id", id, id ? strlen(id) : 0, err);
  if (rc < 0) return rc;
  if (strchr(id, '/') || strchr(id, '?') || strlen(id) > 100) return sbx_err(err, SBX_E_INVAL, "bad sandbox id");
  char path[160];
  snprintf(path, sizeof path, "/v1/sandboxes/%s", id);
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  rc = http_call(c, &c->entry, "info", "GET", path, NULL, c->token, c->request_timeout_ms, &resp, err);
  json_t *j = rc == 0 ? sbxi_client_load(&resp, "info", err) : NULL;
  if (rc == 0 && !j) rc = SBX_E_PARSE;
  if (rc == 0) {
    row_from(j, row);
    if (json) *json = sbx_strndup(resp.ptr, resp.len);
  }
  json_decref(j);
  sbx_buf_free(&resp);
  return rc;
}

void sbx_node_info_free(sbx_node_info *info) {
  if (!info) return;
  sbx_free(info->pools);
  sbx_free(info->json);
  memset(info, 0, sizeof *info);
}

int node_info_parse(const sbx_buf *resp, const char *verb, sbx_node_info *out, sbx_error *err) {
  json_t *j = sbxi_client_load(resp, verb, err);
  if (!j) return SBX_E_PARSE;
  memset(out, 0, sizeof *out);
  json_t *pools = json_object_get(j, "pools");
  out->npools = json_array_size(pools);
  out->pools = sbx_calloc(out->npools ? out->npools : 1, sizeof *out->pools);
  for (size_t i = 0; i < out->npools; i++) {
    json_t *p = json_array_get(pools, i);
    sbx_pool_state *ps = &out->pools[i];
    sbxi_client_key_from(json_object_get(p, "key"), &ps->key);
    ps->warm = int_field(p, "warm");
    ps->refilling = int_field(p, "refilling");
    ps->target = int_field(p, "target");
    ps->golden = json_is_true(json_object_get(p, "golden"));
  }
  out->claimed = int_field(j, "claimed");
  out->hibernated = int_field(j, "hibernated");
  out->archived = int_field(j, "archived");
  out->draining = json_is_true(json_object_get(j, "draining"));
  out->at_capacity = json_is_true(json_object_get(j, "at_capacity"));
  sbxi_client_str_field(j, "at_capacity_reason", out->at_capacity_reason, sizeof out->at_capacity_reason);
  out->json = sbx_strndup(resp->ptr, resp->len);
  json_decref(j);
  return 0;
}

static int node_info_call(sbx_client *c, const char *verb, const char *method, const char *path, const char *body,
                          sbx_node_info *out, sbx_error *err) {
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  int rc = http_call(c, &c->entry, verb, method, path, body, c->token, c->request_timeout_ms, &resp, err);
  if (rc == 0 && out) rc = node_info_parse(&resp, verb, out, err);
  sbx_buf_free(&resp);
  return rc;
}

int sbx_client_info(sbx_client *c, sbx_node_info *out, sbx_error *err) {
  return node_info_call(c, "info", "GET", "/v1/info", NULL, out, err);
}

int sbx_client_drain(sbx_client *c, bool on, sbx_node_info *out, sbx_error *err) {
  return node_info_call(c, on ? "drain" : "uncordon", on ? "POST" : "DELETE", "/v1/drain", NULL, out, err);
}

int sbx_client_set_pools(sbx_client *c, const sbx_pool_spec *pools, size_t n, sbx_node_info *out, sbx_error *err) {
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++) {
    sbx_pool_spec spec;
    const sbx_pool_spec *p = &spec;
    int rc = sbxi_opts_load_at(&spec, sizeof spec, pools, i,
                               SBXI_SIZE_TO(sbx_pool_spec, archive_delete_after_seconds), "pools", err);
    if (rc < 0) {
      json_decref(arr);
      return rc;
    }
    if (!p->template_ || !*p->template_) {
      json_decref(arr);
      return sbx_err(err, SBX_E_INVAL, "pools: entry %zu has no template", i);
    }
    json_t *o = json_object();
    json_object_set_new(o, "template", json_string(p->template_));
    if (p->net) json_object_set_new(o, "net", json_string(p->net));
    if (p->size) json_object_set_new(o, "size", json_string(p->size));
    if (p->warm >= 0) json_object_set_new(o, "warm", json_integer(p->warm));
    if (p->warm_max >= 0) json_object_set_new(o, "warm_max", json_integer(p->warm_max));
    if (p->idle_hibernate_seconds >= 0)
      json_object_set_new(o, "idle_hibernate_seconds", json_integer(p->idle_hibernate_seconds));
    if (p->archive_after_seconds >= 0)
      json_object_set_new(o, "archive_after_seconds", json_integer(p->archive_after_seconds));
    if (p->archive_delete_after_seconds >= 0)
      json_object_set_new(o, "archive_delete_after_seconds", json_integer(p->archive_delete_after_seconds));
    json_array_append_new(arr, o);
  }
  json_t *body = json_pack("{s:o}", "pools", arr);
  char *s = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  int rc = node_info_call(c, "pools", "PUT", "/v1/pools", s, out, err);
  free(s);
  return rc;
}
