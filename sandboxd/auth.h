/* auth.h - bearer tokens against the node's secrets (spec §2).
 *
 * A unit of its own so that the router (which calls the handlers) and the
 * handlers (which call these) do not depend on each other. */
#ifndef SANDBOXD_AUTH_H
#define SANDBOXD_AUTH_H

#include <stdbool.h>

#include <sandbox/pool.h>

#include "http.h"

struct sbxd;
struct tenant;

struct caller {
  bool root;      /* root, or open mode */
  bool presented; /* the bearer was the configured api_token */
  const struct tenant *tenant;
};

/* Node and root classes (§2.3). On failure the error is already answered. */
int auth_node(struct sbxd *d, struct http_req *req, bool root_only, struct caller *out);
/* Sandbox classes (§2.4): the lease, or NULL with the error answered. */
sbx_lease *auth_sbx(struct sbxd *d, struct http_req *req, const char *id, bool allow_root, const char *notfound);
bool has_bearer(struct http_req *req);

#endif
