/* Import of a root filesystem archive as a template, through libarchive.
 *
 * The archive is untrusted input (anyone's image), so every member is
 * created relative to the new root with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS): a member can neither name a path outside nor reach
 * one through a symlink an earlier member planted. Symlink members are
 * created as they are and never followed. The rules are silkd's fs_push
 * rules (wire spec §8.5), except that device nodes are skipped rather than
 * refused, because root filesystem archives routinely carry /dev entries
 * and a jail's /dev is built fresh anyway. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "core/cleanup.h"
#include "layers.h"
#include "util/util.h"

/* "./a//b/" -> "a/b"; NULL (unsafe) for absolute names and ".." parts. */
static const char *clean_name(const char *in, char *buf, size_t cap) {
  if (!in || in[0] == '/') return NULL;
  size_t len = 0;
  const char *p = in;
  while (*p) {
    while (*p == '/') p++;
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == 0) break;
    if (n == 2 && p[0] == '.' && p[1] == '.') return NULL;
    if (!(n == 1 && p[0] == '.')) {
      if (len + n + 2 > cap) return NULL;
      if (len) buf[len++] = '/';
      memcpy(buf + len, p, n);
      len += n;
    }
    p += n;
  }
  buf[len] = '\0';
  return buf;
}

/* O_PATH fd on the parent directory of rel (created as needed), and the
 * last component in *base. */
static int open_parent(int root, char *rel, const char **base) {
  char *slash = strrchr(rel, '/');
  if (!slash) {
    *base = rel;
    return fcntl(root, F_DUPFD_CLOEXEC, 0);
  }
  *slash = '\0';
  *base = slash + 1;
  return sbxi_mkdirs_beneath(root, rel, 0755);
}

static int copy_data(struct archive *a, int fd, sbx_error *err) {
  const void *buf;
  size_t size;
  la_int64_t off;
  int r;
  while ((r = archive_read_data_block(a, &buf, &size, &off)) == ARCHIVE_OK) {
    if (sbxi_pwrite_all(fd, buf, size, (off_t)off) < 0) return sbx_err_os(err, errno, "write");
  }
  if (r != ARCHIVE_EOF) return sbx_err(err, SBX_E_PARSE, "archive data: %s", archive_error_string(a));
  return 0;
}

static int extract_one(struct archive *a, struct archive_entry *e, int root, sbx_error *err) {
  char name[PATH_MAX], rel[PATH_MAX];
  const char *orig = archive_entry_pathname(e);
  if (!clean_name(orig, name, sizeof name)) return sbx_err(err, SBX_E_PARSE, "unsafe member \"%s\"", orig ? orig : "");
  if (name[0] == '\0') return 0; /* "./" itself */
  mode_t type = archive_entry_filetype(e);
  if (type == AE_IFCHR || type == AE_IFBLK) return 0;
  memcpy(rel, name, strlen(name) + 1);
  const char *base;
  sbxi_cleanup_close int pfd = open_parent(root, rel, &base);
  if (pfd < 0) return sbx_err_os(err, errno, "member \"%s\": parent", name);
  mode_t mode = archive_entry_perm(e);
  int rc = 0;
  sbxi_cleanup_close int fd = -1;
  struct stat st;
  bool exists = fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0;
  /* A later member replaces an earlier one, never writes through it. */
  if (exists && !(type == AE_IFDIR && S_ISDIR(st.st_mode)))
    unlinkat(pfd, base, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0);
  const char *hl = archive_entry_hardlink(e);
  if (hl) {
    char target[PATH_MAX];
    if (!clean_name(hl, target, sizeof target))
      return sbx_err(err, SBX_E_PARSE, "unsafe hard link target \"%s\"", hl);
    sbxi_cleanup_close int tfd = sbxi_open_beneath(root, target, O_PATH);
    if (tfd < 0 || linkat(tfd, "", pfd, base, AT_EMPTY_PATH) < 0)
      return sbx_err_os(err, errno, "hard link %s -> %s", name, target);
    return 0;
  }
  switch (type) {
  case AE_IFDIR:
    if (mkdirat(pfd, base, 0700) < 0 && errno != EEXIST) rc = sbx_err_os(err, errno, "mkdir %s", name);
    break;
  case AE_IFREG:
    fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      rc = sbx_err_os(err, errno, "create %s", name);
    else
      rc = copy_data(a, fd, err);
    break;
  case AE_IFLNK: {
    const char *target = archive_entry_symlink(e);
    if (!target || symlinkat(target, pfd, base) < 0) rc = sbx_err_os(err, target ? errno : EINVAL, "symlink %s", name);
    break;
  }
  case AE_IFIFO:
    if (mknodat(pfd, base, S_IFIFO | 0600, 0) < 0) rc = sbx_err_os(err, errno, "mkfifo %s", name);
    break;
  default:
    break; /* sockets and unknown types: nothing to create */
  }
  if (rc == 0 && type != AE_IFLNK) {
    /* owners, permission bits and times as GNU tar restores them as root */
    fchownat(pfd, base, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e), AT_SYMLINK_NOFOLLOW);
    if (fchmodat(pfd, base, mode, 0) < 0 && errno != ENOENT) rc = sbx_err_os(err, errno, "chmod %s", name);
  } else if (rc == 0) {
    fchownat(pfd, base, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e), AT_SYMLINK_NOFOLLOW);
  }
  if (rc == 0 && archive_entry_mtime_is_set(e)) {
    struct timespec ts[2] = {{archive_entry_mtime(e), archive_entry_mtime_nsec(e)},
                             {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
    utimensat(pfd, base, ts, AT_SYMLINK_NOFOLLOW);
  }
  return rc;
}

static int extract(const char *archive, int root, sbx_error *err) {
  struct archive *a = archive_read_new();
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  archive_read_support_format_gnutar(a);
  int rc = 0;
  if (archive_read_open_filename(a, archive, 1 << 16) != ARCHIVE_OK) {
    rc = sbx_err(err, SBX_E_PARSE, "open archive %s: %s", archive, archive_error_string(a));
    archive_read_free(a);
    return rc;
  }
  struct archive_entry *e;
  int r;
  while (rc == 0 && (r = archive_read_next_header(a, &e)) != ARCHIVE_EOF) {
    if (r < ARCHIVE_WARN) {
      rc = sbx_err(err, SBX_E_PARSE, "archive %s: %s", archive, archive_error_string(a));
      break;
    }
    rc = extract_one(a, e, root, err);
    if (rc < 0) sbx_err_wrap(err, "import %s", archive);
  }
  archive_read_free(a);
  return rc;
}

int sbxi_tpl_import(const char *templates_dir, const char *name, const char *archive, sbx_layers *out,
                   sbx_error *err) {
  memset(out, 0, sizeof *out);
  int rc = sbxi_tpl_check_name(name, err);
  if (rc < 0) return rc;
  if ((rc = sbxi_mkdir_p(templates_dir, 0755, err)) < 0) return rc;
  sbxi_cleanup_close int tfd = open(templates_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (tfd < 0) return sbx_err_os(err, errno, "open %s", templates_dir);
  char tmp[96], rootfs[PATH_MAX];
  snprintf(tmp, sizeof tmp, ".%s.import.%d", name, (int)getpid());
  sbxi_rm_rf_at(tfd, tmp, NULL);
  if (mkdirat(tfd, tmp, 0755) < 0) return sbx_err_os(err, errno, "mkdir %s/%s", templates_dir, tmp);
  snprintf(rootfs, sizeof rootfs, "%s/rootfs", tmp);
  int root = -1;
  if (mkdirat(tfd, rootfs, 0755) < 0 || (root = openat(tfd, rootfs, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
    rc = sbx_err_os(err, errno, "mkdir %s", rootfs);
  } else {
    rc = extract(archive, root, err);
    close(root);
  }
  /* A failed import leaves the previous template (if any) untouched. */
  if (rc == 0) {
    sbxi_rm_rf_at(tfd, name, NULL);
    if (renameat(tfd, tmp, tfd, name) < 0) rc = sbx_err_os(err, errno, "rename into %s/%s", templates_dir, name);
  }
  if (rc < 0) {
    sbxi_rm_rf_at(tfd, tmp, NULL);
    return rc;
  }
  return sbxi_tpl_dir(templates_dir, name, NULL, out, err);
}
