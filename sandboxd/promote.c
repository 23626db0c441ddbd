/* promote.c - promote a sandbox into a template, claims of a promoted key,
 * template delete, and the content digest (spec §4.11, 4.12, 5.10).
 *
 * <data_dir>/promoted/tp_<keyhash>/meta.json names the current generation
 * (written last, the commit pointer), its tenant and digest; the
 * generation directory holds the driver's image. A new promote writes a new
 * generation and then moves the pointer; the old one goes once no claim is
 * linking from it. */
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

#include <openssl/evp.h>

#include "../libsandbox/pool/secret.h"
#include "../libsandbox/template/layers.h"
#include "core/cleanup.h"
#include "core/path.h"
#include "sandboxd.h"
#include "checkpoint.h"

#define CHUNK (16u * 1024 * 1024)

/* ---- the content digest (§5.10) ---- */

struct files {
  char **v;
  size_t n;
};

static int collect(const char *root, const char *rel, struct files *f, int depth, sbx_error *err) {
  if (depth > 256) return sbx_err(err, SBX_E_TOOBIG, "export nested too deep");
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s%s%s", root, rel[0] ? "/" : "", rel);
  DIR *d = opendir(path);
  if (!d) return sbx_err_os(err, errno, "opendir %s", path);
  struct dirent *de;
  int rc = 0;
  while (rc == 0 && (de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name);
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      rc = sbx_err_os(err, errno, "stat %s", sub);
    } else if (S_ISDIR(st.st_mode)) {
      rc = collect(root, sub, f, depth + 1, err);
    } else if (S_ISREG(st.st_mode)) {
      f->v = sbx_reallocarray(f->v, f->n + 1, sizeof *f->v);
      f->v[f->n++] = sbx_strdup(sub);
    }
  }
  closedir(d);
  return rc;
}

static int cmp_bytes(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void hex_of(const unsigned char *md, char out[65]) {
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static void feed(EVP_MD_CTX *c, const char *s) { EVP_DigestUpdate(c, s, strlen(s)); }

/* One file: path, length, then the hex SHA-256 of each 16 MiB chunk. */
static int feed_file(EVP_MD_CTX *total, const char *root, const char *rel, unsigned char *buf, sbx_error *err) {
  char path[PATH_MAX], line[96];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  sbxi_cleanup_close int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) return sbx_err_os(err, errno, "open %s", path);
  feed(total, rel);
  feed(total, "\n");
  snprintf(line, sizeof line, "%lld\n", (long long)st.st_size);
  feed(total, line);
  int rc = 0;
  for (long long left = st.st_size; left > 0 && rc == 0;) {
    size_t want = left < CHUNK ? (size_t)left : CHUNK, got = 0;
    while (got < want) {
      ssize_t r = read(fd, buf + got, want - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        rc = sbx_err_os(err, r < 0 ? errno : EIO, "read %s", path);
        break;
      }
      got += (size_t)r;
    }
    if (rc < 0) break;
    unsigned char md[32];
    unsigned mdl = 0;
    EVP_Digest(buf, got, md, &mdl, EVP_sha256(), NULL);
    char hex[65];
    hex_of(md, hex);
    feed(total, hex);
    feed(total, "\n");
    left -= (long long)got;
  }
  return rc;
}

int content_digest(const char *root, char out[80], sbx_error *err) {
  struct files f = {0};
  int rc = collect(root, "", &f, 0, err);
  if (rc == 0 && f.n) qsort(f.v, f.n, sizeof *f.v, cmp_bytes);
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  unsigned char *buf = rc == 0 ? sbx_malloc(CHUNK) : NULL;
  EVP_DigestInit_ex(c, EVP_sha256(), NULL);
  feed(c, "sandbox-content-digest-v1\n");
  for (size_t i = 0; rc == 0 && i < f.n; i++) rc = feed_file(c, root, f.v[i], buf, err);
  unsigned char md[32];
  unsigned mdl = 0;
  EVP_DigestFinal_ex(c, md, &mdl);
  EVP_MD_CTX_free(c);
  char hex[65];
  hex_of(md, hex);
  snprintf(out, 80, "sha256:%s", hex);
  for (size_t i = 0; i < f.n; i++) sbx_free(f.v[i]);
  sbx_free(f.v);
  sbx_free(buf);
  return rc;
}

/* ---- promote ---- */

static void tp_dir(struct sbxd *d, const sbx_pool_key *k, char *out, size_t cap) {
  char h[33];
  key_hash(k, h);
  /* data_dir is checked at config load to leave room for these names */
  if (sbxi_path_fmt(out, cap, NULL, "%s/promoted/tp_%s", d->cfg->data_dir, h) < 0) out[0] = '\0';
}

static json_t *tp_meta(struct sbxd *d, const sbx_pool_key *k, char *dir, size_t cap) {
  tp_dir(d, k, dir, cap);
  char meta[PATH_MAX];
  if (!dir[0] || sbxi_path_fmt(meta, sizeof meta, NULL, "%s/meta.json", dir) < 0) return NULL;
  return read_json(meta);
}

static bool valid_gen(const char *g) {
  if (!g || strlen(g) != 16) return false;
  for (; *g; g++)
    if (!((*g >= '0' && *g <= '9') || (*g >= 'a' && *g <= 'f'))) return false;
  return true;
}

static void promote_fail(struct http_req *req, const char *who, const sbx_error *err) {
  sbx_warn("promote %s: %s", who, err->msg);
  reply_error(req, 500, "export failed");
}

void h_promote(struct sbxd *d, struct http_req *req, const char *id) {
  struct caller who;
  if (auth_node(d, req, false, &who) < 0) return;
  json_t *body = decode_body(req, false);
  if (!body) return;
  sbx_lease *l = auth_proof(d, req, id, body, &who);
  if (!l) goto out;
  const char *name = json_string_value(json_object_get(body, "template"));
  if (!name || !valid_name(name)) {
    reply_error(req, 400, "invalid template name");
    goto out;
  }
  if (!provider_image_keeps(d->prov)) {
    char msg[128];
    snprintf(msg, sizeof msg, "promote is not available with the %s driver yet", provider_name(d->prov));
    reply_error(req, 501, msg);
    goto out;
  }
  sbx_pool_key key = l->key;
  snprintf(key.tmpl, sizeof key.tmpl, "%s", name);
  if (strcmp(l->key.net, "egress") == 0) {
    reply_error(req, 409, "sandbox is on the egress lane");
    goto out;
  }
  if (sbx_pool_mgr_pooled(d->pm, &key)) {
    reply_error(req, 409, "key is owned by a configured pool");
    goto out;
  }
  if (lease_archived(l)) {
    reply_error(req, 409, "sandbox archived");
    goto out;
  }
  char dir[PATH_MAX], old_gen[32] = "";
  json_t *old = tp_meta(d, &key, dir, sizeof dir);
  if (old && !owns(&who, json_string_value(json_object_get(old, "tenant")))) {
    json_decref(old);
    reply_error(req, 409, "template belongs to another tenant");
    goto out;
  }
  if (old) snprintf(old_gen, sizeof old_gen, "%s", json_string_value(json_object_get(old, "gen")) ?: "");
  json_decref(old);
  if (!l->inst) {
    reply_error(req, 500, "export failed");
    goto out;
  }
  sbx_error err;
  char gen[17], gdir[PATH_MAX], digest[80];
  if (sbxi_mkdir_p(dir, 0700, &err) < 0 || sbxi_random_hex(gen, 8, &err) < 0) {
    promote_fail(req, l->id, &err);
    goto out;
  }
  if (sbxi_path_fmt(gdir, sizeof gdir, &err, "%s/%s", dir, gen) < 0) {
    promote_fail(req, l->id, &err);
    goto out;
  }
  /* a hibernated source is exported as it is, without waking (§4.11) */
  if (inst_snapshot(l->inst, gdir, &err) < 0 || content_digest(gdir, digest, &err) < 0) {
    rm_path(gdir);
    promote_fail(req, l->id, &err);
    goto out;
  }
  int gfd = open(gdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  bool synced = gfd >= 0 && syncfs(gfd) == 0; /* the export on disk before the pointer to it */
  int sync_errno = errno; /* the close below may change errno */
  if (gfd >= 0) close(gfd);
  if (!synced) {
    sbx_err_os(&err, sync_errno, "sync %s", gdir);
    rm_path(gdir);
    promote_fail(req, l->id, &err);
    goto out;
  }
  char at[64];
  fmt_time(now_unix(), 0, false, at, sizeof at);
  json_t *meta = json_pack("{s:o,s:s,s:s,s:s}", "key", key_obj(&key), "gen", gen, "digest", digest, "created_at", at);
  if (who.tenant) json_object_set_new(meta, "tenant", json_string(who.tenant->name));
  char *text = json_dumps(meta, JSON_COMPACT);
  json_decref(meta);
  int rc = commit_file(dir, "meta.json", text, &err);
  free(text);
  if (rc < 0) {
    rm_path(gdir);
    promote_fail(req, l->id, &err);
    goto out;
  }
  if (valid_gen(old_gen)) {
    char odir[PATH_MAX];
    if (sbxi_path_fmt(odir, sizeof odir, NULL, "%s/%s", dir, old_gen) == 0) remove_when_unused(odir);
  }
  usage_note(d, "promote", l, name);
  reply_json(req, 200,
             json_pack("{s:o,s:s,s:s}", "key", key_obj(&key), "content_digest", digest, "keeps",
                       provider_image_keeps(d->prov)));
out:
  json_decref(body);
}

int promoted_claim(struct sbxd *d, struct http_req *req, const struct caller *who, const sbx_pool_key *key, int ttl,
                   const char *claim_ref) {
  char dir[PATH_MAX];
  json_t *meta = tp_meta(d, key, dir, sizeof dir);
  const char *gen = json_string_value(json_object_get(meta, "gen"));
  const char *digest = json_string_value(json_object_get(meta, "digest"));
  /* someone else's template is not promoted for this caller (§2.6) */
  if (!meta || !valid_gen(gen) || !digest || !owns(who, json_string_value(json_object_get(meta, "tenant")))) {
    json_decref(meta);
    return 0;
  }
  struct restore_op *op = sbx_calloc(1, sizeof *op);
  op->proto.key = *key;
  snprintf(op->proto.tenant, sizeof op->proto.tenant, "%s", who->tenant ? who->tenant->name : "");
  op->proto.ttl = ttl;
  op->claim_ref = claim_ref && claim_ref[0] ? sbx_strdup(claim_ref) : NULL;
  /* dir/gen was built with the same bound when the template was promoted */
  (void)sbxi_path_fmt(op->held, sizeof op->held, NULL, "%s/%s", dir, gen);
  (void)sbxi_path_fmt(op->export, sizeof op->export, NULL, "%s/%s", dir, gen);
  snprintf(op->ref, sizeof op->ref, "%s", key->tmpl);
  snprintf(op->digest, sizeof op->digest, "%s", digest);
  json_decref(meta);
  restore_start(d, req, op, who);
  return 1;
}

/* ---- template delete (§4.12) ---- */

void h_template_delete(struct sbxd *d, struct http_req *req) {
  struct caller who;
  if (auth_node(d, req, false, &who) < 0) return;
  char tb[128], nb[32], sb[32];
  const char *t = http_query(req, "template", tb, sizeof tb), *n = http_query(req, "net", nb, sizeof nb),
             *s = http_query(req, "size", sb, sizeof sb);
  if (!n) n = "none";
  if (!s) s = "small";
  if (!t || !valid_name(t) || !valid_net(n) || !valid_size(s)) {
    reply_error(req, 400, !t || !valid_name(t) ? "invalid template name" : !valid_net(n) ? "invalid net" : "invalid size");
    return;
  }
  sbx_pool_key key;
  memset(&key, 0, sizeof key);
  snprintf(key.tmpl, sizeof key.tmpl, "%s", t);
  snprintf(key.net, sizeof key.net, "%s", n);
  snprintf(key.size, sizeof key.size, "%s", s);
  if (sbx_pool_mgr_pooled(d->pm, &key)) {
    reply_error(req, 409, "key is owned by a configured pool");
    return;
  }
  char dir[PATH_MAX];
  json_t *meta = tp_meta(d, &key, dir, sizeof dir);
  if (!meta || !owns(&who, json_string_value(json_object_get(meta, "tenant")))) {
    json_decref(meta);
    reply_error(req, 404, "unknown template");
    return;
  }
  char path[PATH_MAX], gdir[PATH_MAX];
  int prc = sbxi_path_fmt(path, sizeof path, NULL, "%s/meta.json", dir);
  if (prc == 0) prc = sbxi_path_fmt(gdir, sizeof gdir, NULL, "%s/%s", dir, json_string_value(json_object_get(meta, "gen")) ?: "");
  json_decref(meta);
  if (prc < 0) {
    reply_error(req, 500, "delete failed");
    return;
  }
  if (unlink(path) < 0) { /* the commit pointer: gone, the template is */
    reply_error(req, 500, "delete failed");
    return;
  }
  remove_when_unused(gdir);
  http_reply(req, 204, NULL, NULL, 0, NULL);
}

/* At start: generations no meta.json names (a promote or delete cut
 * short by a kill -9). */
void promote_sweep(struct sbxd *d) {
  char root[PATH_MAX];
  if (sbxi_path_fmt(root, sizeof root, NULL, "%s/promoted", d->cfg->data_dir) < 0) return;
  DIR *dir = opendir(root);
  struct dirent *de;
  while (dir && (de = readdir(dir))) {
    if (strncmp(de->d_name, "tp_", 3) != 0) continue;
    char tdir[PATH_MAX], meta[PATH_MAX];
    if (sbxi_path_fmt(tdir, sizeof tdir, NULL, "%s/%s", root, de->d_name) < 0 ||
        sbxi_path_fmt(meta, sizeof meta, NULL, "%s/meta.json", tdir) < 0)
      continue;
    json_t *m = read_json(meta);
    const char *gen = json_string_value(json_object_get(m, "gen"));
    DIR *g = opendir(tdir);
    struct dirent *ge;
    while (g && (ge = readdir(g))) {
      if (!valid_gen(ge->d_name) || (gen && strcmp(gen, ge->d_name) == 0)) continue;
      char gdir[PATH_MAX];
      if (sbxi_path_fmt(gdir, sizeof gdir, NULL, "%s/%s", tdir, ge->d_name) == 0) rm_path(gdir);
    }
    if (g) closedir(g);
    if (!gen) rmdir(tdir); /* a first promote cut short: nothing left of it */
    json_decref(m);
  }
  if (dir) closedir(dir);
}
