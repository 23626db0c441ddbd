/* find.c - fs_find (§5.7): a depth-first walk that never follows a
 * symlink, PCRE2 over each line of every regular UTF-8 file.
 *
 * The walk runs on a job thread (job.c). Each file is read whole (at most
 * 8 MiB, the spec's bound) and checked for UTF-8 once, which decides
 * "binary". When the pattern allows it (pattern.c: buffer_safe) the file is
 * searched in one multiline call and only the lines with a candidate match
 * are checked one by one: a per-line search over every line costs a call
 * per line, which on source trees dominates the time.
 *
 * The entries of the root (or, when they are few, of the directories just
 * below it) are shared out among up to FIND_THREADS threads (one per CPU),
 * each walking whole subtrees with its own matcher, file
 * buffer and frame buffer; frames reach the pipe whole (job_write). An
 * error is kept until every thread has stopped, so it is the final frame.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pattern.h"
#include "util/util.h"
#include "silkd.h"

#define FIND_FILE_MAX (8u * 1024 * 1024) /* larger files are skipped (§6) */

#define FIND_THREADS 4                      /* at most, and no more than the CPUs */
#define FIND_FLUSH (64 * 1024)              /* a thread's frames go out in pieces of this */

struct find_req {
  char *path, *glob;
  struct pattern pt;
};

/* A unit of work: an entry of the directory open at dirfd, reported as
 * base/rel. */
struct find_item {
  int dirfd;
  char *name, *rel;
  unsigned char type;
};

/* What the threads of one find share. */
struct find_shared {
  struct job *j;
  struct find_req *q;
  int rootfd;
  struct find_item *items; /* handed out one at a time */
  size_t n;
  int *dirfds; /* directories opened while listing, closed at the end */
  size_t ndirfds;
  atomic_size_t next;
  atomic_bool stop;
  pthread_mutex_t lock;
  bool failed; /* the first error, sent once every thread is done */
  sbx_wire_error_kind err_kind;
  char err_msg[PATH_MAX + 512];
  const char *base; /* reported prefix: path without trailing slashes */
  size_t base_len;
};

struct finder {
  struct find_shared *sh;
  struct find_req *q;
  struct matcher m;
  char *buf;    /* the file being searched, FIND_FILE_MAX + 1 */
  sbx_buf path; /* the current entry's path as reported */
  sbx_buf out;  /* encoded frames not written yet */
  bool stop;    /* an error, a cancel, or a failed write */
};

static void find_req_free(void *arg) {
  struct find_req *q = arg;
  pattern_free(&q->pt);
  sbx_free(q->path);
  sbx_free(q->glob);
  sbx_free(q);
}

static void stop_with(struct finder *f, sbx_wire_error_kind kind, const char *msg) {
  struct find_shared *sh = f->sh;
  pthread_mutex_lock(&sh->lock);
  if (!sh->failed) {
    sh->failed = true;
    sh->err_kind = kind;
    snprintf(sh->err_msg, sizeof sh->err_msg, "%s", msg);
  }
  pthread_mutex_unlock(&sh->lock);
  atomic_store(&sh->stop, true);
  f->stop = true;
}

static bool stopped(struct finder *f) {
  if (!f->stop && (atomic_load(&f->sh->stop) || job_cancelled(f->sh->j))) f->stop = true;
  return f->stop;
}

static void flush_out(struct finder *f) {
  if (f->out.len && job_write(f->sh->j, f->out.ptr, f->out.len) < 0) f->stop = true;
  sbx_buf_reset(&f->out);
}

static void emit_match(struct finder *f, char *line, size_t len, uint64_t lineno) {
  char save = line[len];
  line[len] = '\0';
  sbx_wire_resp r = {.type = SBX_RESP_MATCH, .u.match = {f->path.ptr, lineno, line}};
  sbx_error e;
  int rc = sbx_wire_encode_resp(&f->out, &r, &e); /* over the cap: out keeps what it had */
  line[len] = save;
  if (rc < 0) stop_with(f, SBX_ERR_INTERNAL, "match frame exceeds the frame cap");
  else if (f->out.len >= FIND_FLUSH) flush_out(f);
}

static void match_failed(struct finder *f, int rc, uint64_t lineno) {
  char m[256], msg[PATH_MAX + 512];
  match_rc_message(rc, m, sizeof m);
  if (match_rc_is_limit(rc))
    snprintf(msg, sizeof msg, "pattern too expensive: %s at %s:%llu", m, f->path.ptr, (unsigned long long)lineno);
  else
    snprintf(msg, sizeof msg, "match: %s at %s:%llu", m, f->path.ptr, (unsigned long long)lineno);
  stop_with(f, match_rc_is_limit(rc) ? SBX_ERR_BAD_REQUEST : SBX_ERR_INTERNAL, msg);
}

/* One line [s, s+len): match it and report. */
static void check_line(struct finder *f, char *s, size_t len, uint64_t lineno) {
  int rc = matcher_run(&f->m, f->q->pt.code, s, len, 0, 0);
  if (rc >= 0) emit_match(f, s, len, lineno);
  else if (rc != PCRE2_ERROR_NOMATCH) match_failed(f, rc, lineno);
}

/* Line by line from offset pos (a line start) numbered lineno. */
static void search_lines(struct finder *f, char *b, size_t n, size_t pos, uint64_t lineno) {
  while (pos < n && !f->stop) {
    char *nl = memchr(b + pos, '\n', n - pos);
    size_t end = nl ? (size_t)(nl - b) : n;
    size_t len = end - pos;
    if (nl && len > 0 && b[end - 1] == '\r') len--;
    check_line(f, b + pos, len, lineno++);
    pos = end + 1;
  }
}

static uint64_t count_nl(const char *s, size_t n) {
  uint64_t k = 0;
  for (size_t i = 0; i < n; i++) k += s[i] == '\n';
  return k;
}

/* Whole-file candidates, each confirmed on its own line. A file with a CR
 * anywhere goes line by line: there `$` must match before a CRLF. */
static void search_file(struct finder *f, char *b, size_t n) {
  const pcre2_code *multi = f->q->pt.multi;
  if (!multi || memchr(b, '\r', n)) {
    search_lines(f, b, n, 0, 1);
    return;
  }
  size_t pos = 0;
  uint64_t lineno = 1;
  while (pos < n && !f->stop) {
    int rc = matcher_run(&f->m, multi, b, n, pos, 0);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) { /* over a limit on the whole file: lines are smaller */
      search_lines(f, b, n, pos, lineno);
      return;
    }
    size_t at = pcre2_get_ovector_pointer(f->m.md)[0];
    char *prev = at > pos ? memrchr(b + pos, '\n', at - pos) : NULL;
    size_t start = prev ? (size_t)(prev - b) + 1 : pos;
    lineno += count_nl(b + pos, start - pos);
    char *nl = memchr(b + start, '\n', n - start);
    size_t end = nl ? (size_t)(nl - b) : n;
    check_line(f, b + start, end - start, lineno);
    lineno++;
    pos = end + 1;
  }
}

/* Read a regular file whole; false to skip it (§5.7: too large, unreadable,
 * not a regular file, not UTF-8). */
static bool load(int dirfd, const char *name, char *buf, size_t *len) {
  int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size <= FIND_FILE_MAX;
  size_t n = 0;
  while (ok) {
    ssize_t k = read(fd, buf + n, FIND_FILE_MAX + 1 - n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      ok = k == 0;
      break;
    }
    n += (size_t)k;
    if (n > FIND_FILE_MAX) ok = false; /* grew past the bound meanwhile */
  }
  close(fd);
  *len = n;
  return ok && sbxi_utf8_valid_len(buf, n) == n;
}

static void walk(struct finder *f, int dirfd);

static void visit(struct finder *f, int dirfd, const char *name, unsigned char type) {
  if (type == DT_UNKNOWN) {
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) return;
    type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
  }
  if (type == DT_DIR) {
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) walk(f, fd); /* an unreadable directory is skipped */
    return;
  }
  if (type != DT_REG) return; /* symlinks are never followed */
  if (f->q->glob && *f->q->glob && !glob_match(f->q->glob, name)) return;
  size_t n;
  if (load(dirfd, name, f->buf, &n)) search_file(f, f->buf, n);
}

/* Depth-first through the directory open at dirfd (consumed). */
static void walk(struct finder *f, int dirfd) {
  DIR *d = fdopendir(dirfd);
  if (!d) {
    close(dirfd);
    return;
  }
  size_t base = f->path.len;
  sbx_error e;
  struct dirent *de;
  while (!stopped(f) && (de = readdir(d)) != NULL) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    f->path.len = base;
    if (sbx_buf_addc(&f->path, '/', &e) < 0 || sbx_buf_adds(&f->path, de->d_name, &e) < 0) {
      sbx_buf_init(&f->path, PATH_MAX * 16); /* over the cap: give up on this one */
      stop_with(f, SBX_ERR_INTERNAL, "path too long");
      break;
    }
    visit(f, dirfd, de->d_name, de->d_type);
  }
  f->path.len = base;
  if (f->path.ptr) f->path.ptr[base] = '\0';
  closedir(d); /* a read error skips the rest of the directory */
}

/* One thread: take root entries until none is left. */
static void *find_thread(void *arg) {
  struct find_shared *sh = arg;
  struct finder f = {.sh = sh, .q = sh->q};
  if (matcher_init(&f.m, &sh->q->pt) < 0) {
    stop_with(&f, SBX_ERR_INTERNAL, "out of memory");
    return NULL;
  }
  f.buf = sbx_malloc(FIND_FILE_MAX + 1);
  sbx_buf_init(&f.path, PATH_MAX * 16);
  sbx_buf_init(&f.out, SBX_WIRE_FRAME_CAP + FIND_FLUSH + 1024);
  sbx_error e;
  for (size_t i; !stopped(&f) && (i = atomic_fetch_add(&sh->next, 1)) < sh->n;) {
    sbx_buf_reset(&f.path);
    if (sbx_buf_add(&f.path, sh->base, sh->base_len, &e) < 0 || sbx_buf_addc(&f.path, '/', &e) < 0 ||
        sbx_buf_adds(&f.path, sh->items[i].rel, &e) < 0) {
      sbx_buf_init(&f.path, PATH_MAX * 16);
      stop_with(&f, SBX_ERR_INTERNAL, "path too long");
      break;
    }
    visit(&f, sh->items[i].dirfd, sh->items[i].name, sh->items[i].type);
  }
  flush_out(&f);
  sbx_buf_free(&f.out);
  sbx_buf_free(&f.path);
  sbx_free(f.buf);
  matcher_free(&f.m);
  return NULL;
}

static void add_item(struct find_shared *sh, size_t *cap, int dirfd, const char *name, const char *prefix,
                     unsigned char type) {
  if (sh->n == *cap) {
    *cap = *cap ? *cap * 2 : 256;
    sh->items = sbx_reallocarray(sh->items, *cap, sizeof *sh->items);
  }
  struct find_item *it = &sh->items[sh->n++];
  it->dirfd = dirfd;
  it->name = sbx_strdup(name);
  size_t pl = strlen(prefix), nl = strlen(name);
  it->rel = sbx_malloc(pl + nl + 2);
  memcpy(it->rel, prefix, pl);
  if (pl) it->rel[pl++] = '/';
  memcpy(it->rel + pl, name, nl + 1);
  it->type = type;
}

/* Append the entries of the directory open at fd (not consumed). */
static void list_dir(struct find_shared *sh, size_t *cap, int fd, const char *prefix) {
  int dfd = dup(fd);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!d) {
    if (dfd >= 0) close(dfd);
    return;
  }
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) add_item(sh, cap, fd, de->d_name, prefix, de->d_type);
  closedir(d); /* a read error skips the rest, as anywhere in the walk */
}

/* The work list: the root's entries, and while they are too few to keep
 * every thread busy, the directories among them replaced by their entries
 * (a project is often one directory under the searched path). */
static void list_work(struct find_shared *sh, size_t threads) {
  size_t cap = 0;
  list_dir(sh, &cap, sh->rootfd, "");
  for (int level = 0; level < 4 && threads > 1 && sh->n < 4 * threads; level++) {
    struct find_item *old = sh->items;
    size_t n = sh->n, dirs = 0;
    sh->items = NULL;
    sh->n = cap = 0;
    for (size_t i = 0; i < n; i++) {
      struct find_item *it = &old[i];
      if (it->type != DT_DIR) { /* kept as it is (DT_UNKNOWN: visit looks) */
        if (sh->n == cap) {
          cap = cap ? cap * 2 : 256;
          sh->items = sbx_reallocarray(sh->items, cap, sizeof *sh->items);
        }
        sh->items[sh->n++] = *it;
        continue;
      }
      int fd = openat(it->dirfd, it->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0) { /* an unreadable directory is skipped, as in the walk */
        dirs++;
        sh->dirfds = sbx_reallocarray(sh->dirfds, sh->ndirfds + 1, sizeof *sh->dirfds);
        sh->dirfds[sh->ndirfds++] = fd;
        list_dir(sh, &cap, fd, it->rel);
      }
      sbx_free(it->name);
      sbx_free(it->rel);
    }
    sbx_free(old);
    if (dirs == 0) break;
  }
}

static void find_main(struct job *j, void *arg) {
  struct find_req *q = arg;
  struct find_shared sh = {.j = j, .q = q};
  sh.rootfd = open(q->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (sh.rootfd < 0) {
    job_os_error(j, errno, "read_dir");
    return;
  }
  pthread_mutex_init(&sh.lock, NULL);
  atomic_init(&sh.next, 0);
  atomic_init(&sh.stop, false);
  /* Reported paths: path, then "/" and the components; trailing slashes
   * of path are dropped so the join stays single ("/" joins as ""). */
  size_t plen = strlen(q->path);
  while (plen > 0 && q->path[plen - 1] == '/') plen--;
  sh.base = q->path;
  sh.base_len = plen;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  size_t threads = cpus > 1 ? (size_t)(cpus < FIND_THREADS ? cpus : FIND_THREADS) : 1;
  list_work(&sh, threads);
  size_t extra = threads - 1;
  if (extra > sh.n / 2) extra = sh.n / 2; /* a thread per two entries at least */
  pthread_t th[FIND_THREADS];
  size_t started = 0;
  for (; started < extra; started++)
    if (pthread_create(&th[started], NULL, find_thread, &sh) != 0) break;
  find_thread(&sh);
  for (size_t i = 0; i < started; i++) pthread_join(th[i], NULL);
  if (sh.failed) job_error(j, sh.err_kind, sh.err_msg);
  else if (!job_cancelled(j)) {
    sbx_wire_resp r = {.type = SBX_RESP_DONE};
    sbx_error e;
    job_emit(j, &r, &e);
  }
  for (size_t i = 0; i < sh.n; i++) {
    sbx_free(sh.items[i].name);
    sbx_free(sh.items[i].rel);
  }
  sbx_free(sh.items);
  for (size_t i = 0; i < sh.ndirfds; i++) close(sh.dirfds[i]);
  sbx_free(sh.dirfds);
  pthread_mutex_destroy(&sh.lock);
  close(sh.rootfd);
}

void verb_fs_find(struct conn *c, sbx_wire_req *req) {
  const sbx_req_fs_find *r = &req->u.fs_find;
  struct find_req *q = sbx_calloc(1, sizeof *q);
  char msg[512];
  /* The pattern first: a rejected one touches no file (§5.7). */
  if (pattern_compile(&q->pt, r->pattern, true, msg, sizeof msg) < 0) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "%s", msg);
    find_req_free(q);
    return;
  }
  q->path = sbx_strdup(r->path);
  q->glob = r->glob ? sbx_strdup(r->glob) : NULL;
  job_start(c, true, find_main, q, find_req_free);
}
