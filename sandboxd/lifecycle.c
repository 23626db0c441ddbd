/* lifecycle.c - hibernate, wake (explicit and on the next data-plane
 * use), fork, and idle auto-hibernate (spec §4.5, 4.6, 4.10, 5.5, 5.6,
 * 5.8), written once against the driver's pause and images.
 *
 * What survives is the driver's to say (provider_*_keeps): the jail
 * hibernates with the cgroup freezer, so processes, memory and sessions
 * are kept (but the memory is not released), and its images keep the
 * filesystem only, so fork children start fresh processes on a copy of
 * the parent's files. A driver without the verb answers 501 naming itself.
 *
 * One transition per sandbox at a time (§5.6): every transition of a
 * parent runs on the loop thread from start to end (a pause, a thaw, the
 * copy of a fork's writable layer), so no two of them interleave; only a
 * fork's children start on workers, after the parent's part is done.
 *
 * Hibernated is not journalled: the freezer state is the kernel's, read
 * back through the driver, so a restart (or a kill -9 in the middle of a
 * hibernate) finds the sandbox either frozen or not, never half. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../libsandbox/pool/secret.h"
#include "../libsandbox/template/layers.h"
#include "core/path.h"
#include "sandboxd.h"

#define PROBE_FORK_MS 15000

/* ---- the idle clock (§5.5): last data-plane use per sandbox ----
 * One daemon per process; the table is the loop thread's. */
struct idle_ent {
  char id[SBX_LEASE_ID_LEN + 1];
  int64_t last; /* unix seconds of the last hold or use */
};
static struct idle_ent *idle;
static size_t nidle;

static struct idle_ent *idle_get(const char *id) {
  for (size_t i = 0; i < nidle; i++)
    if (strcmp(idle[i].id, id) == 0) return &idle[i];
  idle = sbx_reallocarray(idle, nidle + 1, sizeof *idle);
  struct idle_ent *e = &idle[nidle++];
  snprintf(e->id, sizeof e->id, "%s", id);
  e->last = now_unix();
  return e;
}

static void no_driver_verb(struct sbxd *d, struct http_req *req, const char *verb) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s is not available with the %s driver yet", verb, provider_name(d->prov));
  reply_error(req, 501, msg);
}

bool lease_hibernated(struct sbxd *d, const sbx_lease *l) {
  (void)d;
  return lease_archived(l) || (l->inst && inst_paused(l->inst));
}

static int64_t idle_since(const char *id) { return idle_get(id)->last; }

/* ---- hibernate and wake ---- */

static int do_wake(struct sbxd *d, sbx_lease *l, sbx_error *err) {
  uint64_t t0 = sbx_now_ns();
  bool archived = lease_archived(l);
  int rc = archived ? archive_wake(d, l, err) : inst_resume(l->inst, err); /* archive_wake journals its events */
  if (rc < 0) return rc;
  idle_get(l->id)->last = now_unix();
  if (!archived) usage_note(d, "wake", l, NULL);
  d->m.wake_seconds += (double)(sbx_now_ns() - t0) / 1e9;
  sbx_debug("wake %s", l->id);
  return 0;
}

static void reply_keeps(struct http_req *req, const char *keeps) {
  char hdr[96];
  snprintf(hdr, sizeof hdr, "Sandbox-Keeps: %s\r\n", keeps);
  http_reply(req, 204, NULL, NULL, 0, hdr);
}

static int hibernate(struct sbxd *d, sbx_lease *l, sbx_error *err) {
  /* Connections into a frozen sandbox would hang: break them, as the stop
   * of a VM does (§4.5). */
  relays_close_for(d, l->id);
  int rc = inst_pause(l->inst, err);
  if (rc < 0) {
    inst_resume(l->inst, NULL); /* keeps running (§4.5: 500) */
    return rc;
  }
  usage_note(d, "hibernate", l, NULL);
  sbx_debug("hibernate %s", l->id);
  return 0;
}

void h_hibernate(struct sbxd *d, struct http_req *req, const char *id) {
  sbx_lease *l = auth_sbx(d, req, id, true, "unknown sandbox");
  if (!l) return;
  const char *keeps = provider_pause_keeps(d->prov);
  if (!keeps) {
    no_driver_verb(d, req, "hibernate");
    return;
  }
  if (strcmp(l->key.net, "egress") == 0) {
    reply_error(req, 409, "sandbox is on the egress lane");
    return;
  }
  if (lease_archived(l)) {
    reply_keeps(req, keeps);
    return;
  }
  if (!l->inst) {
    reply_error(req, 500, "hibernate failed: the sandbox is gone");
    return;
  }
  if (inst_paused(l->inst)) {
    reply_keeps(req, keeps);
    return;
  } /* idempotent */
  sbx_error err;
  if (hibernate(d, l, &err) < 0) {
    sbx_warn("hibernate %s: %s", l->id, err.msg);
    {
    reply_error(req, 500, "hibernate failed");
    return;
  }
  }
  reply_keeps(req, keeps);
}

void h_wake(struct sbxd *d, struct http_req *req, const char *id) {
  sbx_lease *l = auth_sbx(d, req, id, true, "unknown sandbox");
  if (!l) return;
  const char *keeps = provider_pause_keeps(d->prov);
  if (!keeps) {
    no_driver_verb(d, req, "wake");
    return;
  }
  if (!l->inst && !lease_archived(l)) {
    reply_error(req, 500, "wake failed");
    return;
  }
  sbx_error err;
  if ((lease_archived(l) || inst_paused(l->inst)) && do_wake(d, l, &err) < 0) {
    sbx_warn("wake %s: %s", l->id, err.msg);
    {
    reply_error(req, 500, "wake failed");
    return;
  }
  }
  reply_keeps(req, keeps);
}

int lease_touch(struct sbxd *d, struct http_req *req, sbx_lease *l) {
  idle_get(l->id)->last = now_unix();
  if (!lease_archived(l) && (!l->inst || !inst_paused(l->inst))) return 0;
  sbx_error err;
  if (do_wake(d, l, &err) < 0) {
    sbx_warn("wake %s on use: %s", l->id, err.msg);
    reply_error(req, 500, "wake failed");
    return -1;
  }
  return 0;
}

/* §5.5: the pool's value for pooled keys, the node's for the others. */
static int idle_limit(struct sbxd *d, const sbx_lease *l) {
  for (size_t i = 0; i < d->npools; i++) {
    const sbx_pool_key *k = &d->pools[i].pc.key;
    if (strcmp(k->tmpl, l->key.tmpl) == 0 && strcmp(k->net, l->key.net) == 0 && strcmp(k->size, l->key.size) == 0)
      return d->pools[i].idle_hibernate_seconds;
  }
  return d->cfg->idle_hibernate_seconds;
}

void lifecycle_tick(struct sbxd *d) {
  int64_t now = now_unix();
  static int64_t last_sweep;
  if (d->cfg->checkpoint_ttl_hours > 0 && now - last_sweep >= 3600) { /* §5.9: hourly */
    last_sweep = now;
    checkpoint_sweep(d, false);
  }
  /* forget sandboxes that are gone */
  for (size_t i = 0; i < nidle;) {
    if (!sbx_lease_find(d->leases, idle[i].id)) idle[i] = idle[--nidle];
    else i++;
  }
  sbx_lease *l;
  for (size_t i = 0; (l = sbx_lease_at(d->leases, i)); i++) {
    struct idle_ent *e = idle_get(l->id);
    if (l->holds > 0) {
      e->last = now; /* the clock runs only without holds */
      continue;
    }
    int limit = idle_limit(d, l);
    if (limit <= 0 || !l->inst || strcmp(l->key.net, "none") != 0 || !provider_pause_keeps(d->prov)) continue;
    if (now - e->last < limit || inst_paused(l->inst)) continue;
    sbx_error err;
    if (hibernate(d, l, &err) < 0) sbx_warn("idle hibernate %s: %s", l->id, err.msg);
    else sbx_info("hibernated %s after %d s idle", l->id, limit);
  }
  archive_tick(d, idle_since);
}

/* ---- the ownership proof (§2.5) ---- */

sbx_lease *auth_proof(struct sbxd *d, struct http_req *req, const char *id, json_t *body, const struct caller *who) {
  json_t *t = json_object_get(body, "token");
  if (t && !json_is_null(t) && !json_is_string(t)) {
    reply_error(req, 400, "invalid token: must be a string");
    return NULL;
  }
  const char *tok = t ? json_string_value(t) : NULL;
  sbx_lease *l = sbxi_lease_id_valid(id) ? sbx_lease_find(d->leases, id) : NULL;
  if (tok && tok[0]) {
    bool ok = sbxi_secret_eq(tok, l ? l->token : "00000000000000000000000000000000") && l;
    if (!ok) reply_error(req, 404, "unknown sandbox");
    return ok ? l : NULL;
  }
  if (!who->presented) {
    reply_error(req, 400, "token required");
    return NULL;
  }
  if (!l) reply_error(req, 404, "unknown sandbox");
  return l;
}

/* ---- fork (§4.10, §5.8) ---- */

struct fork_op;
struct fork_child {
  struct fork_op *op;
  struct inst *inst;
  sbx_error err;
};

struct fork_op {
  struct sbxd *d;
  struct http_req *req;
  bool client_gone;
  char parent[SBX_LEASE_ID_LEN + 1];
  sbx_pool_key key;
  char tenant[SBX_POOL_NAME_MAX];
  int ttl, count, pending;
  int fail_child; /* a test aid: this child's start fails (-1: none) */
  char *prefix;
  char image[PATH_MAX];
  struct fork_child *kids;
};

static void fork_client_gone(void *arg) { ((struct fork_op *)arg)->client_gone = true; }

/* A fork's image is a RAM image (see ram_dir): path is <ram>/img. The
 * tmpfs is detached, not emptied: the children's binds of it keep it until
 * the last of them is destroyed (the driver's in-place restore). */
static void rm_image(const char *path) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) return;
  *slash = '\0';
  if (umount2(dir, MNT_DETACH) < 0 && errno != EINVAL) sbx_warn("fork: detach %s: %s", dir, strerror(errno));
  slash = strrchr(dir, '/');
  *slash = '\0';
  int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  sbxi_rm_rf_at(fd, slash + 1, NULL);
  close(fd);
}

static void fork_work(void *arg) {
  struct fork_child *c = arg;
  struct fork_op *op = c->op;
  if (c - op->kids == op->fail_child) {
    sbx_err(&c->err, SBX_E_INTERNAL, "child %d made to fail (SANDBOXD_TEST_FORK_FAIL_CHILD)", op->fail_child);
    return;
  }
  provider_restore(op->d->prov, &op->key, op->image, PROBE_FORK_MS, &c->inst, &c->err);
}

static void fork_fail(struct fork_op *op, const char *why) {
  struct sbxd *d = op->d;
  for (int i = 0; i < op->count; i++) {
    if (op->kids[i].inst) sbx_pool_mgr_destroy(d->pm, op->kids[i].inst);
    sbx_lease_unreserve(d->leases, op->tenant);
  }
  sbx_warn("fork %s: %s; no child kept", op->parent, why);
  if (!op->client_gone) op->req->on_close = NULL;
  reply_error(op->req, 500, "fork failed");
}

/* Undo a fork whose journal records could not be written: the children
 * committed so far leave the table, every child's sandbox goes (§5.8: all
 * or nothing), and the caller gets the journal's 500. */
static void fork_abort(struct fork_op *op, sbx_lease **kids, int committed, struct jmark *jm, sbx_error *err) {
  struct sbxd *d = op->d;
  journal_abort(d, jm, err);
  for (int i = 0; i < op->count; i++) {
    if (i < committed && kids[i]) sbx_lease_remove(d->leases, kids[i]);
    else sbx_lease_unreserve(d->leases, op->tenant);
    sbx_pool_mgr_destroy(d->pm, op->kids[i].inst);
  }
  sbx_warn("fork %s: %s; no child kept", op->parent, err->msg);
  op->req->on_close = NULL;
  reply_journal_error(op->req, "fork", err);
}

/* Every child becomes a lease in one journal transaction with the fork
 * event, or none does. */
static void fork_commit(struct fork_op *op) {
  struct sbxd *d = op->d;
  sbx_error err;
  struct jmark jm;
  sbx_lease **kids = sbx_calloc((size_t)op->count, sizeof *kids);
  const char **ids = sbx_calloc((size_t)op->count, sizeof *ids);
  int committed = 0;
  if (journal_begin(d, &jm, &err) < 0) goto abort;
  int64_t now = now_unix();
  for (; committed < op->count; committed++) {
    int i = committed;
    sbx_lease proto;
    memset(&proto, 0, sizeof proto);
    proto.key = op->key;
    snprintf(proto.tenant, sizeof proto.tenant, "%s", op->tenant);
    proto.ttl = op->ttl;
    proto.inst = op->kids[i].inst;
    snprintf(proto.vm, sizeof proto.vm, "%s", inst_name(op->kids[i].inst));
    proto.claimed_at = now;
    proto.deadline = now + op->ttl;
    char ref[512];
    if (op->prefix) {
      snprintf(ref, sizeof ref, "%.500s%d", op->prefix, i);
      proto.claim_ref = ref;
    }
    if (sbx_lease_commit(d->leases, &proto, true, &kids[i], &err) < 0) goto abort;
    if (journal_put(d, kids[i], &err) < 0) {
      committed++;
      goto abort;
    }
    ids[i] = kids[i]->id;
  }
  sbx_lease *p = sbx_lease_find(d->leases, op->parent), gone;
  if (!p) { /* released meanwhile: the event still names it */
    memset(&gone, 0, sizeof gone);
    snprintf(gone.id, sizeof gone.id, "%s", op->parent);
    snprintf(gone.tenant, sizeof gone.tenant, "%s", op->tenant);
    p = &gone;
  }
  if (usage_event_children(d, "fork", p, NULL, ids, (size_t)op->count, &err) < 0) goto abort;
  journal_commit(d);
  json_t *arr = json_array();
  for (int i = 0; i < op->count; i++) {
    watch_arm(d, kids[i]);
    char dl[64];
    fmt_time(kids[i]->deadline, 0, false, dl, sizeof dl);
    json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:s}", "id", kids[i]->id, "token", kids[i]->token,
                                         "deadline", dl, "owner_addr", d->owner_addr));
  }
  sbx_free(ids);
  sbx_free(kids);
  op->req->on_close = NULL;
  durable_reply(d, op->req, "fork", 200,
                json_pack("{s:o,s:s,s:b}", "children", arr, "keeps", provider_image_keeps(d->prov),
                          "sessions_kept", 0));
  return;
abort:
  fork_abort(op, kids, committed, &jm, &err);
  sbx_free(ids);
  sbx_free(kids);
}

static void fork_child_done(void *arg, bool cancelled) {
  struct fork_child *c = arg;
  struct fork_op *op = c->op;
  if (cancelled && !c->inst) sbx_err(&c->err, SBX_E_INTERNAL, "cancelled");
  if (--op->pending > 0) return;
  rm_image(op->image); /* each child runs on its own copy of the layers */
  const char *why = NULL;
  for (int i = 0; i < op->count && !why; i++)
    if (!op->kids[i].inst) why = op->kids[i].err.msg;
  if (!why && op->client_gone) why = "the client left";
  if (!why && op->d->stopping) why = "the node is stopping";
  if (why) fork_fail(op, why);
  else fork_commit(op);
  sbx_free(op->kids);
  sbx_free(op->prefix);
  sbx_free(op);
}

static int tenant_max(struct sbxd *d, const char *tenant) {
  for (size_t i = 0; i < d->cfg->ntenants; i++)
    if (strcmp(d->cfg->tenants[i].name, tenant) == 0) return d->cfg->tenants[i].max_claims;
  return 0;
}

/* Body fields of a fork; -1 with 400 answered. */
static int fork_args(struct sbxd *d, struct http_req *req, json_t *body, int *count, int *ttl, const char **prefix) {
  json_t *c = json_object_get(body, "count");
  int cap = d->cfg->max_fork_count > 0 ? d->cfg->max_fork_count : 16;
  if (!json_is_integer(c) || json_integer_value(c) < 1 || json_integer_value(c) > cap) {
    char msg[96];
    snprintf(msg, sizeof msg, "invalid count: an integer from 1 to %d", cap);
    reply_error(req, 400, msg);
    return -1;
  }
  *count = (int)json_integer_value(c);
  if (body_ttl(req, body, ttl) < 0) return -1;
  json_t *p = json_object_get(body, "claim_ref_prefix");
  *prefix = NULL;
  if (p && !json_is_null(p)) {
    if (!json_is_string(p) || json_string_length(p) > 200 || strlen(json_string_value(p)) != json_string_length(p)) {
      reply_error(req, 400, "invalid claim_ref_prefix");
      return -1;
    }
    *prefix = json_string_value(p);
  }
  return 0;
}

static int reserve_all(struct sbxd *d, const char *tenant, int count, sbx_error *err) {
  for (int i = 0; i < count; i++) {
    if (sbx_lease_reserve(d->leases, tenant, d->cfg->max_claims, tenant_max(d, tenant), err) < 0) {
      while (i-- > 0) sbx_lease_unreserve(d->leases, tenant);
      return -1;
    }
  }
  return 0;
}

/* <data_dir>/images/<kind>-<hex>, a fresh tmpfs, and in out the image
 * directory inside it (written by the snapshot): children of a fork stack
 * it in place instead of copying it from disk. Without a tmpfs (no mount
 * right) it is a plain directory, which the children copy as before. */
static int new_image_path(struct sbxd *d, const char *kind, char *out, size_t cap, sbx_error *err) {
  char dir[PATH_MAX], ram[PATH_MAX], hex[17];
  if (sbxi_path_fmt(dir, sizeof dir, err, "%s/images", d->cfg->data_dir) < 0) return -1;
  if (mkdir(dir, 0700) < 0 && errno != EEXIST) return sbx_err_os(err, errno, "mkdir %s", dir);
  int rc = sbxi_random_hex(hex, 8, err);
  if (rc < 0) return rc;
  if (sbxi_path_fmt(ram, sizeof ram, err, "%s/%s-%s", dir, kind, hex) < 0) return -1;
  if (mkdir(ram, 0700) < 0) return sbx_err_os(err, errno, "mkdir %s", ram);
  if (mount("tmpfs", ram, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700") < 0)
    sbx_debug("fork: no tmpfs for %s (%s): the image goes to disk", ram, strerror(errno));
  return sbxi_path_fmt(out, cap, err, "%s/img", ram);
}

void h_fork(struct sbxd *d, struct http_req *req, const char *id) {
  struct caller who;
  if (auth_node(d, req, false, &who) < 0) return;
  json_t *body = decode_body(req, false);
  if (!body) return;
  int count, ttl;
  const char *prefix;
  sbx_lease *l = auth_proof(d, req, id, body, &who);
  if (!l || fork_args(d, req, body, &count, &ttl, &prefix) < 0) goto out;
  if (!provider_image_keeps(d->prov)) {
    no_driver_verb(d, req, "fork");
    goto out;
  }
  if (strcmp(l->key.net, "egress") == 0) {
    reply_error(req, 409, "sandbox is on the egress lane");
    goto out;
  }
  if (lease_archived(l)) {
    reply_error(req, 409, "sandbox archived");
    goto out;
  }
  if (!l->inst) {
    reply_error(req, 500, "fork failed");
    goto out;
  }
  if (sbx_pool_mgr_draining(d->pm)) {
    reply_error(req, 429, "node draining");
    goto out;
  }
  sbx_error err;
  if (reserve_all(d, l->tenant, count, &err) < 0) {
    reply_error(req, 429, err.msg); /* room for all children or none (§5.8 step 1) */
    goto out;
  }
  struct fork_op *op = sbx_calloc(1, sizeof *op);
  op->d = d;
  op->req = req;
  op->count = op->pending = count;
  op->ttl = ttl;
  op->key = l->key;
  op->prefix = prefix ? sbx_strdup(prefix) : NULL;
  snprintf(op->parent, sizeof op->parent, "%s", l->id);
  snprintf(op->tenant, sizeof op->tenant, "%s", l->tenant);
  op->kids = sbx_calloc((size_t)count, sizeof *op->kids);
  /* Not an API: lets a test make one child fail deterministically to see
   * every other child rolled back (§5.8 step 4). */
  const char *fail = getenv("SANDBOXD_TEST_FORK_FAIL_CHILD");
  op->fail_child = fail && *fail ? atoi(fail) : -1;
  /* The parent's part: its image, taken on this thread (a hibernated
   * parent stays frozen and is not woken, §5.8 step 2). */
  if (new_image_path(d, "fork", op->image, sizeof op->image, &err) < 0 || inst_snapshot(l->inst, op->image, &err) < 0) {
    if (op->image[0]) rm_image(op->image);
    op->pending = 0;
    fork_fail(op, err.msg);
    sbx_free(op->kids);
    sbx_free(op->prefix);
    sbx_free(op);
    goto out;
  }
  req->on_close = fork_client_gone;
  req->on_close_arg = op;
  for (int i = 0; i < count; i++) {
    op->kids[i].op = op;
    sbx_pool_mgr_submit(d->pm, fork_work, fork_child_done, &op->kids[i], true);
  }
out:
  json_decref(body);
}

void lifecycle_recover(struct sbxd *d) {
  /* A fork's image lives only while its children start; one left by a
   * killed daemon has no user (its children were never journalled and
   * reconcile destroyed them). */
  char imgs[PATH_MAX], img[PATH_MAX];
  DIR *dir = sbxi_path_fmt(imgs, sizeof imgs, NULL, "%s/images", d->cfg->data_dir) == 0 ? opendir(imgs) : NULL;
  struct dirent *de;
  while (dir && (de = readdir(dir)))
    if (de->d_name[0] != '.' && sbxi_path_fmt(img, sizeof img, NULL, "%s/%s/img", imgs, de->d_name) == 0)
      rm_image(img); /* detaches its tmpfs */
  if (dir) closedir(dir);
  sbxi_rm_rf_at(d->data_fd, "images", NULL);
  checkpoint_sweep(d, true);
  promote_sweep(d);
  archive_recover(d);
}
