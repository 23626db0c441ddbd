/* claims.c - claim, release, renew, the sandbox index and reaping
 * (spec §4.1, 4.3, 4.4, 4.7-4.9, 4.23, 5.11). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sandbox/driver.h>

#include "sandboxd.h"

#define PROBE_CLONE_MS 15000
#define PROBE_COLD_MS 90000

static json_t *key_json(const sbx_pool_key *k) {
  return json_pack("{s:s,s:s,s:s}", "template", k->tmpl, "net", k->net, "size", k->size);
}

/* The 500 of a change the journal refused: the verb and the cause, never
 * a path. */
void reply_journal_error(struct http_req *req, const char *verb, const sbx_error *err) {
  char msg[160];
  /* The cause is cut to fit: the log has it whole. */
  snprintf(msg, sizeof msg, "%s failed: journal write failed (%.96s)", verb,
           err->os_errno ? strerror(err->os_errno) : err->msg);
  reply_error(req, 500, msg);
}

/* ---- the access log: one line per claim, release, reap and failed claim ---- */

static void access_log(sbx_log_level lvl, const char *ev, const char *id, const sbx_pool_key *k, const char *tenant,
                       const char *tier, const char *dur_key, double dur, const char *error) {
  char key[sizeof k->tmpl + sizeof k->net + sizeof k->size + 2];
  snprintf(key, sizeof key, "%s|%s|%s", k->tmpl, k->net, k->size);
  sbx_log_field f[6];
  size_t n = 0;
  if (id) f[n++] = SBX_LOG_STR("id", id);
  f[n++] = SBX_LOG_STR("key", key);
  if (tenant && tenant[0]) f[n++] = SBX_LOG_STR("tenant", tenant);
  if (tier) f[n++] = SBX_LOG_STR("tier", tier);
  f[n++] = SBX_LOG_NUM(dur_key, dur);
  if (error) f[n++] = SBX_LOG_STR("error", error);
  sbx_log_fields(lvl, f, n, "%s", ev);
}

/* A lease's age at its end, for the release and reap lines. */
static void access_log_end(const char *ev, const sbx_lease *l) {
  access_log(SBX_LOG_INFO, ev, l->id, &l->key, l->tenant, NULL, "held_seconds", (double)(now_unix() - l->claimed_at),
             NULL);
}

/* ---- claim ---- */

struct claim_op {
  struct sbxd *d;
  struct http_req *req;
  sbx_lease proto;
  char *claim_ref;
  bool client_gone;
  bool pooled;
  uint64_t started_ns;
};

static void claim_client_gone(void *arg) {
  struct claim_op *op = arg;
  op->client_gone = true;
}

/* A claim that gets no sandbox: logged with its cause, and answered
 * with it (a missing template, a boot that failed), cut to fit. */
static void claim_failed(struct claim_op *op, int status, const char *cause) {
  double ms = (double)(sbx_now_ns() - op->started_ns) / 1e6;
  access_log(SBX_LOG_WARN, "claim failed", NULL, &op->proto.key, op->proto.tenant, NULL, "duration_ms", ms, cause);
  char msg[240];
  snprintf(msg, sizeof msg, "provisioning failed: %.200s", cause);
  reply_error(op->req, status, msg);
}

static void claim_commit(struct claim_op *op, struct inst *s, const char *tier) {
  struct sbxd *d = op->d;
  sbx_lease *l;
  sbx_error err;
  op->proto.inst = s;
  snprintf(op->proto.vm, sizeof op->proto.vm, "%s", inst_name(s));
  int64_t now = now_unix();
  op->proto.claimed_at = now;
  op->proto.deadline = now + op->proto.ttl;
  op->proto.claim_ref = op->claim_ref;
  struct jmark jm;
  if (journal_begin(d, &jm, &err) < 0) {
    sbx_lease_unreserve(d->leases, op->proto.tenant);
    sbx_pool_mgr_destroy(d->pm, s);
    reply_journal_error(op->req, "claim", &err);
    return;
  }
  if (sbx_lease_commit(d->leases, &op->proto, true, &l, &err) < 0) {
    sbx_lease_unreserve(d->leases, op->proto.tenant);
    sbx_pool_mgr_destroy(d->pm, s);
    claim_failed(op, 500, err.msg);
    return;
  }
  if (journal_put(d, l, &err) < 0 || usage_event(d, "claim", l, l->key.tmpl, &err) < 0) {
    /* Not on disk, so not a claim: the sandbox goes, the slot is free. */
    journal_abort(d, &jm, &err);
    sbx_lease_remove(d->leases, l);
    sbx_pool_mgr_destroy(d->pm, s);
    reply_journal_error(op->req, "claim", &err);
    return;
  }
  journal_commit(d);
  watch_arm(d, l);
  double secs = (double)(sbx_now_ns() - op->started_ns) / 1e9;
  metrics_claim(&d->m, metrics_tier(tier), secs);
  if (strcmp(tier, "warm") == 0) d->m.claims_warm++;
  else if (strcmp(tier, "clone") == 0) d->m.claims_clone++;
  else d->m.claims_cold++;
  char dl[64];
  fmt_time(l->deadline, 0, false, dl, sizeof dl);
  access_log(SBX_LOG_INFO, "claim", l->id, &l->key, l->tenant, tier, "duration_ms", secs * 1e3, NULL);
  durable_reply(d, op->req, "claim", 200,
                json_pack("{s:s,s:s,s:s,s:s}", "id", l->id, "token", l->token, "deadline", dl, "owner_addr",
                          d->owner_addr));
}

static void claim_free(struct claim_op *op) {
  sbx_free(op->claim_ref);
  sbx_free(op);
}

static void claim_provisioned(void *arg, void *inst, const sbx_error *err) {
  struct claim_op *op = arg;
  struct sbxd *d = op->d;
  if (!inst || op->client_gone || d->stopping) {
    sbx_lease_unreserve(d->leases, op->proto.tenant);
    if (inst) sbx_pool_mgr_destroy(d->pm, inst);
    claim_failed(op, 500, inst ? (d->stopping ? "shutting down" : "client went away") : err->msg);
  } else {
    claim_commit(op, inst, op->pooled ? "clone" : "cold");
  }
  claim_free(op);
}

static int body_str(struct http_req *req, json_t *body, const char *field, const char **out) {
  json_t *v = json_object_get(body, field);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_string(v)) {
    char msg[96];
    snprintf(msg, sizeof msg, "invalid %s: must be a string", field);
    reply_error(req, 400, msg);
    return -1;
  }
  *out = json_string_value(v);
  return 0;
}

static int body_bool(struct http_req *req, json_t *body, const char *field, bool *out) {
  json_t *v = json_object_get(body, field);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_boolean(v)) {
    char msg[96];
    snprintf(msg, sizeof msg, "invalid %s: must be true or false", field);
    reply_error(req, 400, msg);
    return -1;
  }
  *out = json_is_true(v);
  return 0;
}

/* ttl_seconds per §1.9: absent/0 = 300, > 86400 clamped, negative 400. */
int body_ttl(struct http_req *req, json_t *body, int *out) {
  json_t *v = json_object_get(body, "ttl_seconds");
  *out = TTL_DEFAULT;
  if (!v || json_is_null(v)) return 0;
  if (!json_is_integer(v)) {
    reply_error(req, 400, "invalid ttl_seconds: must be an integer");
    return -1;
  }
  json_int_t t = json_integer_value(v);
  if (t < 0) {
    reply_error(req, 400, "invalid ttl_seconds: must not be negative");
    return -1;
  }
  *out = t == 0 ? TTL_DEFAULT : t > TTL_MAX ? TTL_MAX : (int)t;
  return 0;
}

void h_claim(struct sbxd *d, struct http_req *req) {
  struct caller who;
  if (auth_node(d, req, false, &who) < 0) return;
  json_t *body = decode_body(req, false);
  if (!body) return;
  const char *tmpl = NULL, *net = "none", *size = "small", *ref = NULL;
  bool no_redirect = false, require_promoted = false, attach_only = false;
  int ttl;
  if (body_str(req, body, "template", &tmpl) < 0 || body_str(req, body, "net", &net) < 0 ||
      body_str(req, body, "size", &size) < 0 || body_str(req, body, "claim_ref", &ref) < 0 ||
      body_bool(req, body, "no_redirect", &no_redirect) < 0 ||
      body_bool(req, body, "require_promoted", &require_promoted) < 0 ||
      body_bool(req, body, "volumes_attach_only", &attach_only) < 0 || body_ttl(req, body, &ttl) < 0)
    goto out;
  if (!tmpl || !valid_name(tmpl)) {
    reply_error(req, 400, "invalid template name");
    goto out;
  }
  if (!valid_net(net)) {
    reply_error(req, 400, "invalid net");
    goto out;
  }
  if (!valid_size(size)) {
    reply_error(req, 400, "invalid size");
    goto out;
  }
  if (ref) {
    size_t rl = strlen(ref);
    bool ctl = false;
    for (size_t i = 0; i < rl; i++) ctl |= (unsigned char)ref[i] < 0x20 || ref[i] == 0x7f;
    if (rl > 256 || ctl || rl != json_string_length(json_object_get(body, "claim_ref"))) {
      reply_error(req, 400, "invalid claim_ref: at most 256 bytes, no control characters");
      goto out;
    }
  }
  json_t *vols = json_object_get(body, "volumes");
  if (vols && !json_is_null(vols)) {
    if (!json_is_array(vols)) {
      reply_error(req, 400, "invalid volumes: must be an array");
      goto out;
    }
    if (json_array_size(vols) > 8) {
      reply_error(req, 400, "invalid volumes: at most 8");
      goto out;
    }
    if (json_array_size(vols) > 0) {
      /* No catalog on this node yet: every name is unknown, and unknown
       * and forbidden must look the same (§1.10). */
      reply_error(req, 400, "invalid volume: unknown volume");
      goto out;
    }
  }
  if (strcmp(net, "egress") == 0) {
    reply_error(req, 409, "no egress attachment");
    goto out;
  }
  sbx_pool_key pk;
  snprintf(pk.tmpl, sizeof pk.tmpl, "%s", tmpl);
  snprintf(pk.net, sizeof pk.net, "%s", net);
  snprintf(pk.size, sizeof pk.size, "%s", size);
  if (promoted_claim(d, req, &who, &pk, ttl, ref)) goto out; /* tier clone from the promoted export (§5.10) */
  if (require_promoted) {
    reply_error(req, 404, "unknown template");
    goto out;
  }
  if (sbx_pool_mgr_draining(d->pm)) {
    reply_error(req, 429, "node draining");
    goto out;
  }
  const char *tenant = who.tenant ? who.tenant->name : "";
  sbx_error err;
  if (sbx_lease_reserve(d->leases, tenant, d->cfg->max_claims, who.tenant ? who.tenant->max_claims : 0, &err) < 0) {
    reply_error(req, 429, err.msg);
    goto out;
  }
  struct claim_op *op = sbx_calloc(1, sizeof *op);
  op->d = d;
  op->req = req;
  op->started_ns = sbx_now_ns();
  snprintf(op->proto.key.tmpl, sizeof op->proto.key.tmpl, "%s", tmpl);
  snprintf(op->proto.key.net, sizeof op->proto.key.net, "%s", net);
  snprintf(op->proto.key.size, sizeof op->proto.key.size, "%s", size);
  snprintf(op->proto.tenant, sizeof op->proto.tenant, "%s", tenant);
  op->proto.ttl = ttl;
  op->claim_ref = ref && ref[0] ? sbx_strdup(ref) : NULL;
  void *inst;
  if (sbx_pool_mgr_take(d->pm, &op->proto.key, &inst) == 0) {
    arm_kick(d);
    claim_commit(op, inst, "warm");
    claim_free(op);
    goto out;
  }
  op->pooled = sbx_pool_mgr_pooled(d->pm, &op->proto.key) && provider_has_golden(d->prov, &op->proto.key);
  req->on_close = claim_client_gone;
  req->on_close_arg = op;
  sbx_pool_mgr_provision(d->pm, &op->proto.key, op->pooled ? PROBE_CLONE_MS : PROBE_COLD_MS, claim_provisioned, op);
out:
  json_decref(body);
}

/* ---- release, renew, reap ---- */

int lease_end(struct sbxd *d, sbx_lease *l, const char *ev, sbx_error *err) {
  struct jmark jm;
  if (journal_begin(d, &jm, err) < 0) return -1;
  if (journal_del(d, l->id, err) < 0 || usage_event(d, ev, l, NULL, err) < 0) {
    journal_abort(d, &jm, err);
    return -1;
  }
  journal_commit(d);
  watch_disarm(d, l);
  relays_close_for(d, l->id);
  archive_forget(d, l);
  if (l->inst) {
    if (d->cfg->release_delay_seconds > 0) {
      struct delayed_destroy *dd = sbx_calloc(1, sizeof *dd);
      dd->inst = l->inst;
      dd->due = now_unix() + d->cfg->release_delay_seconds;
      dd->next = d->delayed;
      d->delayed = dd;
    } else {
      sbx_pool_mgr_destroy(d->pm, l->inst);
    }
  }
  sbx_lease_remove(d->leases, l);
  return 0;
}

void h_release(struct sbxd *d, struct http_req *req, const char *id) {
  sbx_lease *l = auth_sbx(d, req, id, true, "unknown sandbox");
  if (!l) return;
  sbx_error err;
  sbx_lease gone = *l; /* for the log line: lease_end frees l (the copy's pointers are not used) */
  if (lease_end(d, l, "release", &err) < 0) {
    reply_journal_error(req, "release", &err);
    return;
  }
  access_log_end("release", &gone);
  d->m.releases++;
  durable_reply(d, req, "release", 204, NULL);
}

void h_renew(struct sbxd *d, struct http_req *req, const char *id) {
  sbx_lease *l = auth_sbx(d, req, id, true, "unknown sandbox");
  if (!l) return;
  if (lease_archived(l)) {
    reply_error(req, 409, "sandbox archived"); /* §5.7 */
    return;
  }
  json_t *body = decode_body(req, false);
  if (!body) return;
  int ttl;
  if (body_ttl(req, body, &ttl) == 0) {
    /* Journalled first: the lease changes only once its record is down. */
    sbx_lease next = *l;
    next.ttl = ttl;
    next.deadline = now_unix() + ttl;
    struct jmark jm;
    sbx_error err;
    if (journal_begin(d, &jm, &err) < 0) {
      reply_journal_error(req, "renew", &err);
      goto out;
    }
    if (journal_put(d, &next, &err) < 0) {
      journal_abort(d, &jm, &err);
      reply_journal_error(req, "renew", &err);
      goto out;
    }
    journal_commit(d);
    l->ttl = next.ttl;
    l->deadline = next.deadline;
    char dl[64];
    fmt_time(l->deadline, 0, false, dl, sizeof dl);
    durable_reply(d, req, "renew", 200, json_pack("{s:s}", "deadline", dl));
  }
out:
  json_decref(body);
}

void reap_tick(struct sbxd *d) {
  lifecycle_tick(d);
  int64_t now = now_unix();
  sbx_error err;
  /* While journal writes fail, see whether space came back. */
  if (d->journal_error[0] && journal_repair(d, &err) < 0) sbx_debug("journal still failing: %s", err.msg);
  for (size_t i = 0; i < sbx_lease_count(d->leases);) {
    sbx_lease *l = sbx_lease_at(d->leases, i);
    /* A reap the journal refuses waits for the next tick. */
    if (l->deadline <= now) {
      sbx_lease gone = *l; /* for the log line: lease_end frees l */
      if (lease_end(d, l, "reap", &err) == 0) {
        access_log_end("reap", &gone);
        d->m.reaps++;
        continue; /* removal moved another lease into slot i */
      }
    }
    i++;
  }
  for (struct delayed_destroy **pp = &d->delayed; *pp;) {
    struct delayed_destroy *dd = *pp;
    if (dd->due <= now) {
      *pp = dd->next;
      sbx_pool_mgr_destroy(d->pm, dd->inst);
      sbx_free(dd);
    } else {
      pp = &dd->next;
    }
  }
}

/* ---- the index ---- */

/* failed, failed_reason, failed_cause and failed_at on a sandbox whose
 * instance died (beyond SandboxRow and §4.9: absent while it lives). */
static void failed_fields(json_t *o, const sbx_lease *l) {
  if (!l->failed) return;
  char at[64];
  fmt_time(l->failed_at, 0, false, at, sizeof at);
  json_object_update_new(o, json_pack("{s:b,s:s,s:s,s:s}", "failed", 1, "failed_reason", l->failed_reason,
                                      "failed_cause", l->failed_cause, "failed_at", at));
}

static json_t *row(struct sbxd *d, const sbx_lease *l, bool with_token) {
  char dl[64], ca[64];
  fmt_time(l->deadline, 0, false, dl, sizeof dl);
  fmt_time(l->claimed_at, 0, false, ca, sizeof ca);
  json_t *o = json_pack("{s:s,s:o,s:s,s:s,s:b}", "id", l->id, "key", key_json(&l->key), "deadline", dl,
                        "claimed_at", ca, "hibernated", lease_hibernated(d, l));
  if (l->claim_ref) json_object_set_new(o, "claim_ref", json_string(l->claim_ref));
  if (l->from_checkpoint[0]) json_object_set_new(o, "from_checkpoint", json_string(l->from_checkpoint));
  if (lease_archived(l)) json_object_set_new(o, "archived", json_true());
  if (with_token) json_object_set_new(o, "token", json_string(l->token));
  failed_fields(o, l);
  return o;
}

void h_list(struct sbxd *d, struct http_req *req) {
  struct caller who;
  if (auth_node(d, req, false, &who) < 0) return;
  char refbuf[1024];
  const char *ref = http_query(req, "claim_ref", refbuf, sizeof refbuf);
  json_t *arr = json_array();
  sbx_lease *l;
  for (size_t i = 0; (l = sbx_lease_at(d->leases, i)); i++) {
    if (who.tenant && strcmp(l->tenant, who.tenant->name) != 0) continue;
    if (ref && (!l->claim_ref || strcmp(l->claim_ref, ref) != 0)) continue;
    json_array_append_new(arr, row(d, l, false));
  }
  reply_json(req, 200, json_pack("{s:o}", "sandboxes", arr));
}

void h_get(struct sbxd *d, struct http_req *req, const char *id) {
  struct caller who;
  if (auth_node(d, req, true, &who) < 0) return;
  sbx_lease *l = sbxi_lease_id_valid(id) ? sbx_lease_find(d->leases, id) : NULL;
  if (!l) {
    reply_error(req, 404, "unknown sandbox");
    return;
  }
  reply_json(req, 200, row(d, l, who.presented));
}

void h_stats(struct sbxd *d, struct http_req *req, const char *id) {
  struct caller who;
  if (auth_node(d, req, true, &who) < 0) return;
  sbx_lease *l = sbxi_lease_id_valid(id) ? sbx_lease_find(d->leases, id) : NULL;
  if (!l) {
    reply_error(req, 404, "unknown sandbox");
    return;
  }
  /* A lease's size was validated when it was claimed; small if not. */
  const sbx_size_tier *tier = sbx_size_tier_get(l->key.size);
  if (!tier) tier = sbx_size_tier_get("small");
  int cpus = (int)tier->vcpus;
  json_int_t mem = (json_int_t)tier->mem_bytes;
  struct inst_stats st = {0};
  sbx_error err;
  if (l->inst && inst_stats(l->inst, &st, &err) < 0) st.measured = false;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  char at[64];
  fmt_time(ts.tv_sec, 0, false, at, sizeof at);
  json_t *o = json_pack("{s:s,s:i,s:I,s:I,s:b,s:b,s:s}", "id", l->id, "cpu_count", cpus, "mem_total_bytes", mem,
                        "mem_used_bytes", (json_int_t)st.mem_used, "mem_used_measured", st.measured, "hibernated",
                        lease_hibernated(d, l), "measured_at", at);
  failed_fields(o, l);
  reply_json(req, 200, o);
}

void h_owner(struct sbxd *d, struct http_req *req, const char *id) {
  sbx_lease *l = auth_sbx(d, req, id, false, "not owned here");
  if (!l) return;
  reply_json(req, 200, json_pack("{s:s}", "owner_addr", d->owner_addr));
}
