/* journal.c - claims.json, pools.json and usage.jsonl under data_dir
 * (spec §5.13, §6). State files are replaced atomically: write a temporary
 * sibling, optionally fsync it and the directory, rename over.
 *
 * The claims journal is a snapshot (claims.json) plus an append-only log
 * of changes since it (claims.log, one JSON line per put or delete). A
 * rename per claim costs hundreds of microseconds on overlay filesystems,
 * an append a few; the log is folded into a fresh snapshot every
 * LOG_FOLD records and at shutdown. Replay is idempotent (put = upsert),
 * so a crash between the snapshot and the log truncation loses nothing,
 * and a torn last line (a crash mid-append) is ignored. With sync_claims
 * the log is fdatasync'ed by durable.c's thread, many records at a time,
 * and answers wait for it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandboxd.h"

#define USAGE_ROTATE (64ll * 1024 * 1024)
#define LOG_FOLD 4096

static int mkdirs(const char *path, sbx_error *err) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0755) < 0 && errno != EEXIST) return sbx_err_os(err, errno, "mkdir %s", buf);
    *p = '/';
  }
  if (mkdir(buf, 0700) < 0 && errno != EEXIST) return sbx_err_os(err, errno, "mkdir %s", buf);
  return 0;
}

int journal_open(struct sbxd *d, sbx_error *err) {
  int rc = mkdirs(d->cfg->data_dir, err);
  if (rc < 0) return rc;
  d->data_fd = open(d->cfg->data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d->data_fd < 0) return sbx_err_os(err, errno, "open %s", d->cfg->data_dir);
  d->usage_fd = openat(d->data_fd, "usage.jsonl", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (d->usage_fd < 0) return sbx_err_os(err, errno, "open %s/usage.jsonl", d->cfg->data_dir);
  d->log_fd = openat(d->data_fd, "claims.log", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (d->log_fd < 0) return sbx_err_os(err, errno, "open %s/claims.log", d->cfg->data_dir);
  return 0;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int atomic_write(struct sbxd *d, const char *name, const char *data, size_t len, bool sync, sbx_error *err) {
  char tmp[128];
  snprintf(tmp, sizeof tmp, ".%s.tmp", name);
  int fd = openat(d->data_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return sbx_err_os(err, errno, "create %s/%s", d->cfg->data_dir, tmp);
  if (write_all(fd, data, len) < 0 || (sync && fsync(fd) < 0)) {
    int e = errno;
    close(fd);
    unlinkat(d->data_fd, tmp, 0);
    return sbx_err_os(err, e, "write %s/%s", d->cfg->data_dir, tmp);
  }
  close(fd);
  if (renameat(d->data_fd, tmp, d->data_fd, name) < 0) {
    int e = errno;
    unlinkat(d->data_fd, tmp, 0);
    return sbx_err_os(err, e, "rename %s/%s", d->cfg->data_dir, name);
  }
  if (sync && fsync(d->data_fd) < 0) return sbx_err_os(err, errno, "fsync %s", d->cfg->data_dir);
  return 0;
}

static json_t *key_json(const sbx_pool_key *k) {
  return json_pack("{s:s,s:s,s:s}", "template", k->tmpl, "net", k->net, "size", k->size);
}

static json_t *claim_json(const sbx_lease *l) {
  json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:s,s:I,s:I,s:i}", "id", l->id, "token", l->token, "tenant", l->tenant,
                        "key", key_json(&l->key), "vm", l->vm, "claimed_at", (json_int_t)l->claimed_at, "deadline",
                        (json_int_t)l->deadline, "ttl", l->ttl);
  if (l->claim_ref) json_object_set_new(o, "claim_ref", json_string(l->claim_ref));
  return o;
}

int journal_write_claims(struct sbxd *d, sbx_error *err) {
  json_t *arr = json_array();
  sbx_lease *l;
  for (size_t i = 0; (l = sbx_lease_at(d->leases, i)); i++) json_array_append_new(arr, claim_json(l));
  json_t *root = json_pack("{s:i,s:o}", "v", 1, "claims", arr);
  char *s = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  int rc = atomic_write(d, "claims.json", s, strlen(s), d->cfg->sync_claims, err);
  free(s);
  if (rc == 0 && d->log_fd >= 0) {
    /* The snapshot holds everything the log said. */
    if (ftruncate(d->log_fd, 0) < 0) return sbx_err_os(err, errno, "truncate claims.log");
    d->log_records = 0;
  }
  return rc;
}

static int log_append(struct sbxd *d, json_t *rec, sbx_error *err) {
  char *s = json_dumps(rec, JSON_COMPACT);
  json_decref(rec);
  size_t n = strlen(s);
  s[n] = '\n'; /* replaces the NUL: one write of the whole line */
  int rc = 0;
  if (write(d->log_fd, s, n + 1) != (ssize_t)(n + 1)) rc = sbx_err_os(err, errno, "append claims.log");
  else if (d->cfg->sync_claims && !durable_async(d) && fdatasync(d->log_fd) < 0)
    rc = sbx_err_os(err, errno, "fsync claims.log");
  else d->log_seq++; /* with the sync thread, durable_reply waits for it */
  free(s);
  if (rc < 0) return journal_write_claims(d, err); /* fall back to a full snapshot */
  if (++d->log_records >= LOG_FOLD) return journal_write_claims(d, err);
  return 0;
}

int journal_put(struct sbxd *d, const sbx_lease *l, sbx_error *err) {
  return log_append(d, json_pack("{s:s,s:o}", "op", "put", "claim", claim_json(l)), err);
}

int journal_del(struct sbxd *d, const char *id, sbx_error *err) {
  return log_append(d, json_pack("{s:s,s:s}", "op", "del", "id", id), err);
}

static void replay(json_t *claims, const json_t *rec) {
  const char *op = json_string_value(json_object_get(rec, "op"));
  const json_t *c = json_object_get(rec, "claim");
  const char *id = op && strcmp(op, "put") == 0 ? json_string_value(json_object_get(c, "id"))
                                                 : json_string_value(json_object_get(rec, "id"));
  if (!op || !id) return;
  size_t i;
  json_t *have;
  json_array_foreach(claims, i, have) {
    const char *hid = json_string_value(json_object_get(have, "id"));
    if (hid && strcmp(hid, id) == 0) {
      json_array_remove(claims, i);
      break;
    }
  }
  if (strcmp(op, "put") == 0 && json_is_object(c)) json_array_append(claims, (json_t *)c);
}

json_t *journal_read_claims(struct sbxd *d) {
  json_t *claims = NULL;
  int fd = openat(d->data_fd, "claims.json", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    json_error_t je;
    json_t *root = json_loadfd(fd, 0, &je);
    close(fd);
    if (!root) sbx_error_log("claims.json: %s (line %d); ignoring the snapshot", je.text, je.line);
    claims = json_incref(json_object_get(root, "claims"));
    json_decref(root);
  }
  if (!json_is_array(claims)) {
    json_decref(claims);
    claims = json_array();
  }
  fd = openat(d->data_fd, "claims.log", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    FILE *f = fdopen(fd, "r");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
      json_error_t je;
      json_t *rec = json_loadb(line, (size_t)n, 0, &je);
      if (rec) replay(claims, rec);
      else sbx_warn("claims.log: skipping a torn record");
      json_decref(rec);
    }
    free(line);
    fclose(f);
  }
  return claims;
}

static void usage_rotate(struct sbxd *d) {
  struct stat st;
  if (fstat(d->usage_fd, &st) < 0 || st.st_size < USAGE_ROTATE) return;
  if (renameat(d->data_fd, "usage.jsonl", d->data_fd, "usage.jsonl.1") < 0) return;
  int fd = openat(d->data_fd, "usage.jsonl", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  close(d->usage_fd);
  d->usage_fd = fd;
}

void usage_event(struct sbxd *d, const char *ev, const sbx_lease *l, const char *ref) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  char t[64];
  fmt_time(ts.tv_sec, ts.tv_nsec, true, t, sizeof t);
  json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "t", t, "ev", ev, "id", l->id, "vm", l->vm);
  if (strcmp(ev, "claim") == 0) {
    char h[33];
    key_hash(&l->key, h);
    json_object_set_new(o, "key", json_string(h));
  }
  if (l->tenant[0]) json_object_set_new(o, "tenant", json_string(l->tenant));
  if (ref) json_object_set_new(o, "ref", json_string(ref));
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  size_t n = strlen(s);
  s[n] = '\n'; /* json_dumps leaves room: we replace the NUL and write n+1 */
  usage_rotate(d);
  /* One write of the whole line, so concurrent readers never see half. */
  if (write(d->usage_fd, s, n + 1) != (ssize_t)(n + 1)) sbx_warn("usage.jsonl: write failed: %s", strerror(errno));
  free(s);
}

int journal_write_pools(struct sbxd *d, const struct pool_cfg *p, size_t n, sbx_error *err) {
  json_t *root = json_pack("{s:o}", "pools", config_pools_json(p, n));
  char *s = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  int rc = atomic_write(d, "pools.json", s, strlen(s), true, err);
  free(s);
  return rc;
}

int journal_read_pools(struct sbxd *d, struct pool_cfg **p, size_t *n, char *errbuf, size_t errlen) {
  int fd = openat(d->data_fd, "pools.json", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    snprintf(errbuf, errlen, "pools.json: %s", strerror(errno));
    return -1;
  }
  json_error_t je;
  json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
  close(fd);
  if (!root) {
    snprintf(errbuf, errlen, "pools.json: %s", je.text);
    return -1;
  }
  char msg[400];
  int rc = config_parse_pools(json_object_get(root, "pools"), true, d->cfg, p, n, msg, sizeof msg);
  json_decref(root);
  if (rc < 0) {
    snprintf(errbuf, errlen, "pools.json: %s", msg);
    return -1;
  }
  return 1;
}
