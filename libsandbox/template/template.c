/* Templates as layer stacks: the built-in "host" template and directory
 * roots. See layers.h for the model. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "layers.h"
#include "util/util.h"
#include "core/path.h"

void sbxi_layers_free(sbx_layers *l) {
  for (size_t i = 0; i < l->npoints; i++)
    for (size_t j = 0; j < l->pts[i].nlowers; j++) sbx_free(l->pts[i].lowers[j]);
  memset(l, 0, sizeof *l);
}

void sbxi_layers_copy(sbx_layers *dst, const sbx_layers *src) {
  *dst = *src;
  for (size_t i = 0; i < src->npoints; i++)
    for (size_t j = 0; j < src->pts[i].nlowers; j++) dst->pts[i].lowers[j] = sbx_strdup(src->pts[i].lowers[j]);
}

int sbxi_layers_push(sbx_layers *l, size_t i, const char *dir, sbx_error *err) {
  sbx_layer_point *p = &l->pts[i];
  if (p->nlowers >= SBX_LOWERS_MAX) return sbx_err(err, SBX_E_TOOBIG, "more than %d layers", SBX_LOWERS_MAX);
  memmove(&p->lowers[1], &p->lowers[0], p->nlowers * sizeof p->lowers[0]);
  p->lowers[0] = sbx_strdup(dir);
  p->nlowers++;
  return 0;
}

static int add_point(sbx_layers *l, const char *name, sbx_error *err) {
  if (l->npoints >= SBX_POINTS_MAX) return sbx_err(err, SBX_E_TOOBIG, "too many mount points");
  sbx_layer_point *p = &l->pts[l->npoints++];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  return 0;
}

/* Top-level names of a Debian-like root: on a merged-/usr host these are
 * symlinks and are copied as such; a real directory becomes its own point. */
static const char *const usr_links[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};
static const char *const skel_dirs[] = {"usr", "etc", "dev", "proc", "sys", "tmp", "run", "root", "home", "var",
                                        "var/tmp", "var/lib", "var/cache", "var/log", "mnt", "opt", "srv"};
/* Secrets of the host's /etc, whited out (they do not exist inside).
 * Shell patterns, matched against the host at prepare time. */
static const char *const etc_masks[] = {"shadow", "shadow-", "gshadow", "gshadow-", "security/opasswd",
                                        "ssh/ssh_host_*", "sudoers", "sudoers.d", "ssl/private", NULL};

static int whiteout(const char *layer, const char *rel, sbx_error *err) {
  char path[PATH_MAX];
  if (sbxi_path_fmt(path, sizeof path, err, "%s/%s", layer, rel) < 0) return SBX_E_NAMETOOLONG;
  char *slash = strrchr(path, '/');
  *slash = '\0';
  int rc = sbxi_mkdir_p(path, 0755, err);
  if (rc < 0) return rc;
  *slash = '/';
  if (mknod(path, S_IFCHR | 0, makedev(0, 0)) < 0 && errno != EEXIST)
    return sbx_err_os(err, errno, "whiteout %s", path);
  return 0;
}

static int build_host_dir(const char *dir, sbx_error *err) {
  char path[PATH_MAX];
  int rc;
  for (size_t i = 0; i < sizeof skel_dirs / sizeof skel_dirs[0]; i++) {
    if ((rc = sbxi_path_fmt(path, sizeof path, err, "%s/skel/%s", dir, skel_dirs[i])) < 0) return rc;
    if ((rc = sbxi_mkdir_p(path, 0755, err)) < 0) return rc;
  }
  if ((rc = sbxi_path_fmt(path, sizeof path, err, "%s/skel/tmp", dir)) < 0) return rc;
  chmod(path, 01777);
  if ((rc = sbxi_path_fmt(path, sizeof path, err, "%s/skel/var/tmp", dir)) < 0) return rc;
  chmod(path, 01777);
  if ((rc = sbxi_path_fmt(path, sizeof path, err, "%s/skel/root", dir)) < 0) return rc;
  chmod(path, 0700);
  for (size_t i = 0; i < sizeof usr_links / sizeof usr_links[0]; i++) {
    char host[32], target[PATH_MAX];
    if ((rc = sbxi_path_fmt(host, sizeof host, err, "/%s", usr_links[i])) < 0) return rc;
    ssize_t n = readlink(host, target, sizeof target - 1);
    if (n < 0) continue; /* absent, or a real directory: handled as a point */
    target[n] = '\0';
    if ((rc = sbxi_path_fmt(path, sizeof path, err, "%s/skel/%s", dir, usr_links[i])) < 0) return rc;
    if (symlink(target, path) < 0 && errno != EEXIST) return sbx_err_os(err, errno, "symlink %s", path);
  }
  if ((rc = sbxi_path_fmt(path, sizeof path, err, "%s/mask-etc", dir)) < 0) return rc;
  if ((rc = sbxi_mkdir_p(path, 0755, err)) < 0) return rc;
  for (size_t i = 0; etc_masks[i]; i++) {
    char pat[PATH_MAX];
    if ((rc = sbxi_path_fmt(pat, sizeof pat, err, "/etc/%s", etc_masks[i])) < 0) return rc;
    glob_t g;
    if (glob(pat, GLOB_NOSORT, NULL, &g) != 0) continue;
    for (size_t j = 0; j < g.gl_pathc && rc == 0; j++) rc = whiteout(path, g.gl_pathv[j] + 5, err);
    globfree(&g);
    if (rc < 0) return rc;
  }
  return 0;
}

int sbxi_tpl_host(const char *templates_dir, sbx_layers *out, sbx_error *err) {
  memset(out, 0, sizeof *out);
  char dir[PATH_MAX], ready[PATH_MAX];
  int rc;
  if ((rc = sbxi_path_fmt(dir, sizeof dir, err, "%s/host", templates_dir)) < 0) return rc;
  if ((rc = sbxi_path_fmt(ready, sizeof ready, err, "%s/.ready", dir)) < 0) return rc;
  if ((rc = sbxi_mkdir_p(templates_dir, 0755, err)) < 0) return rc;
  if (access(ready, F_OK) != 0) {
    /* Built beside and renamed into place, so a crash or a concurrent
     * prepare never leaves half a template behind. */
    char tmp[PATH_MAX];
    if ((rc = sbxi_path_fmt(tmp, sizeof tmp, err, "%s/.host.tmp.%d", templates_dir, (int)getpid())) < 0) return rc;
    int tfd = open(templates_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (tfd < 0) return sbx_err_os(err, errno, "open %s", templates_dir);
    sbxi_rm_rf_at(tfd, strrchr(tmp, '/') + 1, NULL);
    if ((rc = build_host_dir(tmp, err)) == 0) {
      char r[PATH_MAX];
      int fd = (rc = sbxi_path_fmt(r, sizeof r, err, "%s/.ready", tmp)) < 0
                   ? -1
                   : open(r, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) close(fd);
      if (rc == 0 && rename(tmp, dir) < 0 && errno != EEXIST && errno != ENOTEMPTY)
        rc = sbx_err_os(err, errno, "rename %s", tmp);
    }
    sbxi_rm_rf_at(tfd, strrchr(tmp, '/') + 1, NULL);
    close(tfd);
    if (rc < 0) return rc;
  }
  char path[PATH_MAX];
  if ((rc = add_point(out, "", err)) < 0) goto fail;
  if ((rc = sbxi_path_fmt(path, sizeof path, err, "%s/skel", dir)) < 0) goto fail;
  sbxi_layers_push(out, 0, path, err);
  if ((rc = add_point(out, "usr", err)) < 0) goto fail;
  sbxi_layers_push(out, 1, "/usr", err);
  if ((rc = add_point(out, "etc", err)) < 0) goto fail;
  sbxi_layers_push(out, 2, "/etc", err);
  if ((rc = sbxi_path_fmt(path, sizeof path, err, "%s/mask-etc", dir)) < 0) goto fail;
  sbxi_layers_push(out, 2, path, err);
  for (size_t i = 0; i < sizeof usr_links / sizeof usr_links[0]; i++) {
    char host[32];
    struct stat st;
    if ((rc = sbxi_path_fmt(host, sizeof host, err, "/%s", usr_links[i])) < 0) goto fail;
    if (lstat(host, &st) < 0 || !S_ISDIR(st.st_mode)) continue;
    if ((rc = add_point(out, usr_links[i], err)) < 0) goto fail;
    sbxi_layers_push(out, out->npoints - 1, host, err);
  }
  return 0;
fail:
  sbxi_layers_free(out);
  return rc;
}

int sbxi_tpl_check_name(const char *name, sbx_error *err) {
  size_t n = name ? strlen(name) : 0;
  /* The spec's template grammar allows '/' and ':'; on disk a template is
   * one directory, so only the file-name-safe subset is taken here. */
  if (n == 0 || n > 63 || name[0] == '.') return sbx_err(err, SBX_E_INVAL, "invalid template name");
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == '-'))
      return sbx_err(err, SBX_E_INVAL, "invalid template name \"%s\"", name);
  }
  return 0;
}

int sbxi_tpl_dir(const char *templates_dir, const char *name, const char *path, sbx_layers *out, sbx_error *err) {
  memset(out, 0, sizeof *out);
  int rc = sbxi_tpl_check_name(name, err);
  if (rc < 0) return rc;
  char dir[PATH_MAX], root[PATH_MAX];
  if ((rc = sbxi_path_fmt(dir, sizeof dir, err, "%s/%s", templates_dir, name)) < 0) return rc;
  if ((rc = sbxi_path_fmt(root, sizeof root, err, "%s/rootfs", dir)) < 0) return rc;
  if (path) {
    char real[PATH_MAX];
    if (!realpath(path, real)) return sbx_err_os(err, errno, "template root %s", path);
    struct stat st;
    if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode)) return sbx_err(err, SBX_E_INVAL, "%s is not a directory", real);
    if ((rc = sbxi_mkdir_p(dir, 0755, err)) < 0) return rc;
    unlink(root);
    if (symlink(real, root) < 0) return sbx_err_os(err, errno, "register %s", root);
    memcpy(root, real, sizeof root); /* both PATH_MAX */
  } else {
    char real[PATH_MAX];
    if (!realpath(root, real)) {
      if (errno == ENOENT) return sbx_err(err, SBX_E_NOTFOUND, "no template \"%s\"", name);
      return sbx_err_os(err, errno, "template %s", root);
    }
    memcpy(root, real, sizeof root); /* both PATH_MAX */
  }
  add_point(out, "", err);
  sbxi_layers_push(out, 0, root, err);
  return 0;
}
