/* subst.c - fs_replace (§5.7): every match of a pattern in each file,
 * replaced by an expanded template, each file rewritten atomically.
 *
 * Each file is read whole, rewritten in memory, written to a temporary file
 * beside it with the old file's permission bits and owner, and renamed over
 * it (replace_at, as fs_write). Whatever fails midway, every file is either
 * its old self or wholly new. Runs on a job thread (job.c) so a slow or
 * catastrophic pattern holds no other connection; like every one-shot verb
 * it runs to completion if the client goes away (§4).
 *
 * (this implementation) A symlink named in `files` is refused before any
 * file is touched, where the reference replaces it by a regular file with
 * its target's content: the target may lie anywhere, and an edit through a
 * link is rarely what the caller meant.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pattern.h"
#include "util/util.h"
#include "silkd.h"

#define REPLACE_FILE_MAX (8u * 1024 * 1024)   /* larger files: count 0 (§6) */
#define REPLACE_OUT_MAX (256u * 1024 * 1024) /* bound on one rewritten file */
#define REPLACE_PLAIN_RENAME (1024 * 1024)    /* below: commit with rename(2) */

struct repl_req {
  char **files;
  size_t n;
  char *tpl;
  struct pattern pt;
};

static void repl_req_free(void *arg) {
  struct repl_req *q = arg;
  for (size_t i = 0; i < q->n; i++) sbx_free(q->files[i]);
  sbx_free(q->files);
  sbx_free(q->tpl);
  pattern_free(&q->pt);
  sbx_free(q);
}

static void fail_os(struct job *j, int errnum, const char *ctx, const char *file) {
  char m[PATH_MAX + 64];
  snprintf(m, sizeof m, "%s: %s", ctx, file);
  job_os_error(j, errnum, m);
}

/* The new content of s[0..n) into out; the number of matches, or -1 after
 * sending the error. Matches do not overlap; after an empty match the next
 * search moves on by one character, and an empty match right where the
 * previous one ended is not counted (the reference's rule). */
static long long substitute(struct job *j, struct repl_req *q, struct matcher *m, const char *file, const char *s,
                            size_t n, sbx_buf *out) {
  long long count = 0;
  size_t pos = 0, copied = 0, last_end = (size_t)-1;
  sbx_error e;
  while (pos <= n) {
    int rc = matcher_run(m, q->pt.code, s, n, pos, 0);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      char em[256], msg[PATH_MAX + 512];
      match_rc_message(rc, em, sizeof em);
      snprintf(msg, sizeof msg, "%s: %s in %s", match_rc_is_limit(rc) ? "pattern too expensive" : "match", em, file);
      job_error(j, match_rc_is_limit(rc) ? SBX_ERR_BAD_REQUEST : SBX_ERR_INTERNAL, msg);
      return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
    size_t ms = ov[0], me = ov[1];
    if (ms == me && ms == last_end) { /* empty, adjacent to the last match */
      if (ms >= n) break;
      pos = ms + 1;
      while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
      continue;
    }
    if (sbx_buf_add(out, s + copied, ms - copied, &e) < 0 ||
        expand_replacement(out, q->tpl, q->pt.code, m->md, s, &e) < 0) {
      job_error(j, SBX_ERR_INTERNAL, "write: rewritten file too large");
      return -1;
    }
    copied = me;
    last_end = me;
    count++;
    if (me > ms) {
      pos = me;
    } else {
      if (ms >= n) break;
      pos = ms + 1;
      while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
    }
  }
  if (sbx_buf_add(out, s + copied, n - copied, &e) < 0) {
    job_error(j, SBX_ERR_INTERNAL, "write: rewritten file too large");
    return -1;
  }
  return count;
}

/* Temp file beside path with st's mode and owner, then the rename. */
static int commit(const char *path, const struct stat *st, const char *data, size_t n) {
  static atomic_ullong seq;
  char tmp[PATH_MAX + 64];
  int w = snprintf(tmp, sizeof tmp, "%s.silkd-%d-r%llu.tmp", path, (int)silkd.pid,
                   (unsigned long long)atomic_fetch_add(&seq, 1));
  if (w < 0 || (size_t)w >= sizeof tmp) return -ENAMETOOLONG;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return -errno;
  int err = 0;
  for (size_t off = 0; off < n && !err;) {
    ssize_t k = write(fd, data + off, n - off);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) err = errno;
    else off += (size_t)k;
  }
  if (!err && fchown(fd, st->st_uid, st->st_gid) < 0) err = errno;
  if (!err && fchmod(fd, st->st_mode & 07777) < 0) err = errno; /* after chown, which clears set-id bits */
  if (close(fd) < 0 && !err) err = errno;
  /* replace_at spares a large file ext4's flush inside rename; for small
   * ones its exchange and unlink cost more than the flush (bench/find:
   * 500 files of 5 KB under load, 776 ms with replace_at, 270 ms plain). */
  if (!err && (n < REPLACE_PLAIN_RENAME ? rename(tmp, path) : replace_at(AT_FDCWD, tmp, AT_FDCWD, path)) < 0)
    err = errno;
  if (err) unlink(tmp);
  return -err;
}

/* One file; false after an error frame. */
static bool replace_one(struct job *j, struct repl_req *q, struct matcher *m, const char *file, char *buf,
                        sbx_buf *out) {
  int fd = open(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    fail_os(j, e, "read", file);
    return false;
  }
  sbx_wire_resp r = {.type = SBX_RESP_REPLACED, .u.replaced = {file, 0}};
  sbx_error e;
  if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > REPLACE_FILE_MAX) {
    close(fd);
    if (!S_ISREG(st.st_mode)) {
      fail_os(j, S_ISDIR(st.st_mode) ? EISDIR : EINVAL, "read", file);
      return false;
    }
    job_emit(j, &r, &e);
    return true;
  }
  size_t n = 0;
  int rerr = 0;
  for (;;) {
    ssize_t k = read(fd, buf + n, REPLACE_FILE_MAX + 1 - n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) rerr = errno;
    if (k <= 0) break;
    n += (size_t)k;
    if (n > REPLACE_FILE_MAX) break;
  }
  close(fd);
  if (rerr) {
    fail_os(j, rerr, "read", file);
    return false;
  }
  if (n > REPLACE_FILE_MAX) { /* grew past the bound since fstat */
    job_emit(j, &r, &e);
    return true;
  }
  if (sbxi_utf8_valid_len(buf, n) != n) {
    char msg[PATH_MAX + 64];
    snprintf(msg, sizeof msg, "read: %s: stream did not contain valid UTF-8", file);
    job_error(j, SBX_ERR_INTERNAL, msg);
    return false;
  }
  sbx_buf_reset(out);
  long long count = substitute(j, q, m, file, buf, n, out);
  if (count < 0) return false;
  if (count > 0) {
    int rc = commit(file, &st, out->ptr ? out->ptr : "", out->len);
    if (rc < 0) {
      fail_os(j, -rc, "write", file);
      return false;
    }
  }
  r.u.replaced.replacements = (uint64_t)count;
  job_emit(j, &r, &e);
  return true;
}

static void replace_main(struct job *j, void *arg) {
  struct repl_req *q = arg;
  struct matcher m;
  if (matcher_init(&m, &q->pt) < 0) {
    job_error(j, SBX_ERR_INTERNAL, "out of memory");
    return;
  }
  char *buf = sbx_malloc(REPLACE_FILE_MAX + 1);
  sbx_buf out;
  sbx_buf_init(&out, REPLACE_OUT_MAX);
  bool ok = true;
  for (size_t i = 0; i < q->n && ok; i++) ok = replace_one(j, q, &m, q->files[i], buf, &out);
  if (ok) {
    sbx_wire_resp r = {.type = SBX_RESP_DONE};
    sbx_error e;
    job_emit(j, &r, &e);
  }
  sbx_buf_free(&out);
  sbx_free(buf);
  matcher_free(&m);
}

void verb_fs_replace(struct conn *c, sbx_wire_req *req) {
  const sbx_req_fs_replace *r = &req->u.fs_replace;
  struct repl_req *q = sbx_calloc(1, sizeof *q);
  char msg[512];
  if (pattern_compile(&q->pt, r->pattern, false, msg, sizeof msg) < 0) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "%s", msg);
    repl_req_free(q);
    return;
  }
  for (size_t i = 0; i < r->files.len; i++) {
    struct stat st;
    if (lstat(r->files.items[i], &st) == 0 && S_ISLNK(st.st_mode)) {
      conn_send_error(c, SBX_ERR_BAD_REQUEST, "replace: %s is a symbolic link", r->files.items[i]);
      repl_req_free(q);
      return;
    }
  }
  q->files = sbx_calloc(r->files.len ? r->files.len : 1, sizeof *q->files);
  for (size_t i = 0; i < r->files.len; i++) q->files[q->n++] = sbx_strdup(r->files.items[i]);
  q->tpl = sbx_strdup(r->replacement);
  job_start(c, false, replace_main, q, repl_req_free);
}
