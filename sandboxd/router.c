/* router.c - paths to handlers (spec §4), and the checks made on a request
 * head before its body is read. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sandboxd.h"

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
  else if (strcmp(verb, "hibernate") == 0) h_hibernate(d, req, id);
  else if (strcmp(verb, "wake") == 0) h_wake(d, req, id);
  else if (strcmp(verb, "fork") == 0) h_fork(d, req, id);
  else if (strcmp(verb, "checkpoint") == 0) h_checkpoint_create(d, req, id);
  else if (strcmp(verb, "promote") == 0) h_promote(d, req, id);
  else not_implemented(req, verb);
}

/* /v1/checkpoints/{id}[/claim|/blob] */
static void route_checkpoint(struct sbxd *d, struct http_req *req, const char *rest) {
  char id[32];
  const char *slash = strchr(rest, '/');
  size_t idl = slash ? (size_t)(slash - rest) : strlen(rest);
  if (idl == 0 || idl >= sizeof id) {
    reply_error(req, 404, idl ? "unknown checkpoint" : "not found");
    return;
  }
  memcpy(id, rest, idl);
  id[idl] = '\0';
  if (!slash) {
    if (method_is(req, "DELETE")) h_checkpoint_delete(d, req, id);
    else bad_method(req);
  } else if (strcmp(slash, "/claim") == 0) {
    if (method_is(req, "POST")) h_checkpoint_claim(d, req, id);
    else bad_method(req);
  } else if (strcmp(slash, "/blob") == 0) {
    if (method_is(req, "GET") || method_is(req, "HEAD")) h_checkpoint_blob(d, req, id, method_is(req, "HEAD"));
    else bad_method(req);
  } else {
    reply_error(req, 404, "not found");
  }
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
    if (method_is(req, "DELETE")) h_template_delete(d, req);
    else bad_method(req);
  } else if (strcmp(p, "/v1/checkpoints") == 0) {
    if (method_is(req, "GET")) h_checkpoint_list(d, req);
    else bad_method(req);
  } else if (strncmp(p, "/v1/checkpoints/", 16) == 0) {
    route_checkpoint(d, req, p + 16);
  } else if (strncmp(p, "/p/", 3) == 0) {
    reply_error(req, 501, "preview not configured");
  } else {
    reply_error(req, 404, "not found");
  }
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
  const char *p = req->path;
  struct caller who;
  if (strcmp(p, "/v1/claim") == 0 && method_is(req, "POST")) return auth_node(d, req, false, &who) == 0;
  if ((strcmp(p, "/v1/pools") == 0 && method_is(req, "PUT")) ||
      (strcmp(p, "/v1/drain") == 0 && (method_is(req, "POST") || method_is(req, "DELETE"))))
    return auth_node(d, req, true, &who) == 0;
  if (strncmp(p, "/v1/sandboxes/", 14) != 0 || !method_is(req, "POST")) return true;
  char id[64];
  const char *rest = p + 14, *slash = strchr(rest, '/');
  if (!slash || (size_t)(slash - rest) >= sizeof id) return true;
  memcpy(id, rest, (size_t)(slash - rest));
  id[slash - rest] = '\0';
  const char *verb = slash + 1;
  if (strcmp(verb, "release") == 0 || strcmp(verb, "renew") == 0)
    return auth_sbx(d, req, id, true, "unknown sandbox") != NULL;
  if (strcmp(verb, "exec") == 0) return auth_sbx(d, req, id, false, "unknown sandbox") != NULL;
  if (strcmp(verb, "hibernate") == 0 || strcmp(verb, "wake") == 0)
    return auth_sbx(d, req, id, true, "unknown sandbox") != NULL;
  if (strcmp(verb, "fork") == 0 || strcmp(verb, "checkpoint") == 0 || strcmp(verb, "promote") == 0)
    return auth_node(d, req, false, &who) == 0;
  return true;
}
