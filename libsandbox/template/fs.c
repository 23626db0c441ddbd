/* File system helpers for templates, goldens and jail scratch: rm -rf and
 * mkdir -p done with *at() calls that never follow a symlink. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "layers.h"

#define RM_DEPTH_MAX 256

static int rm_rf_in(int dfd, const char *name, dev_t dev, int depth, sbx_error *err) {
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    if (errno == ENOENT) return 0;
    return sbx_err_os(err, errno, "stat %s", name);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT) return sbx_err_os(err, errno, "unlink %s", name);
    return 0;
  }
  /* A mount point below would mean a mount leaked into this namespace:
   * refuse instead of deleting through it into someone else's data. */
  if (st.st_dev != dev) return sbx_err(err, SBX_E_BUSY, "%s is on another file system (a leaked mount?)", name);
  if (depth > RM_DEPTH_MAX) return sbx_err(err, SBX_E_TOOBIG, "%s: directory tree too deep", name);
  int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return sbx_err_os(err, errno, "open %s", name);
  DIR *d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    return sbx_err_os(err, e, "fdopendir %s", name);
  }
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    rc = rm_rf_in(dirfd(d), de->d_name, dev, depth + 1, err);
  }
  closedir(d);
  if (rc < 0) return rc;
  if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT) return sbx_err_os(err, errno, "rmdir %s", name);
  return 0;
}

int sbxi_rm_rf_at(int dirfd, const char *name, sbx_error *err) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    if (errno == ENOENT) return 0;
    return sbx_err_os(err, errno, "stat %s", name);
  }
  return rm_rf_in(dirfd, name, st.st_dev, 0, err);
}

