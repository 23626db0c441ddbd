/* auth.c - bearer tokens against the node's secrets (spec §2). */
#include <string.h>
#include <strings.h>

#include "../libsandbox/pool/secret.h"
#include "sandboxd.h"

/* The bearer token, or NULL when missing (absent, other scheme, empty). */
static const char *bearer(struct http_req *req, char *buf, size_t len) {
  const char *h = http_header(req, "Authorization");
  if (!h) return NULL;
  if (strncasecmp(h, "bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t')) return NULL;
  const char *p = h + 6;
  while (*p == ' ' || *p == '\t') p++;
  size_t n = strlen(p);
  while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
  if (n == 0 || n >= len) return n ? "" : NULL;
  memcpy(buf, p, n);
  buf[n] = '\0';
  return buf;
}

bool has_bearer(struct http_req *req) {
  char b[1024];
  return bearer(req, b, sizeof b) != NULL;
}

int auth_node(struct sbxd *d, struct http_req *req, bool root_only, struct caller *out) {
  memset(out, 0, sizeof *out);
  char buf[1024];
  const char *tok = bearer(req, buf, sizeof buf);
  const struct config *c = d->cfg;
  if (!c->api_token) {
    out->root = true;
    return 0;
  }
  if (!tok) {
    reply_error(req, 401, "missing bearer token");
    return -1;
  }
  bool is_root = sbxi_secret_eq(tok, c->api_token);
  /* Every tenant is compared, so timing does not tell which one matched. */
  const struct tenant *match = NULL;
  for (size_t i = 0; i < c->ntenants; i++)
    if (sbxi_secret_eq(tok, c->tenants[i].token)) match = &c->tenants[i];
  if (is_root) {
    out->root = out->presented = true;
    return 0;
  }
  if (!match) {
    reply_error(req, 401, "invalid api token");
    return -1;
  }
  if (root_only) {
    reply_error(req, 403, "operator token required");
    return -1;
  }
  out->tenant = match;
  return 0;
}

sbx_lease *auth_sbx(struct sbxd *d, struct http_req *req, const char *id, bool allow_root, const char *notfound) {
  char buf[1024];
  const char *tok = bearer(req, buf, sizeof buf);
  if (!tok) {
    reply_error(req, 401, "missing bearer token");
    return NULL;
  }
  sbx_lease *l = sbxi_lease_id_valid(id) ? sbx_lease_find(d->leases, id) : NULL;
  if (allow_root && d->cfg->api_token && sbxi_secret_eq(tok, d->cfg->api_token)) {
    if (!l) reply_error(req, 404, notfound);
    return l;
  }
  /* Compare even when the id is unknown, against a dummy of the same
   * length, so the answer takes as long either way. */
  bool ok = sbxi_secret_eq(tok, l ? l->token : "00000000000000000000000000000000") && l;
  if (!ok) {
    reply_error(req, 404, notfound);
    return NULL;
  }
  return l;
}
