/* tar_extract.c - libarchive extraction into a staging directory with the
 * §8.5 rules. Runs on a worker thread; everything is relative to the
 * staging dirfd, and no path component is ever resolved through a symlink:
 * directories are entered one component at a time with O_NOFOLLOW.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "silkd.h"
#include "core/cleanup.h"
#include "util/util.h"
#include "tar.h"

/* Split name into components, rejecting absolute names and "..". Empty and
 * "." components are dropped. Returns the count, or -1 if unsafe. */
static int split_name(char *name, char **comps, int max) {
  if (name[0] == '/') return -1;
  int n = 0;
  for (char *save = NULL, *t = strtok_r(name, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
    if (!strcmp(t, ".")) continue;
    if (!strcmp(t, "..")) return -1;
    if (n == max) return -1;
    comps[n++] = t;
  }
  return n;
}

#define MAX_DEPTH 256

/* Open the directory comps[0..n) beneath root, creating missing ones.
 * ELOOP/ENOTDIR on a symlink component come back as unsafe. */
static int open_parent(int root, char **comps, int n, bool create, bool *unsafe) {
  int fd = dup(root);
  for (int i = 0; fd >= 0 && i < n; i++) {
    int next = openat(fd, comps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0 && errno == ENOENT && create) {
      if (mkdirat(fd, comps[i], 0755) < 0 && errno != EEXIST) {
        close(fd);
        return -1;
      }
      next = openat(fd, comps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (next < 0 && (errno == ELOOP || errno == ENOTDIR)) *unsafe = true;
    int e = errno;
    close(fd);
    errno = e;
    fd = next;
  }
  return fd;
}

struct dirmeta {
  char *path;
  mode_t mode;
  uid_t uid;
  gid_t gid;
  struct timespec mtime;
};

static int unsafe(struct tar_job *j, const char *name) {
  j->bad_request = true;
  snprintf(j->msg, sizeof j->msg, "tar extract: unsafe member \"%s\"", name);
  return -1;
}

static int failed(struct tar_job *j, const char *what, const char *name) {
  snprintf(j->msg, sizeof j->msg, "tar extract: %s %s: %s", what, name, strerror(errno));
  return -1;
}

static int write_data(struct archive *a, int fd) {
  const void *buf;
  size_t size;
  la_int64_t off;
  int r;
  while ((r = archive_read_data_block(a, &buf, &size, &off)) == ARCHIVE_OK) {
    if (sbxi_pwrite_all(fd, buf, size, off) < 0) return -1;
  }
  if (r != ARCHIVE_EOF) {
    errno = EIO;
    return -1;
  }
  /* sparse files end in a hole: the size comes from the header */
  return 0;
}

/* One member's placement: the directory it goes in and what it carries. */
struct member {
  const char *orig; /* the name as archived, for messages */
  int pfd;          /* its parent directory */
  const char *base; /* its name there */
  mode_t perm;
  uid_t uid;
  gid_t gid;
  struct timespec times[2];
  bool exists; /* something is at base already; st says what */
  struct stat st;
};

/* A hard link to a member already extracted, never to a path outside. */
static int extract_hardlink(struct tar_job *j, const struct member *m, const char *hl) {
  sbxi_cleanup_free char *tname = sbx_strdup(hl);
  char *tcomps[MAX_DEPTH];
  int tn = split_name(tname, tcomps, MAX_DEPTH);
  bool tbad = false;
  if (tn <= 0) return unsafe(j, hl);
  sbxi_cleanup_close int tfd = open_parent(j->root_fd, tcomps, tn - 1, false, &tbad);
  struct stat st;
  if (tfd < 0) return unsafe(j, hl); /* only members already extracted may be linked */
  if (fstatat(tfd, tcomps[tn - 1], &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode)) return unsafe(j, hl);
  if (m->exists) unlinkat(m->pfd, m->base, 0);
  return linkat(tfd, tcomps[tn - 1], m->pfd, m->base, 0) < 0 ? failed(j, "link", m->orig) : 0;
}

static int extract_dir(struct tar_job *j, const struct member *m, char **comps, int n, struct dirmeta **dirs,
                       size_t *ndirs) {
  if (m->exists && !S_ISDIR(m->st.st_mode)) unlinkat(m->pfd, m->base, 0);
  if (mkdirat(m->pfd, m->base, 0700) < 0 && errno != EEXIST) return failed(j, "mkdir", m->orig);
  /* Mode and mtime go on after the contents, or extraction would bump
   * the mtime and a read-only mode would be in the way. */
  *dirs = sbx_reallocarray(*dirs, *ndirs + 1, sizeof **dirs);
  struct dirmeta *d = &(*dirs)[(*ndirs)++];
  sbx_buf p = SBX_BUF_INIT(1 << 20);
  for (int i = 0; i < n; i++) sbx_buf_printf(&p, NULL, "%s%s", i ? "/" : "", comps[i]);
  d->path = sbx_buf_steal(&p, NULL);
  d->mode = m->perm;
  d->uid = m->uid;
  d->gid = m->gid;
  d->mtime = m->times[1];
  return 0;
}

static int extract_symlink(struct tar_job *j, const struct member *m, const char *target) {
  if (m->exists && S_ISDIR(m->st.st_mode)) {
    errno = EISDIR;
    return failed(j, "symlink", m->orig);
  }
  if (m->exists) unlinkat(m->pfd, m->base, 0);
  if (!target || symlinkat(target, m->pfd, m->base) < 0) return failed(j, "symlink", m->orig);
  fchownat(m->pfd, m->base, m->uid, m->gid, AT_SYMLINK_NOFOLLOW);
  utimensat(m->pfd, m->base, m->times, AT_SYMLINK_NOFOLLOW);
  return 0;
}

static int extract_fifo(struct tar_job *j, const struct member *m) {
  if (m->exists) unlinkat(m->pfd, m->base, 0);
  if (mknodat(m->pfd, m->base, S_IFIFO | 0600, 0) < 0) return failed(j, "mkfifo", m->orig);
  fchownat(m->pfd, m->base, m->uid, m->gid, AT_SYMLINK_NOFOLLOW);
  fchmodat(m->pfd, m->base, m->perm, 0);
  utimensat(m->pfd, m->base, m->times, AT_SYMLINK_NOFOLLOW);
  return 0;
}

static int extract_file(struct tar_job *j, const struct member *m, struct archive *a, la_int64_t size) {
  if (m->exists && S_ISDIR(m->st.st_mode)) {
    errno = EISDIR;
    return failed(j, "open", m->orig);
  }
  if (m->exists) unlinkat(m->pfd, m->base, 0);
  sbxi_cleanup_close int fd = openat(m->pfd, m->base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return failed(j, "open", m->orig);
  if (write_data(a, fd) < 0) return failed(j, "write", m->orig);
  if (ftruncate(fd, size) < 0) {} /* trailing hole */
  if (fchown(fd, m->uid, m->gid) < 0) {}
  fchmod(fd, m->perm);
  futimens(fd, m->times);
  return 0;
}

/* Check the member's name and type, open its parent beneath the staging
 * root, then place it by type. */
static int extract_one(struct tar_job *j, struct archive *a, struct archive_entry *e, struct dirmeta **dirs,
                       size_t *ndirs) {
  const char *orig = archive_entry_pathname(e);
  if (!orig) return unsafe(j, "");
  sbxi_cleanup_free char *name = sbx_strdup(orig);
  char *comps[MAX_DEPTH];
  int n = split_name(name, comps, MAX_DEPTH);
  mode_t type = archive_entry_filetype(e);
  if (n < 0) return unsafe(j, orig);
  if (n == 0) return 0; /* "./": the staging root itself */
  if (type == AE_IFCHR || type == AE_IFBLK) return unsafe(j, orig);
  bool bad = false;
  sbxi_cleanup_close int pfd = open_parent(j->root_fd, comps, n - 1, true, &bad);
  if (pfd < 0) return bad ? unsafe(j, orig) : failed(j, "open parent of", orig);
  struct member m = {
      .orig = orig,
      .pfd = pfd,
      .base = comps[n - 1],
      .perm = archive_entry_perm(e) & 07777,
      .uid = (uid_t)archive_entry_uid(e),
      .gid = (gid_t)archive_entry_gid(e),
      .times = {{archive_entry_mtime(e), archive_entry_mtime_nsec(e)},
                {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}},
  };
  m.exists = fstatat(pfd, m.base, &m.st, AT_SYMLINK_NOFOLLOW) == 0;

  const char *hl = archive_entry_hardlink(e);
  if (hl) return extract_hardlink(j, &m, hl);
  switch (type) {
  case AE_IFDIR: return extract_dir(j, &m, comps, n, dirs, ndirs);
  case AE_IFLNK: return extract_symlink(j, &m, archive_entry_symlink(e));
  case AE_IFIFO: return extract_fifo(j, &m);
  case AE_IFREG: return extract_file(j, &m, a, archive_entry_size(e));
  default: return 0; /* sockets and unknown types: skipped, as tar does */
  }
}

static void apply_dirs(struct tar_job *j, struct dirmeta *dirs, size_t n) {
  for (size_t i = n; i-- > 0;) {
    char *p = sbx_strdup(dirs[i].path);
    char *comps[MAX_DEPTH];
    int k = split_name(p, comps, MAX_DEPTH);
    bool bad = false;
    int fd = k > 0 ? open_parent(j->root_fd, comps, k, false, &bad) : -1;
    if (fd >= 0) {
      if (fchown(fd, dirs[i].uid, dirs[i].gid) < 0) {}
      fchmod(fd, dirs[i].mode);
      struct timespec t[2] = {dirs[i].mtime, dirs[i].mtime};
      futimens(fd, t);
      close(fd);
    }
    sbx_free(p);
    sbx_free(dirs[i].path);
  }
  sbx_free(dirs);
}

void *tar_extract_worker(void *arg) {
  struct tar_job *j = arg;
  struct archive *a = archive_read_new();
  archive_read_support_format_tar(a);
  archive_read_support_format_gnutar(a);
  struct dirmeta *dirs = NULL;
  size_t ndirs = 0;
  j->rc = -1;
  if (archive_read_open(a, j->q, NULL, tarq_read, NULL) != ARCHIVE_OK) {
    snprintf(j->msg, sizeof j->msg, "tar extract: %s", archive_error_string(a));
    goto out;
  }
  for (;;) {
    struct archive_entry *e;
    int r = archive_read_next_header(a, &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      snprintf(j->msg, sizeof j->msg, "tar extract: %s", archive_error_string(a));
      goto out;
    }
    if (extract_one(j, a, e, &dirs, &ndirs) < 0) goto out;
  }
  apply_dirs(j, dirs, ndirs);
  dirs = NULL;
  ndirs = 0;
  j->rc = 0;
out:
  if (dirs) {
    for (size_t i = 0; i < ndirs; i++) sbx_free(dirs[i].path);
    sbx_free(dirs);
  }
  /* From here on the loop drops what still comes; then report, so a
   * failure is answered at once. The loop joins us after that. */
  archive_read_free(a);
  tarq_close_reader(j->q);
  char b = TARQ_NOTIFY_RESULT;
  if (write(j->notify_fd, &b, 1) < 0) {}
  return NULL;
}
