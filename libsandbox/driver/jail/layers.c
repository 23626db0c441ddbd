/* Jail images: a sandbox's writable layer frozen into a read-only layer
 * stacked over the layers it was started from (the golden's, and those of
 * the images it came from).
 *
 * An image is a directory:
 *   layers       the manifest, written last (the image's commit pointer)
 *   i0/u<p>      the writable layer of mount point p at snapshot time
 *   i1/u<p> ...  the images below it, hard-linked (files of a lower layer
 *                are never written, so sharing their inodes is safe), so
 *                an image stays whole when the one it came from is deleted
 * A chain of images is a chain of layers; past JAIL_IMAGE_DEPTH they are
 * flattened into i0 (merged as overlayfs would show them), so a mount never
 * stacks more than the golden's layers plus JAIL_IMAGE_DEPTH.
 *
 * Images keep the filesystem only: a sandbox restored from one starts a
 * fresh pid 1 (silkd) on it; no process or session carries over. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "core/path.h"
#include "jail.h"

/* Image layers stacked per mount point before they are flattened. */
#define JAIL_IMAGE_DEPTH 3
#define MANIFEST_MAX 65536

/* ---- the manifest: "P <point>\n" then "L <dir>\n" (golden) or
 * "I <dir>\n" (image) per lower, top first ---- */

typedef struct manifest {
  sbx_layers layers;
  bool image[SBX_POINTS_MAX][SBX_LOWERS_MAX];
} manifest;

static int manifest_write(int dirfd, const manifest *m, bool sync, sbx_error *err) {
  char buf[MANIFEST_MAX];
  size_t len = 0;
  for (size_t i = 0; i < m->layers.npoints; i++) {
    const sbx_layer_point *pt = &m->layers.pts[i];
    int n = snprintf(buf + len, sizeof buf - len, "P %s\n", pt->name);
    if (n < 0 || (size_t)n >= sizeof buf - len) return sbx_err(err, SBX_E_TOOBIG, "layer manifest too long");
    len += (size_t)n;
    for (size_t j = 0; j < pt->nlowers; j++) {
      n = snprintf(buf + len, sizeof buf - len, "%c %s\n", m->image[i][j] ? 'I' : 'L', pt->lowers[j]);
      if (n < 0 || (size_t)n >= sizeof buf - len) return sbx_err(err, SBX_E_TOOBIG, "layer manifest too long");
      len += (size_t)n;
    }
  }
  int fd = openat(dirfd, "layers.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return sbx_err_os(err, errno, "create layer manifest");
  bool ok = write(fd, buf, len) == (ssize_t)len && (!sync || fsync(fd) == 0);
  int e = errno;
  close(fd);
  if (!ok || renameat(dirfd, "layers.tmp", dirfd, "layers") < 0) {
    unlinkat(dirfd, "layers.tmp", 0);
    return sbx_err_os(err, ok ? errno : e, "write layer manifest");
  }
  if (sync) fsync(dirfd);
  return 0;
}

static void manifest_free(manifest *m) { sbxi_layers_free(&m->layers); }

/* what: the directory holding the manifest, which relative "I" lines
 * (an image's own layers) are read against, so an image can be moved. */
static int manifest_read(int dirfd, const char *what, manifest *m, sbx_error *err) {
  memset(m, 0, sizeof *m);
  int fd = openat(dirfd, "layers", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return sbx_err(err, SBX_E_NOTFOUND, "%s: no layer manifest (not an image, or incomplete)", what);
    return sbx_err_os(err, errno, "open %s/layers", what);
  }
  char *buf = sbx_malloc(MANIFEST_MAX + 1);
  ssize_t n = read(fd, buf, MANIFEST_MAX + 1);
  close(fd);
  int rc = 0;
  if (n < 0 || n > MANIFEST_MAX) {
    rc = n < 0 ? sbx_err_os(err, errno, "read %s/layers", what) : sbx_err(err, SBX_E_TOOBIG, "%s: manifest too big", what);
    goto out;
  }
  buf[n] = '\0';
  if (n == 0 || buf[n - 1] != '\n') {
    rc = sbx_err(err, SBX_E_PARSE, "%s: layer manifest truncated", what);
    goto out;
  }
  for (char *line = buf, *nl; *line; line = nl + 1) {
    nl = strchr(line, '\n');
    *nl = '\0';
    if (line[0] == 'P' && line[1] == ' ') {
      if (m->layers.npoints == SBX_POINTS_MAX || strlen(line + 2) >= SBX_POINT_NAME_MAX ||
          (m->layers.npoints == 0) != (line[2] == '\0')) {
        rc = sbx_err(err, SBX_E_PARSE, "%s: bad mount point in layer manifest", what);
        goto out;
      }
      snprintf(m->layers.pts[m->layers.npoints++].name, SBX_POINT_NAME_MAX, "%s", line + 2);
    } else if ((line[0] == 'L' || line[0] == 'I') && line[1] == ' ' && m->layers.npoints > 0 &&
               (line[2] == '/' || (line[0] == 'I' && line[2] != '\0' && !strstr(line + 2, "..")))) {
      size_t p = m->layers.npoints - 1;
      /* pushed below the ones read so far: the file lists them top first */
      sbx_layer_point *pt = &m->layers.pts[p];
      if (pt->nlowers == SBX_LOWERS_MAX) {
        rc = sbx_err(err, SBX_E_PARSE, "%s: too many layers in manifest", what);
        goto out;
      }
      m->image[p][pt->nlowers] = line[0] == 'I';
      if (line[2] == '/') {
        pt->lowers[pt->nlowers++] = sbx_strdup(line + 2);
      } else {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", what, line + 2);
        pt->lowers[pt->nlowers++] = sbx_strdup(path);
      }
    } else {
      rc = sbx_err(err, SBX_E_PARSE, "%s: unreadable layer manifest line", what);
      goto out;
    }
  }
  for (size_t i = 0; i < m->layers.npoints; i++)
    if (m->layers.pts[i].nlowers == 0) rc = sbx_err(err, SBX_E_PARSE, "%s: mount point without layers", what);
out:
  sbx_free(buf);
  if (rc < 0) manifest_free(m);
  return rc;
}

int jail_layers_save(int sbx_dirfd, const sbx_layers *layers, sbx_error *err) {
  manifest m;
  memset(&m, 0, sizeof m);
  m.layers = *layers; /* borrowed: not freed here */
  for (size_t i = 0; i < layers->npoints; i++)
    for (size_t j = 0; j < layers->pts[i].nlowers; j++) {
      /* an image's layers live in directories i<k> beside its manifest */
      char probe[PATH_MAX];
      snprintf(probe, sizeof probe, "%s/../../.jail-image", layers->pts[i].lowers[j]);
      m.image[i][j] = access(probe, F_OK) == 0;
    }
  return manifest_write(sbx_dirfd, &m, false, err);
}

/* ---- copying a layer ----
 * COPY: everything from src into dst, src winning (a snapshot of the
 * writable layer). LINK: the same with regular files hard-linked (an
 * image's read-only layers). UNDER: only what dst does not hide: entries
 * dst lacks, and directories present in both unless dst's is opaque (src
 * is an older layer being merged below dst). */
enum copy_mode { COPY, LINK, UNDER };

static bool is_opaque(int fd) {
  char v[4];
  ssize_t n = fgetxattr(fd, "trusted.overlay.opaque", v, sizeof v);
  if (n < 0) n = fgetxattr(fd, "user.overlay.opaque", v, sizeof v);
  return n == 1 && v[0] == 'y';
}

static void copy_xattrs(int sfd, int dfd) {
  char names[4096], val[4096];
  ssize_t n = flistxattr(sfd, names, sizeof names);
  for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
    ssize_t vl = fgetxattr(sfd, names + i, val, sizeof val);
    if (vl >= 0) fsetxattr(dfd, names + i, val, (size_t)vl, 0);
  }
}

static void copy_meta(int sfd, int dfd, const struct stat *st) {
  copy_xattrs(sfd, dfd);
  if (fchown(dfd, st->st_uid, st->st_gid) < 0) { /* kept as far as the host allows */
  }
  fchmod(dfd, st->st_mode & 07777);
  struct timespec ts[2] = {st->st_atim, st->st_mtim};
  futimens(dfd, ts);
}

static int copy_file(int sdir, int ddir, const char *name, const struct stat *st, enum copy_mode mode,
                     sbx_error *err) {
  if (mode == LINK) {
    if (linkat(sdir, name, ddir, name, 0) == 0) return 0;
    if (errno != EXDEV && errno != EMLINK) return sbx_err_os(err, errno, "link %s", name);
  }
  int in = openat(sdir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return sbx_err_os(err, errno, "open %s", name);
  int out = openat(ddir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  int rc = 0;
  if (out < 0) {
    rc = sbx_err_os(err, errno, "create %s", name);
    goto done;
  }
  for (off_t left = st->st_size; left > 0;) {
    ssize_t w = sendfile(out, in, NULL, left > (1 << 30) ? (1 << 30) : (size_t)left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      rc = sbx_err_os(err, w < 0 ? errno : EIO, "copy %s", name);
      goto done;
    }
    left -= w;
  }
  copy_meta(in, out, st);
done:
  if (out >= 0) close(out);
  close(in);
  return rc;
}

static int copy_dir(int sfd, int dfd, enum copy_mode mode, bool fresh, int depth, sbx_error *err);

/* fresh: dfd was made by this copy, so nothing in it can clash (no look
 * there); type: the entry's d_type. Linking a regular file into a fresh
 * directory is then one linkat, no stat: a restore links thousands. */
static int copy_entry(int sfd, int dfd, const char *name, unsigned char type, enum copy_mode mode, bool fresh,
                      int depth, sbx_error *err) {
  if (fresh && mode == LINK && type == DT_REG && linkat(sfd, name, dfd, name, 0) == 0) return 0;
  struct stat st, dst;
  if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) return sbx_err_os(err, errno, "stat %s", name);
  bool have = !fresh && fstatat(dfd, name, &dst, AT_SYMLINK_NOFOLLOW) == 0;
  if (have && mode == UNDER && !(S_ISDIR(st.st_mode) && S_ISDIR(dst.st_mode))) return 0; /* hidden by dst */
  if (have && mode != UNDER && !(S_ISDIR(st.st_mode) && S_ISDIR(dst.st_mode))) {
    int rc = sbxi_rm_rf_at(dfd, name, err);
    if (rc < 0) return rc;
    have = false;
  }
  if (S_ISDIR(st.st_mode)) {
    if (!have && mkdirat(dfd, name, 0700) < 0) return sbx_err_os(err, errno, "mkdir %s", name);
    int s2 = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int d2 = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc = 0;
    if (s2 < 0 || d2 < 0) rc = sbx_err_os(err, errno, "open %s", name);
    else if (mode == UNDER && have && is_opaque(d2)) rc = 0; /* the newer directory hides this one */
    else rc = copy_dir(s2, d2, mode, !have, depth + 1, err);
    if (rc == 0 && (!have || mode != UNDER)) copy_meta(s2, d2, &st);
    if (s2 >= 0) close(s2);
    if (d2 >= 0) close(d2);
    return rc;
  }
  if (S_ISREG(st.st_mode)) return copy_file(sfd, dfd, name, &st, mode, err);
  if (S_ISLNK(st.st_mode)) {
    char target[PATH_MAX];
    ssize_t n = readlinkat(sfd, name, target, sizeof target - 1);
    if (n < 0) return sbx_err_os(err, errno, "readlink %s", name);
    target[n] = '\0';
    if (symlinkat(target, dfd, name) < 0) return sbx_err_os(err, errno, "symlink %s", name);
    fchownat(dfd, name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW);
    return 0;
  }
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
    /* a whiteout (char 0:0) or a fifo; other devices are not kept (nodev) */
    if (S_ISCHR(st.st_mode) && st.st_rdev != makedev(0, 0)) return 0;
    if (mknodat(dfd, name, st.st_mode, st.st_rdev) < 0) return sbx_err_os(err, errno, "mknod %s", name);
    fchownat(dfd, name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW);
    return 0;
  }
  return 0; /* sockets and block devices are not part of an image */
}

static int copy_dir(int sfd, int dfd, enum copy_mode mode, bool fresh, int depth, sbx_error *err) {
  if (depth > 256) return sbx_err(err, SBX_E_TOOBIG, "layer nested deeper than 256 directories");
  int rfd = dup(sfd);
  DIR *d = rfd >= 0 ? fdopendir(rfd) : NULL;
  if (!d) {
    if (rfd >= 0) close(rfd);
    return sbx_err_os(err, errno, "opendir");
  }
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    rc = copy_entry(sfd, dfd, de->d_name, de->d_type, mode, fresh, depth, err);
  }
  closedir(d);
  return rc;
}

static int copy_layer(const char *src, int dfd, const char *dname, enum copy_mode mode, sbx_error *err) {
  int s = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (s < 0) return sbx_err_os(err, errno, "open layer %s", src);
  bool fresh = mkdirat(dfd, dname, 0755) == 0;
  if (!fresh && errno != EEXIST) {
    close(s);
    return sbx_err_os(err, errno, "mkdir %s", dname);
  }
  int d = openat(dfd, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int rc = d < 0 ? sbx_err_os(err, errno, "open %s", dname) : copy_dir(s, d, mode, fresh, 0, err);
  if (d >= 0) close(d);
  close(s);
  return rc;
}

/* ---- snapshot and restore ---- */



/* The writable layer of a running (or frozen) jail, through pid 1. */
static int open_upper(sbx_instance *s, sbx_error *err) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)s->hdr.pid, JAIL_UPPER_FD);
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sbx_err_os(err, errno, "jail %s: its writable layer is not reachable", s->hdr.id);
  struct statfs sf;
  if (fstatfs(fd, &sf) < 0 || sf.f_type != TMPFS_MAGIC) {
    close(fd);
    return sbx_err(err, SBX_E_UNSUPPORTED, "jail %s: no tmpfs writable layer at pid 1's descriptor %d", s->hdr.id,
                   JAIL_UPPER_FD);
  }
  return fd;
}

static int copy_upper(sbx_instance *s, int imgfd, size_t npoints, sbx_error *err) {
  int ufd = open_upper(s, err);
  if (ufd < 0) return ufd;
  int rc = mkdirat(imgfd, "i0", 0755) < 0 ? sbx_err_os(err, errno, "mkdir i0") : 0;
  for (size_t i = 0; rc == 0 && i < npoints; i++) {
    char src[PATH_MAX], dn[32];
    snprintf(src, sizeof src, "/proc/self/fd/%d/u%zu", ufd, i);
    snprintf(dn, sizeof dn, "i0/u%zu", i);
    rc = copy_layer(src, imgfd, dn, COPY, err);
  }
  close(ufd);
  return rc;
}

/* The image's layer list: i0 over the source's image layers (linked in as
 * i1..) or, past the depth limit, with them merged into i0; then the
 * golden's layers. */
static int stack_images(int imgfd, const manifest *src, manifest *out, sbx_error *err) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < src->layers.npoints; i++) {
    const sbx_layer_point *sp = &src->layers.pts[i];
    sbx_layer_point *op = &out->layers.pts[i];
    snprintf(op->name, sizeof op->name, "%s", sp->name);
    out->layers.npoints++;
    size_t nimg = 0;
    for (size_t j = 0; j < sp->nlowers; j++) nimg += src->image[i][j];
    bool flatten = nimg + 1 > JAIL_IMAGE_DEPTH;
    char path[PATH_MAX], dn[32];
    snprintf(path, sizeof path, "i0/u%zu", i); /* relative: the image can move */
    op->lowers[op->nlowers] = sbx_strdup(path);
    out->image[i][op->nlowers++] = true;
    size_t k = 1;
    for (size_t j = 0; j < sp->nlowers; j++) {
      int rc;
      if (!src->image[i][j]) {
        op->lowers[op->nlowers++] = sbx_strdup(sp->lowers[j]);
        continue;
      }
      if (flatten) {
        snprintf(dn, sizeof dn, "i0/u%zu", i);
        rc = copy_layer(sp->lowers[j], imgfd, dn, UNDER, err); /* top first: each one below the last */
      } else {
        snprintf(dn, sizeof dn, "i%zu", k);
        mkdirat(imgfd, dn, 0755);
        snprintf(dn, sizeof dn, "i%zu/u%zu", k, i);
        rc = copy_layer(sp->lowers[j], imgfd, dn, LINK, err);
        op->lowers[op->nlowers] = sbx_strdup(dn);
        out->image[i][op->nlowers++] = true;
        k++;
      }
      if (rc < 0) return rc;
    }
  }
  return 0;
}

int jail_snapshot(sbx_instance *s, const char *dir, sbx_error *err) {
  jail_driver *jd = s->jd;
  manifest src, img;
  memset(&img, 0, sizeof img);
  int sfd = openat(jd->run_dirfd, s->hdr.id, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sfd < 0) return sbx_err_os(err, errno, "jail %s: no run directory", s->hdr.id);
  int rc = manifest_read(sfd, s->hdr.id, &src, err);
  close(sfd);
  if (rc < 0) return rc;
  if (dir[0] != '/' || strpbrk(dir, ":,\\\n")) {
    manifest_free(&src);
    return sbx_err(err, SBX_E_INVAL, "image directory \"%s\" is not usable by overlayfs", dir);
  }
  if (mkdir(dir, 0700) < 0) {
    manifest_free(&src);
    return sbx_err_os(err, errno, "mkdir %s", dir);
  }
  int imgfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (imgfd < 0) {
    rc = sbx_err_os(err, errno, "open %s", dir);
    rmdir(dir);
    manifest_free(&src);
    return rc;
  }
  /* Frozen only while its writable layer is copied; a hibernated jail
   * stays frozen. */
  bool was_frozen = jail_cgroup_frozen(jd->cg, s->hdr.id);
  rc = was_frozen ? 0 : jail_cgroup_freeze(jd->cg, s->hdr.id, true, err);
  if (rc == 0) rc = copy_upper(s, imgfd, src.layers.npoints, err);
  if (!was_frozen) jail_cgroup_freeze(jd->cg, s->hdr.id, false, NULL);
  if (rc == 0) rc = stack_images(imgfd, &src, &img, err);
  if (rc == 0) {
    int mfd = openat(imgfd, ".jail-image", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (mfd < 0) rc = sbx_err_os(err, errno, "mark %s", dir);
    else close(mfd);
  }
  /* Not synced here: a fork's transient image needs no durability; a
   * caller that keeps one (a checkpoint) syncs it before its own commit. */
  if (rc == 0) rc = manifest_write(imgfd, &img, false, err);
  close(imgfd);
  manifest_free(&src);
  manifest_free(&img);
  if (rc < 0) {
    int pfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    sbxi_rm_rf_at(pfd, dir + 1, NULL);
    close(pfd);
  }
  return rc;
}

/* A restored sandbox runs on its own hard-linked copy of the image's
 * layers, <run_dir>/.images/<id>: the image (a checkpoint) can then be
 * deleted while the sandbox runs, and the copy goes with the sandbox
 * (destroy, reconcile). Linking costs a directory walk, no file data.
 *
 * A RAM image (see ram_image) is not copied: <run_dir>/.images/<id>/m is a
 * read-only bind of it, and the sandbox's overlay stacks it in place. Its
 * owner detaches the image's tmpfs instead of deleting files; the kernel
 * keeps the tmpfs while any bind or overlay still holds it, so it goes
 * with its last sandbox, crash or not. Overlay never writes a lower layer,
 * so siblings share it safely; each has its own empty writable layer. */
static int images_dirfd(jail_driver *jd, sbx_error *err) {
  if (mkdirat(jd->run_dirfd, ".images", 0700) < 0 && errno != EEXIST)
    return sbx_err_os(err, errno, "mkdir %s/.images", jd->run_dir);
  int fd = openat(jd->run_dirfd, ".images", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  return fd < 0 ? sbx_err_os(err, errno, "open %s/.images", jd->run_dir) : fd;
}

/* Removes <run_dir>/.images/<id>, detaching its bind first: the removal
 * never crosses a mount (sbxi_rm_rf_at refuses to), so a bind left
 * mounted would only leak, never delete the shared image's files. */
static void image_remove(jail_driver *jd, int imgs_fd, const char *id) {
  char m[PATH_MAX];
  if (sbxi_path_fmt(m, sizeof m, NULL, "%s/.images/%s/m", jd->run_dir, id) == 0 && umount2(m, MNT_DETACH) < 0 &&
      errno != EINVAL && errno != ENOENT)
    sbx_warn("jail: detach %s: %s", m, strerror(errno));
  sbxi_rm_rf_at(imgs_fd, id, NULL);
}

void jail_image_drop(jail_driver *jd, const char *id) {
  int fd = openat(jd->run_dirfd, ".images", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  image_remove(jd, fd, id);
  close(fd);
}

void jail_images_sweep(jail_driver *jd) {
  int fd = openat(jd->run_dirfd, ".images", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    struct stat st;
    if (de->d_name[0] == '.' || fstatat(jd->run_dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) continue;
    image_remove(jd, dirfd(d), de->d_name); /* its sandbox is gone */
  }
  closedir(d);
}

/* A RAM image: written on a tmpfs mounted at the image directory's parent
 * (a fork's transient image in sandboxd). Only such an image is used in
 * place: a checkpoint on disk may be deleted while its branches run. */
static bool ram_image(const char *dir) {
  char parent[PATH_MAX], up[PATH_MAX];
  struct statfs sf;
  struct stat a, b;
  if (statfs(dir, &sf) < 0 || sf.f_type != TMPFS_MAGIC) return false;
  if (sbxi_path_fmt(parent, sizeof parent, NULL, "%s/..", dir) < 0 ||
      sbxi_path_fmt(up, sizeof up, NULL, "%s/../..", dir) < 0)
    return false;
  return stat(parent, &a) == 0 && stat(up, &b) == 0 && a.st_dev != b.st_dev;
}

/* <run_dir>/.images/<id>/m: a read-only bind of the RAM image dir; the
 * manifest's image layers are renamed to lie under it. */
static int bind_image(jail_driver *jd, const char *id, const char *dir, manifest *m, sbx_error *err) {
  int ifd = images_dirfd(jd, err);
  if (ifd < 0) return ifd;
  image_remove(jd, ifd, id); /* a stale copy of an earlier sandbox of this id */
  char at[PATH_MAX];
  int rc = sbxi_path_fmt(at, sizeof at, err, "%s/.images/%s/m", jd->run_dir, id);
  if (rc == 0 && (mkdirat(ifd, id, 0700) < 0 || mkdir(at, 0700) < 0))
    rc = sbx_err_os(err, errno, "mkdir %s", at);
  close(ifd);
  if (rc == 0 && mount(dir, at, NULL, MS_BIND, NULL) < 0) rc = sbx_err_os(err, errno, "bind %s", dir);
  if (rc == 0 && mount(NULL, at, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
    rc = sbx_err_os(err, errno, "read-only %s", at);
  size_t dl = strlen(dir);
  for (size_t i = 0; rc == 0 && i < m->layers.npoints; i++) {
    sbx_layer_point *pt = &m->layers.pts[i];
    for (size_t j = 0; rc == 0 && j < pt->nlowers; j++) {
      if (!m->image[i][j] || strncmp(pt->lowers[j], dir, dl) != 0 || pt->lowers[j][dl] != '/') continue;
      char path[PATH_MAX];
      rc = sbxi_path_fmt(path, sizeof path, err, "%s%s", at, pt->lowers[j] + dl);
      if (rc < 0) break;
      sbx_free(pt->lowers[j]);
      pt->lowers[j] = sbx_strdup(path);
    }
  }
  if (rc < 0) jail_image_drop(jd, id);
  return rc;
}

static int link_image(jail_driver *jd, const char *id, manifest *m, sbx_error *err) {
  int ifd = images_dirfd(jd, err);
  if (ifd < 0) return ifd;
  sbxi_rm_rf_at(ifd, id, NULL); /* a stale copy of an earlier sandbox of this id */
  int rc = 0, dfd = -1;
  if (mkdirat(ifd, id, 0700) < 0 || (dfd = openat(ifd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
    rc = sbx_err_os(err, errno, "mkdir %s/.images/%s", jd->run_dir, id);
    close(ifd);
    return rc;
  }
  close(ifd);
  for (size_t i = 0; rc == 0 && i < m->layers.npoints; i++) {
    sbx_layer_point *pt = &m->layers.pts[i];
    for (size_t j = 0, k = 0; rc == 0 && j < pt->nlowers; j++) {
      if (!m->image[i][j]) continue;
      char dn[32], path[PATH_MAX];
      snprintf(dn, sizeof dn, "i%zu", k);
      mkdirat(dfd, dn, 0755);
      snprintf(dn, sizeof dn, "i%zu/u%zu", k++, i);
      rc = copy_layer(pt->lowers[j], dfd, dn, LINK, err);
      snprintf(path, sizeof path, "%s/.images/%s/%s", jd->run_dir, id, dn);
      sbx_free(pt->lowers[j]);
      pt->lowers[j] = sbx_strdup(path);
    }
  }
  if (rc == 0) {
    int mfd = openat(dfd, ".jail-image", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (mfd < 0) rc = sbx_err_os(err, errno, "mark image of %s", id);
    else close(mfd);
  }
  close(dfd);
  if (rc < 0) jail_image_drop(jd, id);
  return rc;
}

int jail_restore(sbx_driver *d, const char *dir, const sbx_clone_spec *spec, sbx_instance **out, sbx_error *err) {
  *out = NULL;
  jail_driver *jd = (jail_driver *)d;
  if (!dir || !spec) return sbx_err(err, SBX_E_INVAL, "restore needs an image directory and a spec");
  int rc = sbxi_check_id(spec->id, err);
  if (rc < 0) return rc;
  struct stat st;
  if (fstatat(jd->run_dirfd, spec->id, &st, AT_SYMLINK_NOFOLLOW) == 0)
    return sbx_err(err, SBX_E_EXISTS, "sandbox %s already exists", spec->id);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return sbx_err_os(err, errno, "image %s", dir);
  manifest m;
  rc = manifest_read(fd, dir, &m, err);
  close(fd);
  if (rc < 0) return rc;
  for (size_t i = 0; rc == 0 && i < m.layers.npoints; i++)
    for (size_t j = 0; rc == 0 && j < m.layers.pts[i].nlowers; j++)
      if (access(m.layers.pts[i].lowers[j], F_OK) != 0)
        rc = sbx_err(err, SBX_E_NOTFOUND, "image %s: layer %s is gone", dir, m.layers.pts[i].lowers[j]);
  if (rc == 0) rc = ram_image(dir) ? bind_image(jd, spec->id, dir, &m, err) : link_image(jd, spec->id, &m, err);
  if (rc == 0) {
    rc = jail_start(jd, &m.layers, spec, NULL, out, err);
    if (rc < 0) jail_image_drop(jd, spec->id);
  }
  manifest_free(&m);
  return rc;
}
