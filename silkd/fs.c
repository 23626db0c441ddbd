/* fs.c - file verbs of §5.5: fs_write (atomic, upload mode), fs_read,
 * fs_list, fs_stat, fs_mkdir, fs_rm, fs_rename.
 *
 * Paths are used as given (the peer is trusted, §8); what is hardened is our
 * own behaviour: fs_read cannot block on a FIFO, fs_rm never follows a
 * symlink inside the tree it deletes, fs_write never leaves a half file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/util.h"
#include "silkd.h"

static void send_os(struct conn *c, int errnum, const char *ctx) {
  sbx_error e;
  sbx_err_os(&e, errnum, "%s", ctx);
  conn_send_sbx_error(c, &e, SBX_ERR_INTERNAL);
}

/* ---- fs_write ---- */

struct fsw {
  struct conn *c;
  int fd;
  char *tmp, *path;
  bool has_mode;
  uint32_t mode;
};

static void fsw_free(struct fsw *w, bool unlink_tmp) {
  struct conn *c = w->c;
  if (w->fd >= 0) close(w->fd);
  if (unlink_tmp) unlink(w->tmp);
  sbx_free(w->tmp);
  sbx_free(w->path);
  sbx_free(w);
  conn_rpc_done(c);
}

/* The temp file is gone before the client hears of the failure, so an
 * error answer means no trace is left (§5.5). */
static void fsw_fail(struct fsw *w, int errnum, const char *ctx) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
  unlink(w->tmp);
  send_os(w->c, errnum, ctx);
  fsw_free(w, false);
}

static void fsw_data(void *rpc, sbx_wire_op op, const uint8_t *d, size_t n) {
  struct fsw *w = rpc;
  while (n > 0) {
    ssize_t k = write(w->fd, d, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      fsw_fail(w, errno, "write");
      return;
    }
    d += k;
    n -= (size_t)k;
  }
}

static void fsw_end(void *rpc) {
  struct fsw *w = rpc;
  struct stat st;
  mode_t mode = 0;
  bool set = true;
  if (w->has_mode) mode = w->mode & 07777;
  else if (stat(w->path, &st) == 0) mode = st.st_mode & 07777;
  else set = false;
  if (set && fchmod(w->fd, mode) < 0) {
    fsw_fail(w, errno, "chmod");
    return;
  }
  /* Close before the commit: that is where a delayed write error (NFS,
   * quota) shows. */
  int fd = w->fd;
  w->fd = -1;
  if (close(fd) < 0) {
    fsw_fail(w, errno, "flush");
    return;
  }
  if (replace_at(AT_FDCWD, w->tmp, AT_FDCWD, w->path) < 0) {
    fsw_fail(w, errno, "commit");
    return;
  }
  conn_send_simple(w->c, SBX_RESP_DONE);
  fsw_free(w, false);
}

static void fsw_abort(void *rpc) { fsw_free(rpc, true); }

static const struct rpc_ops fsw_ops = {
    .mode = SBX_INPUT_UPLOAD, .input = fsw_data, .input_end = fsw_end, .abort = fsw_abort};

void verb_fs_write(struct conn *c, sbx_wire_req *req) {
  const char *path = req->u.fs_write.path;
  struct fsw *w = sbx_calloc(1, sizeof *w);
  size_t len = strlen(path) + 64;
  w->tmp = sbx_malloc(len);
  snprintf(w->tmp, len, "%s.silkd-%d-%llu.tmp", path, (int)silkd.pid, (unsigned long long)silkd_next_id());
  w->path = sbx_strdup(path);
  w->has_mode = req->u.fs_write.has_mode;
  w->mode = req->u.fs_write.mode;
  w->c = c;
  w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (w->fd < 0) {
    send_os(c, errno, "create");
    sbx_free(w->tmp);
    sbx_free(w->path);
    sbx_free(w);
    return;
  }
  conn_rpc_begin(c, &fsw_ops, w);
}

/* ---- fs_read ---- */

struct fsr {
  struct conn *c;
  int fd;
};

static void fsr_pump(struct fsr *r);

static void fsr_end(struct fsr *r) {
  struct conn *c = r->c;
  close(r->fd);
  sbx_free(r);
  conn_rpc_done(c);
}

static void fsr_writable(void *rpc) { fsr_pump(rpc); }
static void fsr_abort(void *rpc) { fsr_end(rpc); }
static const struct rpc_ops fsr_ops = {.mode = SBX_INPUT_NONE, .writable = fsr_writable, .abort = fsr_abort};

static void fsr_pump(struct fsr *r) {
  static uint8_t buf[SILKD_BULK];
  while (conn_out_len(r->c) < SILKD_OUT_HIGH) {
    ssize_t n = read(r->fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      send_os(r->c, errno, "read");
      fsr_end(r);
      return;
    }
    if (n == 0) {
      conn_send_simple(r->c, SBX_RESP_DONE);
      fsr_end(r);
      return;
    }
    if (!conn_send_bulk(r->c, SBX_BULK_DATA, buf, (size_t)n)) return; /* abort follows */
  }
  conn_want_writable(r->c);
}

void verb_fs_read(struct conn *c, sbx_wire_req *req) {
  int fd = open(req->u.fs_read.path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    send_os(c, errno, "open");
    return;
  }
  struct stat st;
  if (fstat(fd, &st) < 0) {
    send_os(c, errno, "open");
    close(fd);
    return;
  }
  if (!S_ISREG(st.st_mode)) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "open: not a regular file");
    close(fd);
    return;
  }
  struct fsr *r = sbx_calloc(1, sizeof *r);
  r->c = c;
  r->fd = fd;
  conn_rpc_begin(c, &fsr_ops, r);
  fsr_pump(r);
}

/* ---- fs_list, fs_stat ---- */

static sbx_wire_file_kind kind_of(mode_t m) {
  if (S_ISREG(m)) return SBX_FILE_FILE;
  if (S_ISDIR(m)) return SBX_FILE_DIR;
  if (S_ISLNK(m)) return SBX_FILE_SYMLINK;
  return SBX_FILE_OTHER;
}

#define LIST_BATCH 4096

/* fs_list streams its batches with the same backpressure as fs_read, so a
 * huge directory never piles up in memory for a slow client. */
struct fsl {
  struct conn *c;
  DIR *d;
  sbx_wire_dir_entry *ents;
  char **names;
  size_t n;
};

static bool flush_entries(struct fsl *l) {
  sbx_wire_resp r = {.type = SBX_RESP_ENTRIES, .u.entries = {l->ents, l->n}};
  bool ok = conn_send_resp(l->c, &r);
  for (size_t i = 0; i < l->n; i++) sbx_free(l->names[i]);
  l->n = 0;
  return ok;
}

static void fsl_end(struct fsl *l) {
  struct conn *c = l->c;
  for (size_t i = 0; i < l->n; i++) sbx_free(l->names[i]);
  closedir(l->d);
  sbx_free(l->ents);
  sbx_free(l->names);
  sbx_free(l);
  conn_rpc_done(c);
}

static void fsl_pump(struct fsl *l) {
  while (conn_out_len(l->c) < SILKD_OUT_HIGH) {
    errno = 0;
    struct dirent *de = readdir(l->d);
    if (!de) {
      int e = errno;
      if (l->n && !flush_entries(l)) return; /* abort follows */
      if (e) send_os(l->c, e, "read_dir");
      else conn_send_simple(l->c, SBX_RESP_DONE);
      fsl_end(l);
      return;
    }
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    struct stat st;
    size_t i = l->n++;
    l->names[i] = sbx_strdup(de->d_name);
    l->ents[i].name = l->names[i];
    if (fstatat(dirfd(l->d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      l->ents[i].kind = kind_of(st.st_mode);
      l->ents[i].size = (uint64_t)st.st_size;
    } else {
      l->ents[i].kind = SBX_FILE_OTHER;
      l->ents[i].size = 0;
    }
    if (l->n == LIST_BATCH && !flush_entries(l)) return;
  }
  conn_want_writable(l->c);
}

static void fsl_writable(void *rpc) { fsl_pump(rpc); }
static void fsl_abort(void *rpc) { fsl_end(rpc); }
static const struct rpc_ops fsl_ops = {.mode = SBX_INPUT_NONE, .writable = fsl_writable, .abort = fsl_abort};

void verb_fs_list(struct conn *c, sbx_wire_req *req) {
  DIR *d = opendir(req->u.fs_list.path);
  if (!d) {
    send_os(c, errno, "read_dir");
    return;
  }
  struct fsl *l = sbx_calloc(1, sizeof *l);
  l->c = c;
  l->d = d;
  l->ents = sbx_calloc(LIST_BATCH, sizeof *l->ents);
  l->names = sbx_calloc(LIST_BATCH, sizeof *l->names);
  conn_rpc_begin(c, &fsl_ops, l);
  fsl_pump(l);
}

void verb_fs_stat(struct conn *c, sbx_wire_req *req) {
  struct stat st;
  if (stat(req->u.fs_stat.path, &st) < 0) {
    send_os(c, errno, "stat");
    return;
  }
  sbx_wire_resp r = {.type = SBX_RESP_STAT};
  r.u.stat.info.kind = kind_of(st.st_mode);
  r.u.stat.info.size = (uint64_t)st.st_size;
  r.u.stat.info.mode = st.st_mode & 07777;
  r.u.stat.info.mtime_epoch_secs = st.st_mtime > 0 ? (uint64_t)st.st_mtime : 0;
  conn_send_resp(c, &r);
}

/* ---- fs_mkdir, fs_rm, fs_rename ---- */

void verb_fs_mkdir(struct conn *c, sbx_wire_req *req) {
  const char *path = req->u.fs_mkdir.path;
  int rc;
  if (req->u.fs_mkdir.has_parents && req->u.fs_mkdir.parents) {
    errno = 0;
    rc = sbxi_mkdirs(path, 0777);
  } else {
    rc = mkdir(path, 0777);
  }
  if (rc < 0) {
    send_os(c, errno, "mkdir");
    return;
  }
  conn_send_simple(c, SBX_RESP_DONE);
}

/* Remove dirfd/name, descending into directories with O_NOFOLLOW so a
 * symlink inside the tree is unlinked, never followed. */
int rm_tree_at(int dirfd, const char *name, sbx_error *err) {
  if (unlinkat(dirfd, name, 0) == 0) return 0;
  if (errno != EISDIR && errno != EPERM) return sbx_err_os(err, errno, "rm");
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return sbx_err_os(err, errno, "rm");
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return sbx_err_os(err, errno, "rm");
  }
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    rc = rm_tree_at(fd, de->d_name, err);
  }
  closedir(d);
  if (rc == 0 && unlinkat(dirfd, name, AT_REMOVEDIR) < 0) rc = sbx_err_os(err, errno, "rm");
  return rc;
}

void verb_fs_rm(struct conn *c, sbx_wire_req *req) {
  const char *path = req->u.fs_rm.path;
  struct stat st;
  if (lstat(path, &st) < 0) {
    send_os(c, errno, "rm");
    return;
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlink(path) < 0) {
      send_os(c, errno, "rm");
      return;
    }
  } else if (req->u.fs_rm.has_recursive && req->u.fs_rm.recursive) {
    sbx_error e;
    if (rm_tree_at(AT_FDCWD, path, &e) < 0) {
      conn_send_sbx_error(c, &e, SBX_ERR_INTERNAL);
      return;
    }
  } else if (rmdir(path) < 0) {
    send_os(c, errno, "rm");
    return;
  }
  conn_send_simple(c, SBX_RESP_DONE);
}

void verb_fs_rename(struct conn *c, sbx_wire_req *req) {
  if (rename(req->u.fs_rename.from, req->u.fs_rename.to) < 0) {
    send_os(c, errno, "rename");
    return;
  }
  conn_send_simple(c, SBX_RESP_DONE);
}
