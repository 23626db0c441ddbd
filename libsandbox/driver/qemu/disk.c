/* A template's root as a read-only ext4 image, built once from its
 * directory with mkfs.ext4 -d and cached beside it.
 *
 * The cache key is the resolved root path with its inode and mtime: a
 * template directory is replaced (a new import renames a new tree into
 * place), not edited, so that is enough to notice a new one. The image is
 * built under a temporary name and renamed, so a reader never sees half of
 * one, and it is never written again: the golden and every clone share it
 * read-only. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qemu.h"

extern char **environ;

int qemu_run_helper(const char *const *argv, sbx_error *err) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int e = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (e != 0) return sbx_err_os(err, e, "run %s", argv[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return sbx_err_os(err, errno, "waitpid %s", argv[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return sbx_err(err, SBX_E_REMOTE, "%s failed (status %d)", argv[0], status);
  return 0;
}

static __thread unsigned long long tree_bytes, tree_files;
static int count(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)path, (void)flag, (void)ftw;
  tree_bytes += (unsigned long long)st->st_size;
  tree_files++;
  return 0;
}

int qemu_template_disk(qemu_driver *qd, const char *name, const char *root, char **out, sbx_error *err) {
  (void)qd;
  *out = NULL;
  char real[PATH_MAX];
  if (!realpath(root, real)) return sbx_err_os(err, errno, "template %s: %s", name, root);
  struct stat st;
  if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode))
    return sbx_err(err, SBX_E_INVAL, "template %s: %s is not a directory", name, real);
  char key[PATH_MAX + 96], img[PATH_MAX], tmp[PATH_MAX];
  snprintf(key, sizeof key, "%s %llu %lld.%09ld\n", real, (unsigned long long)st.st_ino, (long long)st.st_mtim.tv_sec,
           st.st_mtim.tv_nsec);
  /* The image sits beside the rootfs directory (templates_dir/name/). */
  char parent[PATH_MAX];
  int rc = sbxi_path_fmt(parent, sizeof parent, err, "%s/%s", qd->templates_dir, name);
  if (rc < 0) return rc;
  struct stat pst;
  if (stat(parent, &pst) < 0 || !S_ISDIR(pst.st_mode))
    return sbx_err(err, SBX_E_NOTFOUND, "template %s is not registered under %s", name, qd->templates_dir);
  if ((rc = sbxi_path_fmt(img, sizeof img, err, "%s/root.ext4", parent)) < 0) return rc;
  char keyp[PATH_MAX];
  if ((rc = sbxi_path_fmt(keyp, sizeof keyp, err, "%s/root.ext4.key", parent)) < 0) return rc;
  char have[sizeof key];
  int kfd = open(keyp, O_RDONLY | O_CLOEXEC);
  if (kfd >= 0) {
    ssize_t n = read(kfd, have, sizeof have - 1);
    close(kfd);
    if (n > 0) {
      have[n] = '\0';
      if (strcmp(have, key) == 0 && access(img, R_OK) == 0) {
        *out = sbx_strdup(img);
        return 0;
      }
    }
  }
  tree_bytes = tree_files = 0;
  if (nftw(real, count, 64, FTW_PHYS | FTW_MOUNT) != 0) return sbx_err_os(err, errno, "walk %s", real);
  /* data + 4 KiB per file for blocks and inodes, 20% slack, 16 MiB floor */
  unsigned long long size = (tree_bytes + tree_files * 4096) / 5 * 6 + (16ull << 20);
  size = (size + (1ull << 20) - 1) & ~((1ull << 20) - 1);
  if ((rc = sbxi_path_fmt(tmp, sizeof tmp, err, "%s/.root.ext4.%d", parent, (int)getpid())) < 0) return rc;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return sbx_err_os(err, errno, "create %s", tmp);
  if (ftruncate(fd, (off_t)size) < 0) rc = sbx_err_os(err, errno, "size %s", tmp);
  close(fd);
  char inodes[32];
  snprintf(inodes, sizeof inodes, "%llu", tree_files + 1024);
  const char *const argv[] = {"mkfs.ext4", "-q", "-F", "-N", inodes, "-O", "^has_journal", "-E",
                              "root_owner=0:0", "-L", "sbxroot", "-d", real, tmp, NULL};
  if (rc == 0) rc = qemu_run_helper(argv, err);
  if (rc == 0 && rename(tmp, img) < 0) rc = sbx_err_os(err, errno, "rename %s", tmp);
  if (rc == 0) {
    char ktmp[PATH_MAX];
    kfd = -1;
    if ((rc = sbxi_path_fmt(ktmp, sizeof ktmp, err, "%s.%d", keyp, (int)getpid())) == 0 &&
        ((kfd = open(ktmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0 ||
         write(kfd, key, strlen(key)) != (ssize_t)strlen(key) || rename(ktmp, keyp) < 0))
      rc = sbx_err_os(err, errno, "write %s", keyp);
    if (kfd >= 0) close(kfd);
  }
  if (rc < 0) {
    unlink(tmp);
    return rc;
  }
  *out = sbx_strdup(img);
  return 0;
}
