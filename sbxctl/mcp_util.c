/* sbxctl mcp: the registry of created sandboxes, UTF-8 repair for output
 * that goes into JSON, and error wording an agent can act on. */
#include <stdio.h>
#include <string.h>

#include "util/util.h"
#include "mcp.h"

void mcp_registry_init(mcp_registry *r) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->lock, NULL);
}

bool mcp_registry_add(mcp_registry *r, sbx_sandbox *s) {
  pthread_mutex_lock(&r->lock);
  if (r->closing) {
    pthread_mutex_unlock(&r->lock);
    return false;
  }
  if (r->len == r->alloc) {
    r->alloc = r->alloc ? r->alloc * 2 : 16;
    r->items = sbx_reallocarray(r->items, r->alloc, sizeof *r->items);
  }
  r->items[r->len++] = (mcp_entry){.s = s, .live = true};
  pthread_mutex_unlock(&r->lock);
  return true;
}

sbx_sandbox *mcp_registry_get(mcp_registry *r, const char *id) {
  sbx_sandbox *s = NULL;
  pthread_mutex_lock(&r->lock);
  for (size_t i = 0; i < r->len && !s; i++)
    if (r->items[i].live && strcmp(sbx_sandbox_id(r->items[i].s), id) == 0) s = r->items[i].s;
  pthread_mutex_unlock(&r->lock);
  return s;
}

void mcp_registry_forget(mcp_registry *r, const char *id) {
  pthread_mutex_lock(&r->lock);
  for (size_t i = 0; i < r->len; i++)
    if (strcmp(sbx_sandbox_id(r->items[i].s), id) == 0) r->items[i].live = false;
  pthread_mutex_unlock(&r->lock);
}

int mcp_registry_release_all(mcp_registry *r) {
  pthread_mutex_lock(&r->lock);
  r->closing = true;
  pthread_mutex_unlock(&r->lock);
  /* closing stops additions, so the array is stable without the lock; the
   * lock is not held across network calls */
  int failed = 0;
  for (size_t i = 0; i < r->len; i++) {
    pthread_mutex_lock(&r->lock);
    bool live = r->items[i].live;
    r->items[i].live = false;
    pthread_mutex_unlock(&r->lock);
    if (!live) continue;
    sbx_error err;
    if (sbx_sandbox_release(r->items[i].s, &err) < 0) {
      fprintf(stderr, "sbxctl mcp: release %s: %s\n", sbx_sandbox_id(r->items[i].s), err.msg);
      failed++;
    } else {
      fprintf(stderr, "sbxctl mcp: released %s\n", sbx_sandbox_id(r->items[i].s));
    }
  }
  return failed;
}

void mcp_registry_free(mcp_registry *r) {
  for (size_t i = 0; i < r->len; i++) sbx_sandbox_free(r->items[i].s);
  sbx_free(r->items);
  pthread_mutex_destroy(&r->lock);
  memset(r, 0, sizeof *r);
}

json_t *mcp_json_text(const char *p, size_t n, bool *repaired) {
  bool valid = sbxi_utf8_valid_len(p, n) == n;
  if (repaired) *repaired = !valid;
  if (valid) return json_stringn(p, n);
  /* worst case every byte becomes the 3-byte U+FFFD */
  char *fixed = sbx_malloc(n * 3 + 1);
  json_t *j = json_stringn(fixed, sbxi_utf8_repair(p, n, fixed));
  sbx_free(fixed);
  return j;
}

int mcp_sandbox(mcp_call *c, const char *id, sbx_sandbox **out, bool *owned, sbx_error *err) {
  *owned = false;
  if (sbx_client_check_header_value("sandbox_id", id, strlen(id), err) < 0)
    return sbx_err(err, SBX_E_INVAL, "invalid sandbox_id \"%s\"", id);
  if ((*out = mcp_registry_get(c->reg, id))) return 0;
  if (!c->token || !*c->token)
    return sbx_err(err, SBX_E_NOTFOUND,
                   "unknown sandbox_id \"%s\": this server did not create it (or it was released); call "
                   "create_sandbox to get a new one",
                   id);
  int rc = sbx_client_lookup(c->client, id, c->token, out, err);
  if (rc < 0) {
    mcp_explain("look up sandbox", id, err);
    return rc;
  }
  *owned = true;
  return 0;
}

void mcp_explain(const char *what, const char *id, sbx_error *err) {
  char orig[sizeof err->msg];
  snprintf(orig, sizeof orig, "%s", err->msg);
  sbx_client_err_kind k = sbx_client_error_kind(err);
  const char *hint = "";
  if (((k == SBX_CLIENT_ERR_API && err->detail == 404) || err->code == SBX_E_NOTFOUND) && id)
    hint = " (no such sandbox: it may have expired or been released; call create_sandbox for a new one)";
  else if (k == SBX_CLIENT_ERR_API && (err->detail == 401 || err->detail == 403))
    hint = " (sandboxd refused the token: set --token or SANDBOXD_TOKEN)";
  else if (k == SBX_CLIENT_ERR_API && err->detail == 501)
    hint = " (this sandboxd does not implement that verb yet)";
  else if (err->code == SBX_E_OS || (err->code == SBX_E_TIMEOUT && k != SBX_CLIENT_ERR_API))
    hint = " (sandboxd or the sandbox did not answer; check that sandboxd runs and the sandbox exists)";
  /* A message too long for err->msg is cut at its end. */
  int n = id ? snprintf(err->msg, sizeof err->msg, "%s %s failed: %s%s", what, id, orig, hint)
             : snprintf(err->msg, sizeof err->msg, "%s failed: %s%s", what, orig, hint);
  if (n < 0) err->msg[0] = '\0';
}
