/* fd.c - fd and file helpers of the utility layer (see util.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sandbox/error.h>

#include "util.h"

int sbxi_write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

int sbxi_open_beneath(int root, const char *rel, int flags) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (uint64_t)(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return (int)syscall(SYS_openat2, root, rel, &how, sizeof how);
}

int sbxi_mkdirs_beneath(int root, char *rel, unsigned mode) {
  int fd = fcntl(root, F_DUPFD_CLOEXEC, 0);
  char *save = NULL;
  for (char *c = strtok_r(rel, "/", &save); c && fd >= 0; c = strtok_r(NULL, "/", &save)) {
    if (mkdirat(fd, c, mode) < 0 && errno != EEXIST) {
      int e = errno;
      close(fd);
      errno = e;
      return -1;
    }
    int next = sbxi_open_beneath(fd, c, O_PATH | O_DIRECTORY);
    int e = errno;
    close(fd);
    errno = e;
    fd = next;
  }
  return fd;
}

int sbxi_pwrite_all(int fd, const void *p, size_t n, off_t off) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = pwrite(fd, c, n, off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    c += w;
    off += w;
    n -= (size_t)w;
  }
  return 0;
}

/* One component: made, or already a directory. */
static int mkdir_one(const char *path, unsigned mode) {
  if (mkdir(path, mode) == 0) return 0;
  if (errno != EEXIST) return -1;
  struct stat st;
  if (stat(path, &st) < 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = EEXIST;
    return -1;
  }
  return 0;
}

int sbxi_mkdirs(const char *path, unsigned mode) {
  char buf[PATH_MAX];
  size_t n = strlen(path);
  if (n == 0) return errno = ENOENT, -1;
  if (n >= sizeof buf) return errno = ENAMETOOLONG, -1;
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char c = buf[i];
    buf[i] = '\0';
    int rc = mkdir_one(buf, mode);
    buf[i] = c;
    if (rc < 0) return -1;
  }
  return 0;
}

int sbxi_mkdir_p(const char *path, unsigned mode, sbx_error *err) {
  if (!path || !path[0]) return sbx_err(err, SBX_E_INVAL, "bad directory path \"%s\"", path ? path : "");
  if (sbxi_mkdirs(path, mode) < 0) return sbx_err_os(err, errno, "mkdir %s", path);
  return 0;
}

static int fail_at(int dirfd, const char *tmp, const char **step, const char *what) {
  int e = errno;
  if (tmp) unlinkat(dirfd, tmp, 0);
  if (step) *step = what;
  errno = e;
  return -1;
}

int sbxi_write_file_atomic(int dirfd, const char *name, const char *tmp, const void *data, size_t len,
                           unsigned mode, bool sync, const char **step) {
  int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return fail_at(dirfd, NULL, step, "create");
  if (sbxi_write_all(fd, data, len) < 0 || (sync && fsync(fd) < 0)) {
    int e = errno;
    close(fd);
    errno = e;
    return fail_at(dirfd, tmp, step, "write");
  }
  close(fd);
  if (renameat(dirfd, tmp, dirfd, name) < 0) return fail_at(dirfd, tmp, step, "rename");
  if (sync && dirfd != AT_FDCWD && fsync(dirfd) < 0) return fail_at(dirfd, NULL, step, "fsync");
  return 0;
}
