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
 * and a torn last line (a crash mid-append) is ignored and cut off at the
 * next start. With sync_claims the log is fdatasync'ed by durable.c's
 * thread, many records at a time, and answers wait for it.
 *
 * A change is journalled as a transaction (journal_begin, the appends,
 * then journal_commit or journal_abort) before it is applied in memory.
 * A failed or short append (a full disk) is undone by truncating both
 * files back to where the transaction began, so no torn record is left
 * for the next append to run into, and the caller answers 5xx with its
 * state unchanged. Truncating frees space, so it works on a full disk. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandboxd.h"
#include "core/path.h"

#define USAGE_ROTATE (64ll * 1024 * 1024)
#define LOG_FOLD 4096

static int mkdirs(const char *path, sbx_error *err) {
  char buf[4096];
  if (sbxi_path_fmt(buf, sizeof buf, err, "%s", path) < 0) return SBX_E_NAMETOOLONG;
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
  d->log_size = fstat(d->log_fd, &st) == 0 ? (int64_t)st.st_size : 0;
  return 0;
}

/* ---- the failure state shown in /v1/info and /metrics ---- */

void journal_failed(struct sbxd *d, const sbx_error *err) {
  d->m.journal_errors++;
  if (!d->journal_error[0]) sbx_error_log("journal: %s; changes are refused until it can be written", err->msg);
  snprintf(d->journal_error, sizeof d->journal_error, "%.*s", (int)sizeof d->journal_error - 1, err->msg);
}

static void journal_healthy(struct sbxd *d) {
  if (!d->journal_error[0]) return;
  sbx_info("journal: writable again (after: %s)", d->journal_error);
  d->journal_error[0] = '\0';
}

static int atomic_write(struct sbxd *d, const char *name, const char *data, size_t len, bool sync, sbx_error *err) {
  char tmp[128];
  if (sbxi_path_fmt(tmp, sizeof tmp, err, ".%s.tmp", name) < 0) return SBX_E_NAMETOOLONG;
  const char *step;
  if (sbxi_write_file_atomic(d->data_fd, name, tmp, data, len, 0600, sync, &step) < 0)
    return sbx_err_os(err, errno, "%s %s/%s", step, d->cfg->data_dir, strcmp(step, "rename") ? tmp : name);
  return 0;
}

static void usage_rotate(struct sbxd *d);

static json_t *key_json(const sbx_pool_key *k) {
  return json_pack("{s:s,s:s,s:s}", "template", k->tmpl, "net", k->net, "size", k->size);
}

static json_t *claim_json(const sbx_lease *l) {
  json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:s,s:I,s:I,s:i}", "id", l->id, "token", l->token, "tenant", l->tenant,
                        "key", key_json(&l->key), "vm", l->vm, "claimed_at", (json_int_t)l->claimed_at, "deadline",
                        (json_int_t)l->deadline, "ttl", l->ttl);
  if (l->claim_ref) json_object_set_new(o, "claim_ref", json_string(l->claim_ref));
  if (l->from_checkpoint[0]) json_object_set_new(o, "from_checkpoint", json_string(l->from_checkpoint));
  if (l->failed)
    json_object_update_new(o, json_pack("{s:b,s:s,s:s,s:I}", "failed", 1, "failed_reason", l->failed_reason,
                                        "failed_cause", l->failed_cause, "failed_at", (json_int_t)l->failed_at));
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
    d->log_size = 0;
    d->log_torn = false;
  }
  return rc;
}

int journal_begin(struct sbxd *d, struct jmark *m, sbx_error *err) {
  /* A tail that could not be cut off once: a snapshot replaces the log. */
  if ((d->log_torn || d->usage_torn) && journal_repair(d, err) < 0) {
    journal_failed(d, err);
    return -1;
  }
  usage_rotate(d);
  if (d->log_records >= LOG_FOLD) {
    sbx_error ferr;
    /* Not fatal: the log just grows until a fold succeeds. */
    if (journal_write_claims(d, &ferr) < 0) sbx_warn("claims journal: fold: %s", ferr.msg);
  }
  m->log_size = d->log_size;
  m->usage_size = d->usage_size;
  m->log_records = d->log_records;
  return 0;
}

void journal_abort(struct sbxd *d, const struct jmark *m, const sbx_error *err) {
  /* Always both: the failed append's bytes are not counted in the sizes. */
  d->log_torn = ftruncate(d->log_fd, m->log_size) < 0;
  d->usage_torn = ftruncate(d->usage_fd, m->usage_size) < 0;
  d->log_size = m->log_size;
  d->usage_size = m->usage_size;
  d->log_records = m->log_records;
  journal_failed(d, err);
}

void journal_commit(struct sbxd *d) { journal_healthy(d); }

int journal_repair(struct sbxd *d, sbx_error *err) {
  if (d->usage_torn) {
    if (ftruncate(d->usage_fd, d->usage_size) < 0) return sbx_err_os(err, errno, "truncate usage.jsonl");
    d->usage_torn = false;
  }
  int rc = journal_write_claims(d, err);
  if (rc == 0) journal_healthy(d);
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

/* One write of a whole line. A short write (the disk filled up during it)
 * leaves a torn line: the size is left where it was, so the caller's
 * journal_abort cuts it off. */
static int append_line(int fd, const char *s, size_t n, const char *name, sbx_error *err) {
  ssize_t w = write(fd, s, n);
  if (w == (ssize_t)n) return 0;
  return sbx_err_os(err, w < 0 ? errno : ENOSPC, "append %s", name);
}

static int log_write(struct sbxd *d, char *s, size_t n, sbx_error *err) {
  s[n] = '\n'; /* replaces the NUL: one write of the whole line */
  if (append_line(d->log_fd, s, n + 1, "claims.log", err) < 0) return -1;
  d->log_size += (int64_t)(n + 1);
  if (d->cfg->sync_claims && !durable_async(d) && fdatasync(d->log_fd) < 0)
    return sbx_err_os(err, errno, "fsync claims.log");
  d->log_seq++; /* with the sync thread, durable_reply waits for it */
  d->log_records++;
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
  if (l->from_checkpoint[0]) line_str(&w, ",", "from_checkpoint", l->from_checkpoint);
  if (l->failed) {
    line_str(&w, ",\"failed\":true,", "failed_reason", l->failed_reason);
    line_str(&w, ",", "failed_cause", l->failed_cause);
    line_fmt(&w, ",\"failed_at\":%lld", (long long)l->failed_at);
  }
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
    int64_t whole = 0; /* bytes up to the last complete line */
    while ((n = getline(&line, &cap, f)) > 0) {
      if (line[n - 1] != '\n') break; /* a crash mid-append: never acknowledged */
      whole += n;
      json_error_t je;
      json_t *rec = json_loadb(line, (size_t)n, 0, &je);
      if (rec) replay(claims, rec);
      else sbx_warn("claims.log: skipping a torn record");
      json_decref(rec);
    }
    free(line);
    fclose(f);
    /* Cut a torn tail off, or the next append would extend it into one
     * unreadable line and lose that record too. */
    if (d->log_size > whole) {
      sbx_warn("claims.log: cutting off a torn last record (%lld bytes)", (long long)(d->log_size - whole));
      if (ftruncate(d->log_fd, whole) < 0) d->log_torn = true;
      else d->log_size = whole;
    }
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

int usage_event(struct sbxd *d, const char *ev, const sbx_lease *l, const char *ref, sbx_error *err) {
  return usage_event_children(d, ev, l, ref, NULL, 0, err);
}

void usage_note(struct sbxd *d, const char *ev, const sbx_lease *l, const char *ref) {
  sbx_error err;
  if (usage_event(d, ev, l, ref, &err) < 0) sbx_warn("usage.jsonl: %s event of %s not recorded: %s", ev, l->id, err.msg);
}

int usage_event_children(struct sbxd *d, const char *ev, const sbx_lease *l, const char *ref,
                         const char *const *children, size_t nchildren, sbx_error *err) {
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
  if (strcmp(ev, "fail") == 0) line_str(&w, ",", "reason", l->failed_reason);
  for (size_t i = 0; i < nchildren; i++) {
    if (i == 0) line_raw(&w, ",\"children\":[", 13);
    line_fmt(&w, "%s\"%s\"", i ? "," : "", children[i]); /* sandbox ids: [a-z0-9_] */
  }
  if (nchildren) line_raw(&w, "]", 1);
  line_raw(&w, "}\n", 2);
  if (w.overflow) { /* every field is bounded (see LINE_MAX_BYTES): not expected */
    sbx_warn("usage.jsonl: %s event of %s too long to record", ev, l->id);
    return 0;
  }
  /* One write of the whole line, so concurrent readers never see half;
   * rotation is journal_begin's, never inside a transaction. */
  if (append_line(d->usage_fd, w.p, w.n, "usage.jsonl", err) < 0) return -1;
  d->usage_size += (int64_t)w.n;
  metrics_event(d, ev);
  return 0;
}

int journal_write_pools(struct sbxd *d, const struct pool_cfg *p, size_t n, sbx_error *err) {
  json_t *root = json_pack("{s:o}", "pools", config_pools_json(p, n));
  char *s = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  int rc = atomic_write(d, "pools.json", s, strlen(s), true, err);
  free(s);
  return rc;
}

int journal_read_pools(struct sbxd *d, struct pool_cfg **p, size_t *n, sbx_error *err) {
  int fd = openat(d->data_fd, "pools.json", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return errno == ENOENT ? 0 : sbx_err_os(err, errno, "pools.json");
  json_error_t je;
  json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
  close(fd);
  if (!root) return sbx_err(err, SBX_E_PARSE, "pools.json: %s", je.text);
  int rc = config_parse_pools(json_object_get(root, "pools"), true, d->cfg, p, n, err);
  json_decref(root);
  if (rc < 0) return sbx_err_wrap(err, "pools.json");
  return 1;
}
