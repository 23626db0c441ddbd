/* checkpoint.c - checkpoints (create, list, delete, branch) and their
 * store, promote and template delete (spec §4.11-4.16, 5.9, 5.10).
 *
 * Store (a local directory, or a shared filesystem mounted there):
 *   <checkpoint_dir>/<ck_id>/export      the driver's image of the sandbox
 *   <checkpoint_dir>/<ck_id>/meta.json   the CheckpointRecord, written last
 *                                        (temp file, fsync, rename): the
 *                                        commit pointer
 * A directory without meta.json is an export that never committed (a full
 * disk, a kill -9): it is invisible and removed at start. A delete renames
 * the record out of sight first, so a reader never sees half of one.
 *
 * Promoted templates, one per key hash:
 *   <data_dir>/promoted/<keyhash>/<gen>/export, and meta.json naming the
 *   current generation, its tenant and its content digest.
 *
 * A branch (and a claim of a promoted key) restores the export into a new
 * sandbox on a worker; the record stays in use (a delete waits for the
 * linking to end) until the driver has its own copy of the layers. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../libsandbox/pool/secret.h"
#include "../libsandbox/template/layers.h"
#include "core/path.h"
#include "sandboxd.h"
#include "checkpoint.h"

#define META_MAX 65536
#define PROBE_BRANCH_MS 15000

/* ---- paths and small files ---- */

static void store_dir(struct sbxd *d, char *out, size_t cap) {
  if (d->cfg->checkpoint_dir) snprintf(out, cap, "%s", d->cfg->checkpoint_dir);
  else snprintf(out, cap, "%s/checkpoints", d->cfg->data_dir);
}

static json_t *record_of(struct sbxd *d, const char *id, char *dir, size_t cap);

static bool valid_ck_id(const char *id) {
  if (strncmp(id, "ck_", 3) != 0 || strlen(id) != 19) return false;
  for (const char *p = id + 3; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return true;
}

/* Write text as path (temp file, fsync, rename, fsync of the directory). */
int commit_file(const char *dir, const char *name, const char *text, sbx_error *err) {
  char tmp[PATH_MAX], dst[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
  snprintf(dst, sizeof dst, "%s/%s", dir, name);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return sbx_err_os(err, errno, "create %s", tmp);
  size_t n = strlen(text);
  bool ok = write(fd, text, n) == (ssize_t)n && fsync(fd) == 0;
  int e = errno;
  close(fd);
  if (!ok || rename(tmp, dst) < 0) {
    unlink(tmp);
    return sbx_err_os(err, ok ? errno : e, "write %s", dst);
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

json_t *read_json(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return NULL;
  char *buf = sbx_malloc(META_MAX + 1);
  ssize_t n = read(fd, buf, META_MAX + 1);
  close(fd);
  json_t *v = n > 0 && n <= META_MAX ? json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, NULL) : NULL;
  sbx_free(buf);
  if (v && !json_is_object(v)) {
    json_decref(v);
    v = NULL;
  }
  return v;
}

void rm_path(const char *path) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) return;
  *slash = '\0';
  int fd = open(dir[0] ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  sbxi_rm_rf_at(fd, slash + 1, NULL);
  close(fd);
}

json_t *key_obj(const sbx_pool_key *k) {
  return json_pack("{s:s,s:s,s:s}", "template", k->tmpl, "net", k->net, "size", k->size);
}

bool owns(const struct caller *who, const char *tenant) {
  if (!who->tenant) return true; /* root */
  return tenant && strcmp(tenant, who->tenant->name) == 0;
}

/* ---- records in use by a branch in flight (the read lock of §4.16) ---- */

struct use {
  char path[PATH_MAX]; /* the record or generation directory */
  int n;
  bool doomed; /* deleted meanwhile: removed when the last use ends */
};
static struct use *uses;
static size_t nuses;

static struct use *use_find(const char *path) {
  for (size_t i = 0; i < nuses; i++)
    if (strcmp(uses[i].path, path) == 0) return &uses[i];
  return NULL;
}

static void use_take(const char *path) {
  struct use *u = use_find(path);
  if (!u) {
    uses = sbx_reallocarray(uses, nuses + 1, sizeof *uses);
    u = &uses[nuses++];
    memset(u, 0, sizeof *u);
    snprintf(u->path, sizeof u->path, "%s", path);
  }
  u->n++;
}

static void use_drop(const char *path) {
  struct use *u = use_find(path);
  if (!u || --u->n > 0) return;
  if (u->doomed) rm_path(u->path);
  *u = uses[--nuses];
}

void checkpoint_use(const char *dir, bool take) {
  if (take) use_take(dir);
  else use_drop(dir);
}

json_t *checkpoint_record(struct sbxd *d, const char *id, char *dir, size_t cap) {
  return valid_ck_id(id) ? record_of(d, id, dir, cap) : NULL;
}

/* Remove dir now, or when its last branch has its own copy. */
void remove_when_unused(const char *dir) {
  struct use *u = use_find(dir);
  if (u) u->doomed = true;
  else rm_path(dir);
}

/* ---- restoring an export into a new sandbox (branch, promoted claim) ---- */

static void restore_gone(void *arg) { ((struct restore_op *)arg)->client_gone = true; }

static void restore_work(void *arg) {
  struct restore_op *op = arg;
  provider_restore(op->d->prov, &op->proto.key, op->export, PROBE_BRANCH_MS, &op->inst, &op->err);
}

static void restore_done(void *arg, bool cancelled) {
  struct restore_op *op = arg;
  struct sbxd *d = op->d;
  use_drop(op->held);
  op->req->on_close = NULL;
  if (!op->inst || cancelled || op->client_gone || d->stopping) {
    sbx_lease_unreserve(d->leases, op->proto.tenant);
    if (op->inst) sbx_pool_mgr_destroy(d->pm, op->inst);
    const char *what = op->from_checkpoint[0] ? "branch" : "claim";
    if (!op->inst) sbx_warn("%s of %s: %s", what, op->ref, op->err.msg);
    char msg[160];
    bool damaged = !op->inst && (op->err.code == SBX_E_PARSE || op->err.code == SBX_E_NOTFOUND);
    snprintf(msg, sizeof msg, "%s failed%s", op->from_checkpoint[0] ? "clone" : "provisioning",
             damaged ? ": the stored image is damaged or incomplete" : "");
    reply_error(op->req, 500, msg);
    goto out;
  }
  sbx_lease *l;
  int64_t now = now_unix();
  op->proto.inst = op->inst;
  snprintf(op->proto.vm, sizeof op->proto.vm, "%s", inst_name(op->inst));
  op->proto.claimed_at = now;
  op->proto.deadline = now + op->proto.ttl;
  op->proto.claim_ref = op->claim_ref;
  snprintf(op->proto.from_checkpoint, sizeof op->proto.from_checkpoint, "%s", op->from_checkpoint);
  sbx_error err;
  struct jmark jm;
  if (journal_begin(d, &jm, &err) < 0) {
    sbx_lease_unreserve(d->leases, op->proto.tenant);
    sbx_pool_mgr_destroy(d->pm, op->inst);
    reply_journal_error(op->req, "claim", &err);
    goto out;
  }
  if (sbx_lease_commit(d->leases, &op->proto, true, &l, &op->err) < 0) {
    sbx_lease_unreserve(d->leases, op->proto.tenant);
    sbx_pool_mgr_destroy(d->pm, op->inst);
    reply_error(op->req, 500, "provisioning failed");
    goto out;
  }
  if (journal_put(d, l, &err) < 0 || usage_event(d, "claim", l, op->ref, &err) < 0) {
    /* Not on disk, so not a claim: the sandbox goes, the slot is free. */
    journal_abort(d, &jm, &err);
    sbx_lease_remove(d->leases, l);
    sbx_pool_mgr_destroy(d->pm, op->inst);
    reply_journal_error(op->req, "claim", &err);
    goto out;
  }
  journal_commit(d);
  watch_arm(d, l);
  char dl[64];
  fmt_time(l->deadline, 0, false, dl, sizeof dl);
  json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:b}", "id", l->id, "token", l->token, "deadline", dl, "owner_addr",
                        d->owner_addr, "keeps", provider_image_keeps(d->prov), "sessions_kept", 0);
  if (op->from_checkpoint[0]) json_object_set_new(o, "from_checkpoint", json_string(op->from_checkpoint));
  if (op->digest[0]) json_object_set_new(o, "template_digest", json_string(op->digest));
  durable_reply(d, op->req, "claim", 200, o);
out:
  sbx_free(op->claim_ref);
  sbx_free(op);
}

/* Admission (drain, caps) and the start of a restore; answers itself. */
void restore_start(struct sbxd *d, struct http_req *req, struct restore_op *op, const struct caller *who) {
  sbx_error err;
  if (sbx_pool_mgr_draining(d->pm)) {
    reply_error(req, 429, "node draining");
    goto fail;
  }
  if (sbx_lease_reserve(d->leases, op->proto.tenant, d->cfg->max_claims, who->tenant ? who->tenant->max_claims : 0,
                        &err) < 0) {
    reply_error(req, 429, err.msg);
    goto fail;
  }
  op->d = d;
  op->req = req;
  use_take(op->held);
  req->on_close = restore_gone;
  req->on_close_arg = op;
  sbx_pool_mgr_submit(d->pm, restore_work, restore_done, op, true);
  return;
fail:
  sbx_free(op->claim_ref);
  sbx_free(op);
}

/* ---- checkpoints ---- */

static int delete_record(struct sbxd *d, const char *id, sbx_error *err);

static json_t *record_of(struct sbxd *d, const char *id, char *dir, size_t cap) {
  char store[PATH_MAX], meta[PATH_MAX];
  store_dir(d, store, sizeof store);
  if (sbxi_path_fmt(dir, cap, NULL, "%s/%s", store, id) < 0 ||
      sbxi_path_fmt(meta, sizeof meta, NULL, "%s/meta.json", dir) < 0)
    return NULL;
  return read_json(meta);
}

static bool record_visible(const json_t *rec, const struct caller *who) {
  return rec && !json_is_true(json_object_get(rec, "archive")) &&
         owns(who, json_string_value(json_object_get(rec, "tenant")));
}

/* The record as the API shows it (without the internal archive flag). */
static json_t *record_public(const json_t *rec) {
  json_t *o = json_deep_copy(rec);
  json_object_del(o, "archive");
  json_object_del(o, "created_ns");
  return o;
}

json_t *checkpoint_export(struct sbxd *d, sbx_lease *l, const char *tenant, const char *name, bool archive,
                          char ckid[24], sbx_error *err) {
  char store[PATH_MAX], dir[PATH_MAX], exp[PATH_MAX], hex[17];
  store_dir(d, store, sizeof store);
  if (sbxi_mkdir_p(store, 0700, err) < 0 || sbxi_random_hex(hex, 8, err) < 0) return NULL;
  snprintf(ckid, 24, "ck_%s", hex);
  if (sbxi_path_fmt(dir, sizeof dir, err, "%s/%s", store, ckid) < 0 ||
      sbxi_path_fmt(exp, sizeof exp, err, "%s/export", dir) < 0)
    return NULL;
  if (mkdir(dir, 0700) < 0) {
    sbx_err_os(err, errno, "mkdir %s", dir);
    return NULL;
  }
  /* 1-2: the image, straight into the record's staging directory (a
   * hibernated source is not woken) */
  if (inst_snapshot(l->inst, exp, err) < 0) {
    rm_path(dir);
    return NULL;
  }
  /* the export on disk before the pointer to it (the driver does not sync) */
  int efd = open(exp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (efd < 0 || syncfs(efd) < 0) {
    sbx_err_os(err, errno, "sync %s", exp);
    if (efd >= 0) close(efd);
    rm_path(dir);
    return NULL;
  }
  close(efd);
  /* 3: meta.json last, the commit pointer */
  char at[64];
  fmt_time(now_unix(), 0, false, at, sizeof at);
  json_t *rec = json_pack("{s:s,s:s,s:s,s:o,s:s,s:b}", "id", ckid, "name", name, "sandbox_id", l->id, "key",
                          key_obj(&l->key), "created_at", at, "archive", archive);
  if (tenant && tenant[0]) json_object_set_new(rec, "tenant", json_string(tenant));
  json_object_set_new(rec, "created_ns", json_integer((json_int_t)sbx_now_ns())); /* orders a second's records */
  char *text = json_dumps(rec, JSON_COMPACT);
  int rc = commit_file(dir, "meta.json", text, err);
  free(text);
  if (rc < 0) {
    json_decref(rec);
    rm_path(dir); /* a full disk leaves no half record */
    return NULL;
  }
  return rec;
}

void checkpoint_remove(struct sbxd *d, const char *id) {
  sbx_error err;
  if (valid_ck_id(id) && delete_record(d, id, &err) < 0) sbx_warn("remove %s: %s", id, err.msg);
}

void checkpoint_export_path(struct sbxd *d, const char *id, char *out, size_t cap) {
  char store[PATH_MAX];
  store_dir(d, store, sizeof store);
  snprintf(out, cap, "%s/%s/export", store, id);
}

void h_checkpoint_create(struct sbxd *d, struct http_req *req, const char *id) {
  struct caller who;
  if (auth_node(d, req, false, &who) < 0) return;
  json_t *body = decode_body(req, false);
  if (!body) return;
  sbx_lease *l = auth_proof(d, req, id, body, &who);
  if (!l) goto out;
  json_t *nm = json_object_get(body, "name");
  const char *name = json_is_string(nm) ? json_string_value(nm) : "";
  if ((nm && !json_is_null(nm) && !json_is_string(nm)) || (name[0] && !valid_name(name))) {
    reply_error(req, 400, "invalid name");
    goto out;
  }
  if (!provider_image_keeps(d->prov)) {
    char msg[128];
    snprintf(msg, sizeof msg, "checkpoint is not available with the %s driver yet", provider_name(d->prov));
    reply_error(req, 501, msg);
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
    reply_error(req, 500, "checkpoint failed");
    goto out;
  }
  char ckid[24];
  sbx_error err;
  json_t *rec = checkpoint_export(d, l, who.tenant ? who.tenant->name : NULL, name, false, ckid, &err);
  if (!rec) goto fail;
  usage_note(d, "checkpoint", l, ckid);
  json_t *pub = record_public(rec);
  json_decref(rec);
  reply_json(req, 200,
             json_pack("{s:o,s:s,s:b}", "checkpoint", pub, "keeps", provider_image_keeps(d->prov), "sessions_kept", 0));
  goto out;
fail:
  sbx_warn("checkpoint of %s: %s", l->id, err.msg);
  reply_error(req, 500, "checkpoint failed");
out:
  json_decref(body);
}

static int by_created_desc(const void *a, const void *b) {
  const json_t *ra = *(json_t *const *)a, *rb = *(json_t *const *)b;
  const char *x = json_string_value(json_object_get(ra, "created_at"));
  const char *y = json_string_value(json_object_get(rb, "created_at"));
  int c = strcmp(y ? y : "", x ? x : "");
  if (c) return c;
  json_int_t nx = json_integer_value(json_object_get(ra, "created_ns")), ny = json_integer_value(json_object_get(rb, "created_ns"));
  return (ny > nx) - (ny < nx);
}

void h_checkpoint_list(struct sbxd *d, struct http_req *req) {
  struct caller who;
  if (auth_node(d, req, false, &who) < 0) return;
  char store[PATH_MAX];
  store_dir(d, store, sizeof store);
  json_t **recs = NULL;
  size_t n = 0;
  DIR *dir = opendir(store);
  struct dirent *de;
  while (dir && (de = readdir(dir))) {
    if (!valid_ck_id(de->d_name)) continue;
    char path[PATH_MAX];
    json_t *rec = record_of(d, de->d_name, path, sizeof path);
    if (!record_visible(rec, &who)) {
      json_decref(rec);
      continue;
    }
    recs = sbx_reallocarray(recs, n + 1, sizeof *recs);
    recs[n++] = rec;
  }
  if (dir) closedir(dir);
  if (n) qsort(recs, n, sizeof *recs, by_created_desc);
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++) {
    json_array_append_new(arr, record_public(recs[i]));
    json_decref(recs[i]);
  }
  sbx_free(recs);
  reply_json(req, 200, json_pack("{s:o}", "checkpoints", arr));
}

/* Out of sight first, then removed. A record a branch is linking from
 * loses its commit pointer now (it is gone for every reader) and its
 * files when the branch has its own copy. */
static int delete_record(struct sbxd *d, const char *id, sbx_error *err) {
  char store[PATH_MAX], from[PATH_MAX], to[PATH_MAX], hex[9];
  store_dir(d, store, sizeof store);
  if (sbxi_path_fmt(from, sizeof from, err, "%s/%s", store, id) < 0) return -1;
  struct use *u = use_find(from);
  if (u) {
    char meta[PATH_MAX], gone[PATH_MAX];
    if (sbxi_path_fmt(meta, sizeof meta, err, "%s/meta.json", from) < 0 ||
        sbxi_path_fmt(gone, sizeof gone, err, "%s/.meta.deleted", from) < 0)
      return -1;
    if (rename(meta, gone) < 0) return sbx_err_os(err, errno, "rename %s", meta);
    u->doomed = true;
    return 0;
  }
  if (sbxi_random_hex(hex, 4, err) < 0) return -1;
  if (sbxi_path_fmt(to, sizeof to, err, "%s/.trash-%s-%s", store, id, hex) < 0) return -1;
  if (rename(from, to) < 0) return sbx_err_os(err, errno, "rename %s", from);
  rm_path(to);
  return 0;
}

/* RFC 3339 UTC as written by fmt_time; 0 when unreadable. */
static int64_t parse_time(const char *s) {
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
  return end ? (int64_t)timegm(&tm) : 0;
}

void h_checkpoint_delete(struct sbxd *d, struct http_req *req, const char *id) {
  struct caller who;
  if (auth_node(d, req, false, &who) < 0) return;
  char dir[PATH_MAX];
  json_t *rec = valid_ck_id(id) ? record_of(d, id, dir, sizeof dir) : NULL;
  if (!record_visible(rec, &who)) {
    json_decref(rec);
    reply_error(req, 404, "unknown checkpoint");
    return;
  }
  json_decref(rec);
  sbx_error err;
  if (delete_record(d, id, &err) < 0) {
    sbx_warn("delete %s: %s", id, err.msg);
    reply_error(req, 500, "delete failed");
    return;
  }
  http_reply(req, 204, NULL, NULL, 0, NULL);
}

static bool key_from(const json_t *k, sbx_pool_key *out) {
  const char *t = json_string_value(json_object_get(k, "template")), *n = json_string_value(json_object_get(k, "net")),
             *s = json_string_value(json_object_get(k, "size"));
  if (!t || !n || !s || !valid_name(t) || !valid_net(n) || !valid_size(s)) return false;
  snprintf(out->tmpl, sizeof out->tmpl, "%s", t);
  snprintf(out->net, sizeof out->net, "%s", n);
  snprintf(out->size, sizeof out->size, "%s", s);
  return true;
}

void h_checkpoint_claim(struct sbxd *d, struct http_req *req, const char *id) {
  struct caller who;
  if (auth_node(d, req, false, &who) < 0) return;
  json_t *body = decode_body(req, false);
  if (!body) return;
  int ttl;
  if (body_ttl(req, body, &ttl) < 0) goto out;
  char dir[PATH_MAX];
  /* the id is the capability (§2.6): any node caller may branch it */
  json_t *rec = valid_ck_id(id) ? record_of(d, id, dir, sizeof dir) : NULL;
  if (!rec || json_is_true(json_object_get(rec, "archive"))) {
    json_decref(rec);
    reply_error(req, 404, "unknown checkpoint");
    goto out;
  }
  struct restore_op *op = sbx_calloc(1, sizeof *op);
  bool key_ok = key_from(json_object_get(rec, "key"), &op->proto.key);
  json_decref(rec);
  if (!key_ok) {
    sbx_free(op);
    reply_error(req, 500, "clone failed: the checkpoint record is damaged");
    goto out;
  }
  if (strcmp(op->proto.key.net, "egress") == 0) {
    sbx_free(op);
    reply_error(req, 409, "no egress attachment");
    goto out;
  }
  snprintf(op->proto.tenant, sizeof op->proto.tenant, "%s", who.tenant ? who.tenant->name : "");
  op->proto.ttl = ttl;
  /* record_of built dir within PATH_MAX; op->export is as large */
  (void)sbxi_path_fmt(op->held, sizeof op->held, NULL, "%s", dir);
  (void)sbxi_path_fmt(op->export, sizeof op->export, NULL, "%s/export", dir);
  snprintf(op->ref, sizeof op->ref, "%s", id);
  snprintf(op->from_checkpoint, sizeof op->from_checkpoint, "%s", id);
  restore_start(d, req, op, &who);
out:
  json_decref(body);
}

/* ---- the TTL sweep and the start-up sweep ---- */

void checkpoint_sweep(struct sbxd *d, bool startup) {
  char store[PATH_MAX];
  store_dir(d, store, sizeof store);
  DIR *dir = opendir(store);
  if (!dir) return;
  int64_t now = now_unix(), ttl = (int64_t)d->cfg->checkpoint_ttl_hours * 3600;
  struct dirent *de;
  while ((de = readdir(dir))) {
    char path[PATH_MAX];
    if (sbxi_path_fmt(path, sizeof path, NULL, "%s/%s", store, de->d_name) < 0) continue;
    if (strncmp(de->d_name, ".trash-", 7) == 0) {
      if (startup) rm_path(path);
      continue;
    }
    if (!valid_ck_id(de->d_name)) continue;
    json_t *rec = record_of(d, de->d_name, path, sizeof path);
    if (!rec) {
      if (startup) rm_path(path); /* an export that never committed */
      continue;
    }
    int64_t created = parse_time(json_string_value(json_object_get(rec, "created_at")));
    bool archive = json_is_true(json_object_get(rec, "archive"));
    json_decref(rec);
    if (!archive && ttl > 0 && created > 0 && now >= created + ttl) {
      sbx_error err;
      if (delete_record(d, de->d_name, &err) == 0) sbx_info("checkpoint %s expired", de->d_name);
    }
  }
  closedir(dir);
}
