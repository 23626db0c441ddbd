/* relay_upgrade.c - the checks every upgrade shares (the Upgrade token,
 * the bearer, the sandbox) and a connection to its agent; h_agent, which
 * then picks the relay (spec §4.21). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "relay.h"

static bool upgrade_token(struct http_req *req, const char *want) {
  const char *h = http_header(req, "Upgrade");
  if (!h) return false;
  size_t wl = strlen(want);
  for (const char *p = h; *p;) {
    while (*p == ' ' || *p == '\t' || *p == ',') p++;
    const char *e = p;
    while (*e && *e != ',' && *e != ' ' && *e != '\t' && *e != '/') e++;
    if ((size_t)(e - p) == wl && strncasecmp(p, want, wl) == 0) return true;
    while (*e && *e != ',') e++;
    p = e;
  }
  return false;
}

static void upgrade_required(struct http_req *req, const char *proto) {
  char hdr[64];
  snprintf(hdr, sizeof hdr, "Upgrade: %s\r\n", proto);
  const char body[] = "{\"error\":\"upgrade required\"}\n";
  http_reply(req, 426, "application/json", body, sizeof body - 1, hdr);
}

/* The checks every upgrade shares, in the spec's order (bearer, Upgrade
 * token, the sandbox), then a connection to its agent. Answers the error
 * itself and returns NULL when any of them fails. */
sbx_lease *upgrade_open(struct sbxd *d, struct http_req *req, const char *id, const char *proto, int *fd) {
  if (!upgrade_token(req, proto)) {
    upgrade_required(req, proto);
    return NULL;
  }
  sbx_lease *l = auth_sbx(d, req, id, false, "unknown sandbox");
  if (!l || lease_touch(d, req, l) < 0) return NULL; /* a hibernated sandbox wakes (§5.6) */
  sbx_error err;
  if (!l->inst || inst_connect(l->inst, fd, &err) < 0) {
    if (l->inst) sbx_warn("%s upgrade %s: %s", proto, l->id, err.msg);
    reply_error(req, 502, "guest agent unreachable");
    return NULL;
  }
  return l;
}

void h_agent(struct sbxd *d, struct http_req *req, const char *id) {
  if (!has_bearer(req)) {
    reply_error(req, 401, "missing bearer token");
    return;
  }
  int fd;
  sbx_lease *l = upgrade_open(d, req, id, "silkd", &fd);
  if (!l) return;
  if (agent_splice(d, req, l, fd)) return;
  relay_bev_agent(d, req, l, fd);
}
