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
#include <stdarg.h>
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
  struct stat st;
  d->usage_size = fstat(d->usage_fd, &st) == 0 ? (int64_t)st.st_size : 0;
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

/* ---- one JSON line, formatted by hand ----
 * A claim writes two lines (claims.log and usage.jsonl) before it is
 * answered. Building them with jansson (objects, a hash table, a dump)
 * cost about 30 us of a 0.1 ms claim on a cache-cold loop; snprintf into
 * a stack buffer costs a few. Every field is bounded (names, ids, a
 * claim_ref of at most 256 bytes), so the buffer always suffices; if it
 * ever did not, the line is rebuilt with jansson. */
#define LINE_MAX_BYTES 4096

struct line {
  char p[LINE_MAX_BYTES];
  size_t n;
  bool overflow;
};

static void line_raw(struct line *w, const char *s, size_t n) {
  if (w->n + n >= sizeof w->p) {
    w->overflow = true;
    return;
  }
  memcpy(w->p + w->n, s, n);
  w->n += n;
}

static void line_fmt(struct line *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line_fmt(struct line *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(w->p + w->n, sizeof w->p - w->n, fmt, ap);
  va_end(ap);
  if (k < 0 || w->n + (size_t)k >= sizeof w->p) w->overflow = true;
  else w->n += (size_t)k;
}

/* "key":"value" with the value escaped as JSON wants (UTF-8 kept as is,
 * as jansson does); sep is the separator written first. */
static void line_str(struct line *w, const char *sep, const char *key, const char *v) {
  line_fmt(w, "%s\"%s\":\"", sep, key);
  for (const unsigned char *c = (const unsigned char *)v; *c && !w->overflow; c++) {
    if (*c == '"' || *c == '\\') {
      char e[2] = {'\\', (char)*c};
      line_raw(w, e, 2);
    } else if (*c < 0x20 || *c == 0x7f) {
      line_fmt(w, "\\u%04x", *c);
    } else {
      line_raw(w, (const char *)c, 1);
    }
  }
  line_raw(w, "\"", 1);
}

static int log_write(struct sbxd *d, char *s, size_t n, sbx_error *err) {
  s[n] = '\n'; /* replaces the NUL: one write of the whole line */
  int rc = 0;
  if (write(d->log_fd, s, n + 1) != (ssize_t)(n + 1)) rc = sbx_err_os(err, errno, "append claims.log");
  else if (d->cfg->sync_claims && !durable_async(d) && fdatasync(d->log_fd) < 0)
    rc = sbx_err_os(err, errno, "fsync claims.log");
  else d->log_seq++; /* with the sync thread, durable_reply waits for it */
  if (rc < 0) return journal_write_claims(d, err); /* fall back to a full snapshot */
  if (++d->log_records >= LOG_FOLD) return journal_write_claims(d, err);
  return 0;
}

static int log_append_json(struct sbxd *d, json_t *rec, sbx_error *err) {
  char *s = json_dumps(rec, JSON_COMPACT);
  json_decref(rec);
  int rc = log_write(d, s, strlen(s), err); /* json_dumps leaves room for the newline */
  free(s);
  return rc;
}

int journal_put(struct sbxd *d, const sbx_lease *l, sbx_error *err) {
  struct line w = {.n = 0};
  line_str(&w, "{\"op\":\"put\",\"claim\":{", "id", l->id);
  line_str(&w, ",", "token", l->token);
  line_str(&w, ",", "tenant", l->tenant);
  line_str(&w, ",\"key\":{", "template", l->key.tmpl);
  line_str(&w, ",", "net", l->key.net);
  line_str(&w, ",", "size", l->key.size);
  line_str(&w, "}," , "vm", l->vm);
  line_fmt(&w, ",\"claimed_at\":%lld,\"deadline\":%lld,\"ttl\":%d", (long long)l->claimed_at,
           (long long)l->deadline, l->ttl);
  if (l->claim_ref) line_str(&w, ",", "claim_ref", l->claim_ref);
  line_raw(&w, "}}", 2);
  if (w.overflow) return log_append_json(d, json_pack("{s:s,s:o}", "op", "put", "claim", claim_json(l)), err);
  return log_write(d, w.p, w.n, err);
}

int journal_del(struct sbxd *d, const char *id, sbx_error *err) {
  struct line w = {.n = 0};
  line_str(&w, "{\"op\":\"del\",", "id", id);
  line_raw(&w, "}", 1);
  if (w.overflow) return log_append_json(d, json_pack("{s:s,s:s}", "op", "del", "id", id), err);
  return log_write(d, w.p, w.n, err);
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
  if (d->usage_size < USAGE_ROTATE) return;
  if (renameat(d->data_fd, "usage.jsonl", d->data_fd, "usage.jsonl.1") < 0) return;
  int fd = openat(d->data_fd, "usage.jsonl", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  close(d->usage_fd);
  d->usage_fd = fd;
  d->usage_size = 0;
}

void usage_event(struct sbxd *d, const char *ev, const sbx_lease *l, const char *ref) {
  usage_event_children(d, ev, l, ref, NULL, 0);
}

void usage_event_children(struct sbxd *d, const char *ev, const sbx_lease *l, const char *ref,
                          const char *const *children, size_t nchildren) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  char t[64];
  fmt_time(ts.tv_sec, ts.tv_nsec, true, t, sizeof t);
  struct line w = {.n = 0};
  line_str(&w, "{", "t", t);
  line_str(&w, ",", "ev", ev);
  line_str(&w, ",", "id", l->id);
  line_str(&w, ",", "vm", l->vm);
  if (strcmp(ev, "claim") == 0) {
    char h[33];
    key_hash(&l->key, h);
    line_str(&w, ",", "key", h);
  }
  if (l->tenant[0]) line_str(&w, ",", "tenant", l->tenant);
  if (ref) line_str(&w, ",", "ref", ref);
  for (size_t i = 0; i < nchildren; i++) {
    if (i == 0) line_raw(&w, ",\"children\":[", 13);
    line_fmt(&w, "%s\"%s\"", i ? "," : "", children[i]); /* sandbox ids: [a-z0-9_] */
  }
  if (nchildren) line_raw(&w, "]", 1);
  line_raw(&w, "}\n", 2);
  if (w.overflow) { /* every field is bounded (see LINE_MAX_BYTES): not expected */
    sbx_warn("usage.jsonl: %s event of %s too long to record", ev, l->id);
    return;
  }
  usage_rotate(d);
  /* One write of the whole line, so concurrent readers never see half. */
  if (write(d->usage_fd, w.p, w.n) != (ssize_t)w.n) sbx_warn("usage.jsonl: write failed: %s", strerror(errno));
  else d->usage_size += (int64_t)w.n;
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
