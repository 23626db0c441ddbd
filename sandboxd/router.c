/* router.c - paths to handlers (spec §4), and the checks made on a request
 * head before its body is read.
 *
 * One table of (method, path pattern, handler, head check). A path that a
 * pattern matches under another method answers 405; a path no pattern
 * matches answers 404 (route_unmatched keeps the few answers the spec
 * gives malformed sandbox and checkpoint paths). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sandboxd.h"

/* What a pattern's placeholders captured. */
struct route_args {
  char id[64]; /* {id}: a sandbox id, 1-63 bytes; {cp}: a checkpoint id, 1-31 */
  char arg[32]; /* {arg}: 0-31 bytes */
};

/* The token check made at the head (router_head), before the body. */
enum head_check {
  HEAD_NONE = 0,
  HEAD_NODE,          /* a node or tenant token (auth_node) */
  HEAD_ROOT,          /* the node's root token */
  HEAD_LEASE_OR_ROOT, /* the sandbox's lease token, or root */
  HEAD_LEASE,         /* the sandbox's lease token only */
};

/* Exactly one handler is set: by what it takes. */
struct route {
  const char *method; /* NULL: any */
  const char *pattern;
  void (*plain)(struct sbxd *d, struct http_req *req);
  void (*with_id)(struct sbxd *d, struct http_req *req, const char *id);
  void (*with_arg)(struct sbxd *d, struct http_req *req, const char *id, const char *arg);
  enum head_check head;
};

static void not_implemented(struct http_req *req, const char *what) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s is not implemented on this node yet", what);
  reply_error(req, 501, msg);
}

static void h_healthz(struct sbxd *d, struct http_req *req) {
  (void)d;
  http_reply(req, 200, "text/plain", "ok\n", 3, NULL);
}
static void h_drain_on(struct sbxd *d, struct http_req *req) { h_drain(d, req, true); }
static void h_drain_off(struct sbxd *d, struct http_req *req) { h_drain(d, req, false); }
static void h_preview_off(struct sbxd *d, struct http_req *req) {
  (void)d;
  reply_error(req, 501, "preview not configured");
}
static void h_sandbox_preview(struct sbxd *d, struct http_req *req, const char *id) {
  (void)d, (void)id;
  not_implemented(req, "preview");
}
static void h_blob_get(struct sbxd *d, struct http_req *req, const char *id) { h_checkpoint_blob(d, req, id, false); }
static void h_blob_head(struct sbxd *d, struct http_req *req, const char *id) { h_checkpoint_blob(d, req, id, true); }

static const struct route routes[] = {
    {"GET", "/healthz", .plain = h_healthz},
    {"HEAD", "/healthz", .plain = h_healthz},
    {"GET", "/metrics", .plain = h_metrics},
    {"POST", "/v1/claim", .plain = h_claim, .head = HEAD_NODE},
    {"GET", "/v1/sandboxes", .plain = h_list},
    {"GET", "/v1/sandboxes/{id}", .with_id = h_get},
    {"GET", "/v1/sandboxes/{id}/", .with_id = h_get},
    {"POST", "/v1/sandboxes/{id}/release", .with_id = h_release, .head = HEAD_LEASE_OR_ROOT},
    {"POST", "/v1/sandboxes/{id}/renew", .with_id = h_renew, .head = HEAD_LEASE_OR_ROOT},
    {"POST", "/v1/sandboxes/{id}/hibernate", .with_id = h_hibernate, .head = HEAD_LEASE_OR_ROOT},
    {"POST", "/v1/sandboxes/{id}/wake", .with_id = h_wake, .head = HEAD_LEASE_OR_ROOT},
    {"POST", "/v1/sandboxes/{id}/fork", .with_id = h_fork, .head = HEAD_NODE},
    {"POST", "/v1/sandboxes/{id}/promote", .with_id = h_promote, .head = HEAD_NODE},
    {"POST", "/v1/sandboxes/{id}/checkpoint", .with_id = h_checkpoint_create, .head = HEAD_NODE},
    {"POST", "/v1/sandboxes/{id}/preview", .with_id = h_sandbox_preview},
    {"POST", "/v1/sandboxes/{id}/exec", .with_id = h_exec, .head = HEAD_LEASE},
    {"GET", "/v1/sandboxes/{id}/stats", .with_id = h_stats},
    {"GET", "/v1/sandboxes/{id}/agent", .with_id = h_agent},
    {"GET", "/v1/sandboxes/{id}/ports/{arg}", .with_arg = h_port},
    {"GET", "/v1/sandboxes/{id}/owner", .with_id = h_owner},
    {"GET", "/v1/info", .plain = h_info},
    {"PUT", "/v1/pools", .plain = h_pools, .head = HEAD_ROOT},
    {"POST", "/v1/drain", .plain = h_drain_on, .head = HEAD_ROOT},
    {"DELETE", "/v1/drain", .plain = h_drain_off, .head = HEAD_ROOT},
    {"GET", "/v1/peers", .plain = h_peers},
    {"GET", "/v1/volumes", .plain = h_volumes},
    {"DELETE", "/v1/templates", .plain = h_template_delete},
    {"GET", "/v1/checkpoints", .plain = h_checkpoint_list},
    {"DELETE", "/v1/checkpoints/{cp}", .with_id = h_checkpoint_delete},
    {"POST", "/v1/checkpoints/{cp}/claim", .with_id = h_checkpoint_claim},
    {"GET", "/v1/checkpoints/{cp}/blob", .with_id = h_blob_get},
    {"HEAD", "/v1/checkpoints/{cp}/blob", .with_id = h_blob_head},
    {NULL, "/p/*", .plain = h_preview_off},
};

/* Copy one path segment into out if its length is within [min, max]. */
static bool capture(const char **path, char *out, size_t min, size_t max) {
  size_t n = strcspn(*path, "/");
  if (n < min || n > max) return false;
  memcpy(out, *path, n);
  out[n] = '\0';
  *path += n;
  return true;
}

/* Whether path matches pat, filling a. At the head, an empty sandbox id
 * still matches, so the token check answers as it always did. */
static bool match(const char *pat, const char *path, bool at_head, struct route_args *a) {
  while (*pat) {
    if (*pat == '*') return true;
    if (*pat != '{') {
      if (*pat++ != *path++) return false;
      continue;
    }
    bool ok;
    if (strncmp(pat, "{id}", 4) == 0) ok = capture(&path, a->id, at_head ? 0 : 1, sizeof a->id - 1);
    else if (strncmp(pat, "{cp}", 4) == 0) ok = capture(&path, a->id, 1, 31);
    else ok = capture(&path, a->arg, 0, sizeof a->arg - 1);
    if (!ok) return false;
    pat = strchr(pat, '}') + 1;
  }
  return *path == '\0';
}

static bool method_fits(const struct route *r, const struct http_req *req) {
  return !r->method || strcmp(req->method, r->method) == 0;
}

/* The 404s of paths no pattern matches, as the spec gives them. */
static void route_unmatched(struct http_req *req) {
  const char *p = req->path;
  if (strncmp(p, "/v1/sandboxes/", 14) == 0) {
    const char *rest = p + 14;
    size_t idl = strcspn(rest, "/");
    /* An over-long id is still "a sandbox path": answer as for unknown. */
    if (idl >= sizeof ((struct route_args *)0)->id) {
      reply_error(req, has_bearer(req) ? 404 : 401, has_bearer(req) ? "unknown sandbox" : "missing bearer token");
      return;
    }
    /* A ports path whose port no pattern takes (too long, or with a '/'). */
    if (idl > 0 && strncmp(rest + idl, "/ports/", 7) == 0) {
      if (!has_bearer(req)) reply_error(req, 401, "missing bearer token");
      else reply_error(req, 400, "invalid port");
      return;
    }
  } else if (strncmp(p, "/v1/checkpoints/", 16) == 0 && strcspn(p + 16, "/") >= 32) {
    reply_error(req, 404, "unknown checkpoint");
    return;
  }
  reply_error(req, 404, "not found");
}

void router_handle(struct http_req *req, void *arg) {
  struct sbxd *d = arg;
  bool path_known = false;
  for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
    const struct route *r = &routes[i];
    struct route_args a;
    if (!match(r->pattern, req->path, false, &a)) continue;
    if (!method_fits(r, req)) {
      path_known = true;
      continue;
    }
    if (r->plain) r->plain(d, req);
    else if (r->with_id) r->with_id(d, req, a.id);
    else r->with_arg(d, req, a.id, a.arg);
    return;
  }
  if (path_known) reply_error(req, 405, "method not allowed");
  else route_unmatched(req);
}

/* The endpoints that read a body check their token at the head, with the
 * same functions and answers as their handlers (spec §2.3, §2.4): a
 * caller without a valid token is refused before its body is waited for,
 * and cannot hold a connection open by never sending it. The handler
 * checks again with the body, since a lease may end in between. Other
 * requests that announce a body are read as before, within the body
 * deadline. */
bool router_head(struct http_req *req, void *arg) {
  struct sbxd *d = arg;
  for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
    const struct route *r = &routes[i];
    struct route_args a;
    if (r->head == HEAD_NONE || !method_fits(r, req) || !match(r->pattern, req->path, true, &a)) continue;
    struct caller who;
    switch (r->head) {
    case HEAD_NODE: return auth_node(d, req, false, &who) == 0;
    case HEAD_ROOT: return auth_node(d, req, true, &who) == 0;
    case HEAD_LEASE_OR_ROOT: return auth_sbx(d, req, a.id, true, "unknown sandbox") != NULL;
    case HEAD_LEASE: return auth_sbx(d, req, a.id, false, "unknown sandbox") != NULL;
    case HEAD_NONE: break;
    }
    return true;
  }
  return true;
}
