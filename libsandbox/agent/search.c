/* Client calls of fs_find, fs_replace (§5.7) and fs_watch (§5.8): one call
 * per verb, results streamed through the caller's callback. */
#include <string.h>

#include <sandbox/agent.h>

#include "agent/agent_priv.h"
#include "core/opts.h"

/* A callback's verdict: 0 goes on; otherwise the stream is abandoned mid-way,
 * so the connection cannot be reused. A positive value is a normal stop. */
static int stop(sbx_agent *a, int rc) {
  agent_broken(a, rc < 0 ? rc : 0);
  return rc < 0 ? rc : 1;
}

static int find_frame(sbx_agent *a, const sbx_wire_resp *r, void *ud, sbx_error *err) {
  (void)err;
  const sbx_find_opts *o = ud;
  if (r->type != SBX_RESP_MATCH) return AGENT_FRAME_UNEXPECTED;
  int rc = o->on_match ? o->on_match(o->ud, &r->u.match) : 0;
  return rc ? stop(a, rc) : 0;
}

int sbx_agent_find(sbx_agent *a, const sbx_find_opts *opts, sbx_error *err) {
  sbx_find_opts o;
  int rc = sbxi_opts_load(&o, sizeof o, opts, SBXI_SIZE_TO(sbx_find_opts, ud), "find options", err);
  if (rc < 0) return rc;
  if (!opts || !o.path || !o.pattern) return sbx_err(err, SBX_E_INVAL, "find: path and pattern are required");
  sbx_wire_req r = {.op = SBX_OP_FS_FIND};
  r.u.fs_find.path = o.path;
  r.u.fs_find.pattern = o.pattern;
  r.u.fs_find.glob = o.glob;
  if ((rc = sbx_agent_send(a, &r, err)) < 0) return rc;
  return agent_stream(a, "fs_find", find_frame, &o, err);
}

static int replace_frame(sbx_agent *a, const sbx_wire_resp *r, void *ud, sbx_error *err) {
  (void)err;
  const sbx_replace_opts *o = ud;
  if (r->type != SBX_RESP_REPLACED) return AGENT_FRAME_UNEXPECTED;
  int rc = o->on_replaced ? o->on_replaced(o->ud, &r->u.replaced) : 0;
  return rc ? stop(a, rc) : 0;
}

int sbx_agent_replace(sbx_agent *a, const sbx_replace_opts *opts, sbx_error *err) {
  sbx_replace_opts o;
  int rc = sbxi_opts_load(&o, sizeof o, opts, SBXI_SIZE_TO(sbx_replace_opts, ud), "replace options", err);
  if (rc < 0) return rc;
  if (!opts || !o.pattern || !o.replacement || (o.nfiles && !o.files))
    return sbx_err(err, SBX_E_INVAL, "replace: files, pattern and replacement are required");
  sbx_wire_req r = {.op = SBX_OP_FS_REPLACE};
  r.u.fs_replace.files.items = (const char **)o.files;
  r.u.fs_replace.files.len = o.nfiles;
  r.u.fs_replace.pattern = o.pattern;
  r.u.fs_replace.replacement = o.replacement;
  if ((rc = sbx_agent_send(a, &r, err)) < 0) return rc;
  return agent_stream(a, "fs_replace", replace_frame, &o, err);
}

int sbx_agent_watch(sbx_agent *a, const sbx_watch_opts *opts, sbx_error *err) {
  sbx_watch_opts o;
  int rc = sbxi_opts_load(&o, sizeof o, opts, SBXI_SIZE_TO(sbx_watch_opts, ud), "watch options", err);
  if (rc < 0) return rc;
  if (!opts || !o.path) return sbx_err(err, SBX_E_INVAL, "watch: path is required");
  sbx_wire_req r = {.op = SBX_OP_FS_WATCH};
  r.u.fs_watch.path = o.path;
  r.u.fs_watch.has_recursive = true;
  r.u.fs_watch.recursive = o.recursive;
  if ((rc = sbx_agent_send(a, &r, err)) < 0) return rc;
  for (bool ready = false;;) {
    sbx_wire_resp resp;
    if ((rc = sbx_agent_recv(a, &resp, err)) < 0) return rc;
    if (resp.type == SBX_RESP_ERROR) {
      rc = agent_remote_error(&resp, err);
    } else if (!ready && resp.type == SBX_RESP_READY) {
      ready = true;
      if (o.on_ready) o.on_ready(o.ud);
    } else if (ready && resp.type == SBX_RESP_EVENT) {
      int cb = o.on_event ? o.on_event(o.ud, &resp.u.event) : 0;
      if (cb) rc = stop(a, cb) > 0 ? 2 : cb;
    } else {
      rc = agent_unexpected(a, &resp, "fs_watch", err);
    }
    sbx_wire_resp_free(&resp);
    if (rc == 2) return 0;
    if (rc != 0) return rc;
  }
}
