/* router.c - paths to handlers, and authentication (spec §2). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

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
  bool is_root = sbx_secret_eq(tok, c->api_token);
  /* Every tenant is compared, so timing does not tell which one matched. */
  const struct tenant *match = NULL;
  for (size_t i = 0; i < c->ntenants; i++)
    if (sbx_secret_eq(tok, c->tenants[i].token)) match = &c->tenants[i];
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
  if (allow_root && d->cfg->api_token && sbx_secret_eq(tok, d->cfg->api_token)) {
    if (!l) reply_error(req, 404, notfound);
    return l;
  }
  /* Compare even when the id is unknown, against a dummy of the same
   * length, so the answer takes as long either way. */
  bool ok = sbx_secret_eq(tok, l ? l->token : "00000000000000000000000000000000") && l;
  if (!ok) {
    reply_error(req, 404, notfound);
    return NULL;
  }
  return l;
}

static void not_implemented(struct http_req *req, const char *what) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s is not implemented on this node yet", what);
  reply_error(req, 501, msg);
}

static bool method_is(struct http_req *req, const char *m) { return strcmp(req->method, m) == 0; }

static void bad_method(struct http_req *req) { reply_error(req, 405, "method not allowed"); }

/* /v1/sandboxes/{id}[/{verb}[/{arg}]] */
static void route_sandbox(struct sbxd *d, struct http_req *req, const char *rest) {
  char id[64], verb[32] = "", arg[32] = "";
  const char *slash = strchr(rest, '/');
  size_t idl = slash ? (size_t)(slash - rest) : strlen(rest);
  if (idl == 0 || idl >= sizeof id) {
    /* An over-long id is still "a sandbox path": answer as for unknown. */
    if (idl >= sizeof id) {
      reply_error(req, has_bearer(req) ? 404 : 401, has_bearer(req) ? "unknown sandbox" : "missing bearer token");
      return;
    }
    reply_error(req, 404, "not found");
    return;
  }
  memcpy(id, rest, idl);
  id[idl] = '\0';
  if (slash) {
    const char *v = slash + 1;
    const char *s2 = strchr(v, '/');
    size_t vl = s2 ? (size_t)(s2 - v) : strlen(v);
    if (vl >= sizeof verb) {
      reply_error(req, 404, "not found");
      return;
    }
    memcpy(verb, v, vl);
    verb[vl] = '\0';
    if (s2) {
      if (strlen(s2 + 1) >= sizeof arg || strchr(s2 + 1, '/')) {
        if (strcmp(verb, "ports") == 0) {
          if (!has_bearer(req)) reply_error(req, 401, "missing bearer token");
          else reply_error(req, 400, "invalid port");
        } else {
          reply_error(req, 404, "not found");
        }
        return;
      }
      snprintf(arg, sizeof arg, "%s", s2 + 1);
      if (strcmp(verb, "ports") != 0) {
        reply_error(req, 404, "not found");
        return;
      }
    } else if (strcmp(verb, "ports") == 0) {
      reply_error(req, 404, "not found");
      return;
    }
  }
  if (!verb[0]) {
    if (method_is(req, "GET")) h_get(d, req, id);
    else bad_method(req);
    return;
  }
  static const struct {
    const char *verb, *method;
  } posts[] = {{"release", "POST"}, {"renew", "POST"},      {"hibernate", "POST"}, {"wake", "POST"},
               {"fork", "POST"},    {"promote", "POST"},    {"checkpoint", "POST"}, {"preview", "POST"},
               {"exec", "POST"},    {"stats", "GET"},       {"agent", "GET"},       {"ports", "GET"},
               {"owner", "GET"}};
  size_t i;
  for (i = 0; i < sizeof posts / sizeof *posts; i++)
    if (strcmp(verb, posts[i].verb) == 0) break;
  if (i == sizeof posts / sizeof *posts) {
    reply_error(req, 404, "not found");
    return;
  }
  if (!method_is(req, posts[i].method)) {
    bad_method(req);
    return;
  }
  if (strcmp(verb, "release") == 0) h_release(d, req, id);
  else if (strcmp(verb, "renew") == 0) h_renew(d, req, id);
  else if (strcmp(verb, "exec") == 0) h_exec(d, req, id);
  else if (strcmp(verb, "stats") == 0) h_stats(d, req, id);
  else if (strcmp(verb, "agent") == 0) h_agent(d, req, id);
  else if (strcmp(verb, "ports") == 0) h_port(d, req, id, arg);
  else if (strcmp(verb, "owner") == 0) h_owner(d, req, id);
  else not_implemented(req, verb);
}

void router_handle(struct http_req *req, void *arg) {
  struct sbxd *d = arg;
  const char *p = req->path;
  if (strcmp(p, "/healthz") == 0) {
    if (method_is(req, "GET") || method_is(req, "HEAD")) http_reply(req, 200, "text/plain", "ok\n", 3, NULL);
    else bad_method(req);
  } else if (strcmp(p, "/metrics") == 0) {
    if (method_is(req, "GET")) h_metrics(d, req);
    else bad_method(req);
  } else if (strcmp(p, "/v1/claim") == 0) {
    if (method_is(req, "POST")) h_claim(d, req);
    else bad_method(req);
  } else if (strcmp(p, "/v1/sandboxes") == 0) {
    if (method_is(req, "GET")) h_list(d, req);
    else bad_method(req);
  } else if (strncmp(p, "/v1/sandboxes/", 14) == 0) {
    route_sandbox(d, req, p + 14);
  } else if (strcmp(p, "/v1/info") == 0) {
    if (method_is(req, "GET")) h_info(d, req);
    else bad_method(req);
  } else if (strcmp(p, "/v1/pools") == 0) {
    if (method_is(req, "PUT")) h_pools(d, req);
    else bad_method(req);
  } else if (strcmp(p, "/v1/drain") == 0) {
    if (method_is(req, "POST")) h_drain(d, req, true);
    else if (method_is(req, "DELETE")) h_drain(d, req, false);
    else bad_method(req);
  } else if (strcmp(p, "/v1/peers") == 0) {
    if (method_is(req, "GET")) h_peers(d, req);
    else bad_method(req);
  } else if (strcmp(p, "/v1/volumes") == 0) {
    if (method_is(req, "GET")) h_volumes(d, req);
    else bad_method(req);
  } else if (strcmp(p, "/v1/templates") == 0) {
    if (method_is(req, "DELETE")) not_implemented(req, "template delete");
    else bad_method(req);
  } else if (strcmp(p, "/v1/checkpoints") == 0 || strncmp(p, "/v1/checkpoints/", 16) == 0) {
    not_implemented(req, "checkpoints");
  } else if (strncmp(p, "/p/", 3) == 0) {
    reply_error(req, 501, "preview not configured");
  } else {
    reply_error(req, 404, "not found");
  }
}
