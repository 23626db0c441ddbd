/* layers.h - a root filesystem as stacks of read-only overlay layers.
 *
 * A template or a golden is a few mount points ("" = the root, or one path
 * component such as "usr"), each with its lower directories, top first.
 * The driver mounts one overlayfs per point with a fresh upper; a golden is
 * its template with one more layer (what warmup wrote) on top of each
 * point. Masks are whiteouts in a layer of their own, so a masked file does
 * not exist at all inside and costs nothing per sandbox. */
#ifndef SBX_TEMPLATE_LAYERS_H
#define SBX_TEMPLATE_LAYERS_H

#include <stddef.h>

#include <sandbox/driver.h>

#define SBX_POINTS_MAX 8
#define SBX_LOWERS_MAX 6
#define SBX_POINT_NAME_MAX 16

typedef struct sbx_layer_point {
  char name[SBX_POINT_NAME_MAX]; /* "" = root; else one component */
  size_t nlowers;
  char *lowers[SBX_LOWERS_MAX]; /* absolute host paths, top first */
} sbx_layer_point;

typedef struct sbx_layers {
  size_t npoints;
  sbx_layer_point pts[SBX_POINTS_MAX];
} sbx_layers;

void sbxi_layers_free(sbx_layers *l);
void sbxi_layers_copy(sbx_layers *dst, const sbx_layers *src);
/* Put dir on top of point i. SBX_E_TOOBIG past SBX_LOWERS_MAX. */
int sbxi_layers_push(sbx_layers *l, size_t i, const char *dir, sbx_error *err);

/* The built-in "host" template, created (idempotently, atomically) under
 * templates_dir/host: a skeleton root, the host's /usr and /etc as lowers,
 * and a mask layer that whites out secrets of /etc. */
int sbxi_tpl_host(const char *templates_dir, sbx_layers *out, sbx_error *err);
/* A directory root: path given (registered as templates_dir/name/rootfs, a
 * symlink) or looked up there. */
int sbxi_tpl_dir(const char *templates_dir, const char *name, const char *path, sbx_layers *out, sbx_error *err);

/* Import a root filesystem archive (anything libarchive reads) as
 * templates_dir/name/rootfs, built beside and renamed into place. Member
 * names that are absolute or hold "..", and members that would be created
 * through a symlink, reject the whole archive; device nodes are skipped
 * (a jail's /dev is its own). */
int sbxi_tpl_import(const char *templates_dir, const char *name, const char *archive, sbx_layers *out,
                   sbx_error *err);

/* A template name usable as one directory: [A-Za-z0-9._-]{1,63}, no leading dot. */
int sbxi_tpl_check_name(const char *name, sbx_error *err);

/* rm -rf of name under dirfd, never following symlinks, staying on one
 * file system. Missing is fine. */
int sbxi_rm_rf_at(int dirfd, const char *name, sbx_error *err);

#endif
