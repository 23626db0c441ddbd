/* admin.c - node state: info, pools, drain, peers, volumes, metrics, and
 * restart recovery (spec §4.18, 4.19, 4.24-4.26, 5.13). */
#include <stdio.h>
#include <string.h>

#include "sandboxd.h"

static json_t *key_json(const sbx_pool_key *k) {
  return json_pack("{s:s,s:s,s:s}", "template", k->tmpl, "net", k->net, "size", k->size);
}

json_t *node_info(struct sbxd *d) {
  size_t n = sbx_pool_mgr_stats(d->pm, NULL, 0);
  sbx_pool_stat *st = sbx_calloc(n ? n : 1, sizeof *st);
  sbx_pool_mgr_stats(d->pm, st, n);
  json_t *pools = json_array();
  for (size_t i = 0; i < n; i++) {
    json_t *po = json_pack("{s:o,s:i,s:i,s:i,s:b}", "key", key_json(&st[i].key), "warm", st[i].warm, "refilling",
                           st[i].refilling, "target", st[i].target, "golden", st[i].golden);
    /* Beyond NodeInfo: why a pool stays empty (a missing template, a
     * golden that does not boot), until its next success. */
    if (st[i].last_error[0]) {
      char at[64];
      fmt_time(st[i].last_error_at, 0, false, at, sizeof at);
      json_object_set_new(po, "last_error", json_string_lossy(st[i].last_error, strlen(st[i].last_error)));
      json_object_set_new(po, "last_error_at", json_string(at));
    }
    json_array_append_new(pools, po);
  }
  sbx_free(st);
  json_int_t hib = 0;
  sbx_lease *l;
  for (size_t i = 0; (l = sbx_lease_at(d->leases, i)); i++) hib += lease_hibernated(d, l);
  json_t *o = json_pack("{s:o,s:I,s:I,s:I}", "pools", pools, "claimed", (json_int_t)sbx_lease_count(d->leases),
                        "hibernated", hib, "archived", (json_int_t)archive_count());
  /* which verbs can work here, so a client (sbxctl mcp) offers only those */
  json_object_set_new(o, "driver", json_string(provider_name(d->prov)));
  json_object_set_new(o, "lifecycle", json_boolean(provider_image_keeps(d->prov) != NULL));
  /* an operator editing the config file must learn that a PUT overrides it */
  json_object_set_new(o, "pools_source", json_string(d->pools_from_file ? "pools.json" : "config"));
  if (sbx_pool_mgr_draining(d->pm)) json_object_set_new(o, "draining", json_true());
  const char *reason;
  if (sbx_pool_mgr_at_capacity(d->pm, &reason)) {
    json_object_set_new(o, "at_capacity", json_true());
    if (reason) json_object_set_new(o, "at_capacity_reason", json_string(reason));
  }
  /* Beyond NodeInfo: while journal writes fail (a full data_dir), changes
   * are refused with 500 and this says why. */
  if (d->journal_error[0]) json_object_set_new(o, "journal_error", json_string(d->journal_error));
  return o;
}

void h_info(struct sbxd *d, struct http_req *req) {
  struct caller who;
  if (auth_node(d, req, true, &who) < 0) return;
  reply_json(req, 200, node_info(d));
}

int apply_pools(struct sbxd *d, struct pool_cfg *p, size_t n, sbx_error *err) {
  sbx_pool_conf *pc = sbx_calloc(n ? n : 1, sizeof *pc);
  for (size_t i = 0; i < n; i++) {
    pc[i] = p[i].pc;
    pc[i].struct_size = sizeof pc[i];
  }
  /* Before the pool manager starts building: a pool's golden runs its warmup. */
  for (size_t i = 0; i < n; i++) provider_set_warmup(d->prov, &p[i].pc.key, p[i].warmup);
  int rc = sbx_pool_mgr_set_pools(d->pm, pc, n, err);
  sbx_free(pc);
  if (rc < 0) {
    config_free_pools(p, n);
    return rc;
  }
  config_free_pools(d->pools, d->npools);
  d->pools = p;
  d->npools = n;
  return 0;
}

void h_pools(struct sbxd *d, struct http_req *req) {
  struct caller who;
  if (auth_node(d, req, true, &who) < 0) return;
  json_t *body = decode_body(req, true);
  if (!body) return;
  const char *k;
  json_t *v;
  json_object_foreach(body, k, v) {
    if (strcmp(k, "pools") != 0) {
      char msg[160];
      snprintf(msg, sizeof msg, "unknown field %.100s", k);
      reply_error(req, 400, msg);
      json_decref(body);
      return;
    }
  }
  json_t *arr = json_object_get(body, "pools");
  if (!arr) {
    reply_error(req, 400, "pools: required");
    json_decref(body);
    return;
  }
  struct pool_cfg *p;
  size_t n;
  sbx_error err;
  int rc = config_parse_pools(arr, true, d->cfg, &p, &n, &err);
  json_decref(body);
  if (rc < 0) {
    reply_error(req, 400, err.msg);
    return;
  }
  for (size_t i = 0; i < n; i++)
    if (strcmp(p[i].pc.key.net, "egress") == 0) {
      config_free_pools(p, n);
      reply_error(req, 409, "no egress attachment");
      return;
    }
  /* Persist first: a set that cannot be saved is not applied (§4.18). */
  if (journal_write_pools(d, p, n, &err) < 0) {
    sbx_error_log("pools.json: %s", err.msg);
    config_free_pools(p, n);
    reply_error(req, 500, "persisting pools failed");
    return;
  }
  d->pools_from_file = true;
  if (apply_pools(d, p, n, &err) < 0) {
    reply_error(req, 500, err.msg);
    return;
  }
  sbx_info("pools retuned: %zu pool(s)", n);
  reply_json(req, 200, node_info(d));
}

void h_drain(struct sbxd *d, struct http_req *req, bool on) {
  struct caller who;
  if (auth_node(d, req, true, &who) < 0) return;
  if (on != sbx_pool_mgr_draining(d->pm)) sbx_info("%s", on ? "draining: node cordoned" : "uncordoned");
  sbx_pool_mgr_set_draining(d->pm, on);
  reply_json(req, 200, node_info(d));
}

void h_peers(struct sbxd *d, struct http_req *req) {
  struct caller who;
  if (auth_node(d, req, false, &who) < 0) return;
  reply_json(req, 200, json_pack("{s:[]}", "peers"));
}

void h_volumes(struct sbxd *d, struct http_req *req) {
  struct caller who;
  if (auth_node(d, req, false, &who) < 0) return;
  reply_json(req, 200, json_pack("{s:[]}", "volumes"));
}

/* Label values: backslash, double quote and newline escaped (format 0.0.4). */
static void label(sbx_buf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '\\') sbx_buf_adds(b, "\\\\", NULL);
    else if (*s == '"') sbx_buf_adds(b, "\\\"", NULL);
    else if (*s == '\n') sbx_buf_adds(b, "\\n", NULL);
    else sbx_buf_addc(b, *s, NULL);
  }
}

/* Lifecycle counters: metric, help, the usage event that counts one. */
static const char *const lifecycle_counters[][3] = {
    {"sandboxd_wakes_total", "Wakes completed.", "wake"},
    {"sandboxd_hibernates_total", "Hibernates completed.", "hibernate"},
    {"sandboxd_forks_total", "Fork requests completed.", "fork"},
    {"sandboxd_checkpoints_total", "Checkpoints created.", "checkpoint"},
    {"sandboxd_promotes_total", "Promotes completed.", "promote"},
    {"sandboxd_archives_total", "Sandboxes archived.", "archive"},
    {"sandboxd_unarchives_total", "Restores from archive.", "unarchive"},
    {"sandboxd_archive_deletes_total", "Archives purged at retention.", "archive_delete"},
};
_Static_assert(sizeof lifecycle_counters / sizeof *lifecycle_counters == sizeof((struct metrics *)0)->lifecycle /
                                                                             sizeof(uint64_t),
               "one counter per lifecycle event");

void metrics_event(struct sbxd *d, const char *ev) {
  for (size_t i = 0; i < sizeof lifecycle_counters / sizeof *lifecycle_counters; i++)
    if (strcmp(lifecycle_counters[i][2], ev) == 0) d->m.lifecycle[i]++;
}

void h_metrics(struct sbxd *d, struct http_req *req) {
  struct caller who;
  if (auth_node(d, req, true, &who) < 0) return;
  sbx_buf b = SBX_BUF_INIT(16 * 1024 * 1024);
  size_t claimed = sbx_lease_count(d->leases), failed = 0;
  sbx_lease *l;
  size_t hib = 0;
  for (size_t i = 0; (l = sbx_lease_at(d->leases, i)); i++) {
    failed += l->failed;
    hib += lease_hibernated(d, l);
  }
  metric_head(&b, "sandboxd_claimed", "gauge", "Sandboxes in the index, counting hibernated and archived ones.");
  sbx_buf_printf(&b, NULL, "sandboxd_claimed %zu\n", claimed);
  metric_head(&b, "sandboxd_hibernated", "gauge", "Hibernated sandboxes, counting archived ones.");
  sbx_buf_printf(&b, NULL, "sandboxd_hibernated %zu\n", hib);
  metric_head(&b, "sandboxd_archived", "gauge", "Archived sandboxes.");
  sbx_buf_printf(&b, NULL, "sandboxd_archived %zu\n", archive_count());
  metric_head(&b, "sandboxd_failed", "gauge", "Indexed sandboxes whose instance was found dead.");
  sbx_buf_printf(&b, NULL, "sandboxd_failed %zu\n", failed);
  /* Beyond §4.26: the same by cause (watch.c, recovery). */
  static const char *const causes[] = {"oom", "signal", "exit", "gone"};
  metric_head(&b, "sandboxd_failed_by_cause", "gauge",
              "Failed sandboxes by cause: oom, signal, exit (pid 1 ended) or gone (missing at a restart).");
  for (size_t c = 0; c < sizeof causes / sizeof *causes; c++) {
    size_t k = 0;
    for (size_t i = 0; (l = sbx_lease_at(d->leases, i)); i++) k += l->failed && !strcmp(l->failed_cause, causes[c]);
    sbx_buf_printf(&b, NULL, "sandboxd_failed_by_cause{cause=\"%s\"} %zu\n", causes[c], k);
  }
  metric_head(&b, "sandboxd_journal_failing", "gauge",
              "1 while journal writes fail (a full data_dir): changes are refused with 500.");
  sbx_buf_printf(&b, NULL, "sandboxd_journal_failing %d\n", d->journal_error[0] ? 1 : 0);
  metric_head(&b, "sandboxd_journal_errors_total", "counter", "Journal writes that failed.");
  sbx_buf_printf(&b, NULL, "sandboxd_journal_errors_total %llu\n", (unsigned long long)d->m.journal_errors);
  metric_head(&b, "sandboxd_draining", "gauge", "1 while the node is cordoned.");
  sbx_buf_printf(&b, NULL, "sandboxd_draining %d\n", sbx_pool_mgr_draining(d->pm) ? 1 : 0);
  metric_head(&b, "sandboxd_tenant_claims", "gauge", "Live claims per configured tenant.");
  for (size_t i = 0; i < d->cfg->ntenants; i++) {
    sbx_buf_adds(&b, "sandboxd_tenant_claims{tenant=\"", NULL);
    label(&b, d->cfg->tenants[i].name);
    sbx_buf_printf(&b, NULL, "\"} %zu\n", sbx_lease_count_tenant(d->leases, d->cfg->tenants[i].name));
  }
  size_t n = sbx_pool_mgr_stats(d->pm, NULL, 0);
  sbx_pool_stat *st = sbx_calloc(n ? n : 1, sizeof *st);
  sbx_pool_mgr_stats(d->pm, st, n);
  for (int pass = 0; pass < 2; pass++) {
    const char *name = pass ? "sandboxd_pool_target" : "sandboxd_pool_warm";
    metric_head(&b, name, "gauge", pass ? "Effective target of each pool." : "Ready instances in each pool.");
    for (size_t i = 0; i < n; i++) {
      sbx_buf_printf(&b, NULL, "%s{template=\"", name);
      label(&b, st[i].key.tmpl);
      sbx_buf_printf(&b, NULL, "\",net=\"%s\",size=\"%s\"} %d\n", st[i].key.net, st[i].key.size,
                     pass ? st[i].target : st[i].warm);
    }
  }
  sbx_free(st);
  metric_head(&b, "sandboxd_claims_total", "counter", "Claims completed, by tier.");
  sbx_buf_printf(&b, NULL,
                 "sandboxd_claims_total{tier=\"warm\"} %llu\nsandboxd_claims_total{tier=\"clone\"} %llu\n"
                 "sandboxd_claims_total{tier=\"cold\"} %llu\n",
                 (unsigned long long)d->m.claims_warm, (unsigned long long)d->m.claims_clone,
                 (unsigned long long)d->m.claims_cold);
  metric_head(&b, "sandboxd_claim_seconds_total", "counter", "Sum of claim durations in seconds.");
  sbx_buf_printf(&b, NULL, "sandboxd_claim_seconds_total %.9f\n", d->m.claim_seconds);
  metric_head(&b, "sandboxd_wake_seconds_total", "counter", "Sum of wake durations in seconds.");
  sbx_buf_printf(&b, NULL, "sandboxd_wake_seconds_total %.9f\n", d->m.wake_seconds);
  metric_head(&b, "sandboxd_releases_total", "counter", "Releases.");
  sbx_buf_printf(&b, NULL, "sandboxd_releases_total %llu\n", (unsigned long long)d->m.releases);
  metric_head(&b, "sandboxd_reaps_total", "counter", "Lease expiries that destroyed a sandbox.");
  sbx_buf_printf(&b, NULL, "sandboxd_reaps_total %llu\n", (unsigned long long)d->m.reaps);
  /* Beyond §4.26 (the prefix keeps them in sandboxd's namespace): the data
   * plane's connections, which the claim counters do not show. */
  metric_head(&b, "sandboxd_upgrades_total", "counter",
              "Connections upgraded to a relay, by protocol (silkd = agent, tcp = ports).");
  sbx_buf_printf(&b, NULL, "sandboxd_upgrades_total{protocol=\"silkd\"} %llu\n",
                 (unsigned long long)http_server_upgrades(d->http, "silkd"));
  sbx_buf_printf(&b, NULL, "sandboxd_upgrades_total{protocol=\"tcp\"} %llu\n",
                 (unsigned long long)http_server_upgrades(d->http, "tcp"));
  metric_head(&b, "sandboxd_relays", "gauge", "Relays open now.");
  sbx_buf_printf(&b, NULL, "sandboxd_relays %zu\n", relays_count(d));
  for (size_t i = 0; i < sizeof lifecycle_counters / sizeof *lifecycle_counters; i++) {
    metric_head(&b, lifecycle_counters[i][0], "counter", lifecycle_counters[i][1]);
    sbx_buf_printf(&b, NULL, "%s %llu\n", lifecycle_counters[i][0], (unsigned long long)d->m.lifecycle[i]);
  }
  metrics_write(d, &b);
  http_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", b.ptr ? b.ptr : "", b.len, NULL);
  sbx_buf_free(&b);
}

/* ---- recovery (§5.13): adopt journalled claims, destroy the rest ---- */

struct rec {
  struct sbxd *d;
  json_t *claims;
  bool *found;
};

static json_t *claim_by_vm(struct rec *r, const char *vm, size_t *idx) {
  size_t i;
  json_t *c;
  json_array_foreach(r->claims, i, c) {
    const char *v = json_string_value(json_object_get(c, "vm"));
    if (v && strcmp(v, vm) == 0) {
      *idx = i;
      return c;
    }
  }
  return NULL;
}

static bool rec_keep(void *ud, const char *name) {
  size_t i;
  return claim_by_vm(ud, name, &i) != NULL;
}

static void lease_from_json(const json_t *c, sbx_lease *l) {
  memset(l, 0, sizeof *l);
  const json_t *k = json_object_get(c, "key");
  snprintf(l->id, sizeof l->id, "%s", json_string_value(json_object_get(c, "id")) ?: "");
  snprintf(l->token, sizeof l->token, "%s", json_string_value(json_object_get(c, "token")) ?: "");
  snprintf(l->tenant, sizeof l->tenant, "%s", json_string_value(json_object_get(c, "tenant")) ?: "");
  snprintf(l->vm, sizeof l->vm, "%s", json_string_value(json_object_get(c, "vm")) ?: "");
  snprintf(l->key.tmpl, sizeof l->key.tmpl, "%s", json_string_value(json_object_get(k, "template")) ?: "");
  snprintf(l->key.net, sizeof l->key.net, "%s", json_string_value(json_object_get(k, "net")) ?: "none");
  snprintf(l->key.size, sizeof l->key.size, "%s", json_string_value(json_object_get(k, "size")) ?: "small");
  l->claimed_at = json_integer_value(json_object_get(c, "claimed_at"));
  l->deadline = json_integer_value(json_object_get(c, "deadline"));
  l->ttl = (int)json_integer_value(json_object_get(c, "ttl"));
  const char *ref = json_string_value(json_object_get(c, "claim_ref"));
  l->claim_ref = ref ? (char *)ref : NULL; /* commit copies it */
  snprintf(l->from_checkpoint, sizeof l->from_checkpoint, "%s",
           json_string_value(json_object_get(c, "from_checkpoint")) ?: "");
  if (json_is_true(json_object_get(c, "failed"))) {
    l->failed = true;
    snprintf(l->failed_reason, sizeof l->failed_reason, "%s",
             json_string_value(json_object_get(c, "failed_reason")) ?: "");
    snprintf(l->failed_cause, sizeof l->failed_cause, "%s",
             json_string_value(json_object_get(c, "failed_cause")) ?: "");
    l->failed_at = json_integer_value(json_object_get(c, "failed_at"));
  }
}

static void rec_adopt(void *ud, const char *name, struct inst *s) {
  struct rec *r = ud;
  size_t i;
  json_t *c = claim_by_vm(r, name, &i);
  if (!c || r->found[i] || !sbxi_lease_id_valid(json_string_value(json_object_get(c, "id")) ?: "")) {
    sbx_pool_mgr_destroy(r->d->pm, s);
    return;
  }
  sbx_lease l;
  lease_from_json(c, &l);
  if (l.failed) { /* its pid 1 died before the restart: what runs is not it */
    sbx_pool_mgr_destroy(r->d->pm, s);
    return;
  }
  l.inst = s;
  sbx_error err;
  if (sbx_lease_commit(r->d->leases, &l, false, NULL, &err) < 0) {
    sbx_pool_mgr_destroy(r->d->pm, s);
    return;
  }
  r->found[i] = true;
  sbx_info("re-adopted %s (%s)", l.id, name);
}

int recover(struct sbxd *d, sbx_error *err) {
  struct rec r = {.d = d, .claims = journal_read_claims(d)};
  if (!r.claims) r.claims = json_array();
  r.found = sbx_calloc(json_array_size(r.claims) + 1, sizeof *r.found);
  int rc = provider_reconcile(d->prov, rec_keep, rec_adopt, &r, err);
  if (rc >= 0) {
    size_t i;
    json_t *c;
    json_array_foreach(r.claims, i, c) {
      if (r.found[i]) continue;
      sbx_lease l;
      lease_from_json(c, &l);
      if (!sbxi_lease_id_valid(l.id)) continue;
      /* Its instance is gone: keep the row, counted as failed, until it is
       * released or reaped (§5.13 step 2). A failure seen before the
       * restart keeps its reason. */
      if (!l.failed) {
        l.failed = true;
        snprintf(l.failed_reason, sizeof l.failed_reason, "instance %s was gone at the restart", l.vm);
        snprintf(l.failed_cause, sizeof l.failed_cause, "gone");
        l.failed_at = now_unix();
        sbx_warn("claim %s: instance %s is gone", l.id, l.vm);
      }
      sbx_lease_commit(d->leases, &l, false, NULL, NULL);
    }
    rc = journal_write_claims(d, err);
  }
  sbx_free(r.found);
  json_decref(r.claims);
  return rc;
}
