/* The node client: construction, claims with the §9.2 redirect algorithm,
 * attach, and the sandbox-scoped control-plane verbs. Lookup is in
 * lookup.c. Listings, info,
 * pools and drain live in admin.c. */
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "client/client_priv.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

int sbx_client_new(const sbx_client_opts *opts, sbx_client **out, sbx_error *err) {
  sbx_client_opts copy;
  const sbx_client_opts *o = &copy;
  int rc = sbxi_opts_load(&copy, sizeof copy, opts, SBXI_SIZE_TO(sbx_client_opts, tls_insecure), "client options",
                          err);
  if (rc < 0) return rc;
  sbx_addr entry;
  rc = sbx_addr_parse(o->addr ? o->addr : "127.0.0.1:7777", NULL, &entry, err);
  if (rc < 0) return rc;
  if (o->token && (rc = sbx_client_check_header_value("token", o->token, strlen(o->token), err)) < 0) return rc;
  pthread_once(&curl_once, curl_init_once);
  sbx_client *c = sbx_calloc(1, sizeof *c);
  c->entry = entry;
  c->token = o->token && *o->token ? sbx_strdup(o->token) : NULL;
  c->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000;
  c->request_timeout_ms = o->request_timeout_ms > 0 ? o->request_timeout_ms : 30000;
  c->claim_timeout_ms = o->claim_timeout_ms > 0 ? o->claim_timeout_ms : 180000;
  c->agent_timeout_ms = o->agent_timeout_ms > 0 ? o->agent_timeout_ms : -1;
  c->tls_ca_file = o->tls_ca_file ? sbx_strdup(o->tls_ca_file) : NULL;
  c->tls_insecure = o->tls_insecure;
  pthread_mutex_init(&c->lock, NULL);
  c->curl = curl_easy_init();
  if (!c->curl) {
    sbx_client_free(c);
    return sbx_err(err, SBX_E_INTERNAL, "client: curl_easy_init failed");
  }
  *out = c;
  return 0;
}

void sbx_client_free(sbx_client *c) {
  if (!c) return;
  if (c->curl) curl_easy_cleanup(c->curl);
  tls_client_free(c);
  sbx_free(c->tls_ca_file);
  pthread_mutex_destroy(&c->lock);
  sbx_free(c->token);
  sbx_free(c);
}

const sbx_addr *sbx_client_entry(const sbx_client *c) { return &c->entry; }

/* ---- claim answers ---- */
static int copy_str(json_t *obj, const char *name, char *dst, size_t cap, bool required, sbx_error *err) {
  json_t *v = json_object_get(obj, name);
  if (!v || json_is_null(v)) {
    if (required) return sbx_err(err, SBX_E_PARSE, "claim answer: missing \"%s\"", name);
    dst[0] = 0;
    return 0;
  }
  if (!json_is_string(v)) return sbx_err(err, SBX_E_PARSE, "claim answer: \"%s\" is not a string", name);
  if (json_string_length(v) >= cap) return sbx_err(err, SBX_E_PARSE, "claim answer: \"%s\" too long", name);
  memcpy(dst, json_string_value(v), json_string_length(v) + 1);
  return 0;
}

void sbxi_redirect_free(sbxi_redirect *r) {
  if (!r) return;
  for (size_t i = 0; i < r->len; i++) sbx_free(r->addrs[i]);
  sbx_free(r->addrs);
  memset(r, 0, sizeof *r);
}

int sbxi_client_parse_claim(const char *json, size_t len, sbxi_claim_result *out, sbxi_redirect *redirect,
                            sbx_error *err) {
  memset(out, 0, sizeof *out);
  memset(redirect, 0, sizeof *redirect);
  json_error_t je;
  json_t *j = json_loadb(json, len, 0, &je);
  if (!j) return sbx_err(err, SBX_E_PARSE, "claim answer: %s", je.text);
  int rc = 0;
  if (!json_is_object(j)) {
    rc = sbx_err(err, SBX_E_PARSE, "claim answer: not an object");
    goto out;
  }
  json_t *red = json_object_get(j, "redirect"); /* checked first, as §4.1 says */
  if (red && !json_is_null(red)) {
    if (!json_is_array(red)) {
      rc = sbx_err(err, SBX_E_PARSE, "claim answer: \"redirect\" is not an array");
      goto out;
    }
    size_t n = json_array_size(red);
    redirect->addrs = sbx_calloc(n ? n : 1, sizeof *redirect->addrs);
    for (size_t i = 0; i < n; i++) {
      json_t *a = json_array_get(red, i);
      if (!json_is_string(a)) {
        sbxi_redirect_free(redirect);
        rc = sbx_err(err, SBX_E_PARSE, "claim answer: redirect entry %zu is not a string", i);
        goto out;
      }
      redirect->addrs[redirect->len++] = sbx_strdup(json_string_value(a));
    }
    json_t *rp = json_object_get(j, "require_promoted");
    if (rp && !json_is_null(rp) && !json_is_boolean(rp)) {
      sbxi_redirect_free(redirect);
      rc = sbx_err(err, SBX_E_PARSE, "claim answer: \"require_promoted\" is not a bool");
      goto out;
    }
    redirect->require_promoted = json_is_true(rp);
    if (redirect->len == 0) {
      sbxi_redirect_free(redirect);
      rc = sbx_err(err, SBX_E_PARSE, "claim answer: empty redirect");
    }
    goto out;
  }
  if ((rc = copy_str(j, "id", out->id, sizeof out->id, true, err)) < 0 ||
      (rc = copy_str(j, "token", out->token, sizeof out->token, true, err)) < 0 ||
      (rc = copy_str(j, "deadline", out->deadline, sizeof out->deadline, false, err)) < 0 ||
      (rc = copy_str(j, "owner_addr", out->owner_addr, sizeof out->owner_addr, false, err)) < 0 ||
      (rc = copy_str(j, "template_digest", out->template_digest, sizeof out->template_digest, false, err)) < 0 ||
      (rc = copy_str(j, "from_checkpoint", out->from_checkpoint, sizeof out->from_checkpoint, false, err)) < 0)
    goto out;
  if (!out->id[0] || !out->token[0]) rc = sbx_err(err, SBX_E_PARSE, "claim answer: empty id or token");
out:
  json_decref(j);
  return rc;
}

/* ---- claim ---- */
static char *claim_body(const sbx_claim_opts *o, bool no_redirect, bool require_promoted) {
  json_t *b = json_object();
  json_object_set_new(b, "template", json_string(o->template_));
  if (o->size) json_object_set_new(b, "size", json_string(o->size));
  if (o->net) json_object_set_new(b, "net", json_string(o->net));
  if (o->ttl_seconds) json_object_set_new(b, "ttl_seconds", json_integer(o->ttl_seconds));
  if (o->claim_ref) json_object_set_new(b, "claim_ref", json_string(o->claim_ref));
  if (no_redirect) json_object_set_new(b, "no_redirect", json_true());
  if (require_promoted) json_object_set_new(b, "require_promoted", json_true());
  char *s = json_dumps(b, JSON_COMPACT);
  json_decref(b);
  char *r = sbx_strdup(s);
  free(s);
  return r;
}

typedef enum { TRY_OK, TRY_REDIRECT, TRY_FAIL } try_result;

/* One claim attempt at node. Fills *res (TRY_OK) or *red (TRY_REDIRECT). */
static try_result claim_try(sbx_client *c, const sbx_addr *node, const char *body, sbxi_claim_result *res,
                            sbxi_redirect *red, bool *transient, sbx_error *err) {
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  long status = 0;
  try_result tr = TRY_FAIL;
  *transient = false;
  int rc = http_request(c, node, "POST", "/v1/claim", body, c->token, c->claim_timeout_ms, &status, &resp, err);
  if (rc < 0) {
    *transient = rc == SBX_E_OS || rc == SBX_E_TIMEOUT;
    sbx_err_wrap(err, "claim");
  } else if (status != 200) {
    http_api_error(err, "claim", status, resp.ptr, resp.len);
    *transient = status == 401 || status == 404 || status == 429 || status == 500 || status == 502 ||
                 status == 503 || status == 504;
  } else if (sbxi_client_parse_claim(resp.ptr ? resp.ptr : "", resp.len, res, red, err) == 0) {
    tr = red->len ? TRY_REDIRECT : TRY_OK;
  }
  sbx_buf_free(&resp);
  return tr;
}

static int claim_done(sbx_client *c, const sbx_addr *node, const sbxi_claim_result *res, sbx_sandbox **out,
                      sbx_error *err) {
  char origin[SBX_ADDR_HOST_MAX + 32];
  sbx_addr_origin(node, origin, sizeof origin);
  /* an empty owner_addr means the node that answered */
  int rc = sandbox_new(c, res->id, res->token, res->owner_addr[0] ? res->owner_addr : origin, out, err);
  if (rc == 0) snprintf((*out)->deadline, sizeof (*out)->deadline, "%s", res->deadline);
  return rc;
}

int sbx_client_claim(sbx_client *c, const sbx_claim_opts *opts, sbx_sandbox **out, sbx_error *err) {
  sbx_error tmp;
  if (!err) err = &tmp;
  sbx_claim_opts copy;
  const sbx_claim_opts *o = &copy;
  if (sbxi_opts_load(&copy, sizeof copy, opts, SBXI_SIZE_TO(sbx_claim_opts, no_redirect), "claim options", err) < 0)
    return err->code;
  if (!opts || !o->template_ || !*o->template_) return sbx_err(err, SBX_E_INVAL, "claim: a template is required");
  sbxi_claim_result res;
  sbxi_redirect red;
  bool transient;
  char *body = claim_body(o, o->no_redirect, false);
  try_result tr = claim_try(c, &c->entry, body, &res, &red, &transient, err);
  sbx_free(body);
  if (tr == TRY_OK) return claim_done(c, &c->entry, &res, out, err);
  if (tr == TRY_FAIL) return err->code;

  char *retry = claim_body(o, true, red.require_promoted);
  int rc = SBX_E_REMOTE;
  for (size_t i = 0; i < red.len; i++) {
    sbx_addr node;
    if ((rc = sbx_addr_parse(red.addrs[i], &c->entry, &node, err)) < 0) {
      transient = false;
      continue;
    }
    sbxi_redirect again;
    tr = claim_try(c, &node, retry, &res, &again, &transient, err);
    if (tr == TRY_OK) {
      rc = claim_done(c, &node, &res, out, err);
      goto out;
    }
    if (tr == TRY_REDIRECT) {
      sbxi_redirect_free(&again);
      transient = false;
      sbx_err(err, SBX_E_PROTO, "claim: unexpected redirect from %s", red.addrs[i]);
    }
    rc = err->code;
  }
  if (transient) { /* §9.2 step 4: once more at the entry, which must answer itself */
    sbxi_redirect again;
    tr = claim_try(c, &c->entry, retry, &res, &again, &transient, err);
    if (tr == TRY_OK) {
      rc = claim_done(c, &c->entry, &res, out, err);
      goto out;
    }
    if (tr == TRY_REDIRECT) {
      sbxi_redirect_free(&again);
      sbx_err(err, SBX_E_PROTO, "claim: unexpected redirect from the entry node");
    }
    rc = err->code;
  }
out:
  sbx_free(retry);
  sbxi_redirect_free(&red);
  return rc;
}

/* ---- attach ---- */
int sbx_client_attach(sbx_client *c, const char *id, const char *token, const char *owner, sbx_sandbox **out,
                      sbx_error *err) {
  char origin[SBX_ADDR_HOST_MAX + 32];
  if (!owner) {
    sbx_addr_origin(&c->entry, origin, sizeof origin);
    owner = origin;
  }
  return sandbox_new(c, id, token, owner, out, err);
}

/* ---- sandbox-scoped verbs ---- */
static int sandbox_post(sbx_sandbox *s, const char *verb, const char *body, int timeout_ms, sbx_buf *resp,
                        sbx_error *err) {
  char path[160];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/%s", s->id, verb);
  return http_call(s->client, &s->owner, verb, "POST", path, body, s->token, timeout_ms, resp, err);
}

int sbx_sandbox_release(sbx_sandbox *s, sbx_error *err) {
  sbx_error tmp;
  if (!err) err = &tmp;
  conn_drop_all(s);
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  int rc = sandbox_post(s, "release", NULL, 30000, &resp, err); /* §9.6: bounded at 30 s */
  sbx_buf_free(&resp);
  if (rc == SBX_E_REMOTE && err->detail == 404) { /* already gone counts as released */
    sbx_err_clear(err);
    rc = 0;
  }
  return rc;
}

int sbx_sandbox_renew(sbx_sandbox *s, int64_t ttl_seconds, sbx_error *err) {
  sbx_error tmp;
  if (!err) err = &tmp;
  char body[64];
  snprintf(body, sizeof body, "{\"ttl_seconds\":%lld}", (long long)ttl_seconds);
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  int rc = sandbox_post(s, "renew", body, s->client->request_timeout_ms, &resp, err);
  if (rc == 0) {
    json_t *j = json_loadb(resp.ptr ? resp.ptr : "", resp.len, 0, NULL);
    const char *d = json_string_value(json_object_get(j, "deadline"));
    if (d) {
      pthread_mutex_lock(&s->lock);
      snprintf(s->deadline, sizeof s->deadline, "%s", d);
      pthread_mutex_unlock(&s->lock);
    } else {
      rc = sbx_err(err, SBX_E_PARSE, "renew: answer without a deadline");
    }
    json_decref(j);
  }
  sbx_buf_free(&resp);
  return rc;
}

int sbx_sandbox_hibernate(sbx_sandbox *s, sbx_error *err) {
  conn_drop_all(s); /* §9.6: the stop breaks them anyway */
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  int rc = sandbox_post(s, "hibernate", NULL, s->client->claim_timeout_ms, &resp, err);
  sbx_buf_free(&resp);
  return rc;
}

int sbx_sandbox_wake(sbx_sandbox *s, sbx_error *err) {
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  int rc = sandbox_post(s, "wake", NULL, s->client->claim_timeout_ms, &resp, err);
  sbx_buf_free(&resp);
  return rc;
}
