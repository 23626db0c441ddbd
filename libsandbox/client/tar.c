/* Trees through tar with libarchive: packing a local path (rooted at its
 * basename, symlinks kept as links, modes kept) and unpacking safely, and
 * the push_path/pull_path verbs that stream them through fs_push/fs_pull. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "client/client_priv.h"

#define TAR_BLOCK (256 * 1024)

typedef struct {
  int (*cb)(void *ud, const void *p, size_t n);
  void *ud;
  int rc;
} wctx;

static la_ssize_t on_write(struct archive *a, void *ud, const void *p, size_t n) {
  wctx *w = ud;
  if (w->rc == 0) w->rc = w->cb(w->ud, p, n);
  if (w->rc != 0) {
    archive_set_error(a, EIO, "sink failed");
    return -1;
  }
  return (la_ssize_t)n;
}

int sbxi_tar_pack(const char *local_path, int (*write_cb)(void *ud, const void *p, size_t n), void *ud,
                  sbx_error *err) {
  char path[PATH_MAX];
  size_t len = strlen(local_path);
  if (len == 0 || len >= sizeof path) return sbx_err(err, SBX_E_INVAL, "pack: bad path");
  memcpy(path, local_path, len + 1);
  while (len > 1 && path[len - 1] == '/') path[--len] = 0;
  const char *slash = strrchr(path, '/');
  size_t strip = slash ? (size_t)(slash - path) + 1 : 0; /* names start at the basename */
  if (strcmp(path + strip, ".") == 0 || strcmp(path + strip, "..") == 0 || path[strip] == 0)
    return sbx_err(err, SBX_E_INVAL, "pack %s: name a file or directory by its own name", local_path);

  struct archive *out = archive_write_new();
  struct archive *disk = archive_read_disk_new();
  wctx w = {write_cb, ud, 0};
  int rc = 0;
  archive_write_set_format_pax_restricted(out);
  archive_write_set_bytes_per_block(out, TAR_BLOCK);
  archive_write_set_bytes_in_last_block(out, 1);
  archive_read_disk_set_symlink_physical(disk);
  archive_read_disk_set_standard_lookup(disk);
  if (archive_write_open(out, &w, NULL, on_write, NULL) != ARCHIVE_OK ||
      archive_read_disk_open(disk, path) != ARCHIVE_OK) {
    rc = sbx_err(err, SBX_E_OS, "pack %s: %s", local_path,
                 archive_error_string(archive_errno(out) ? out : disk) ?: "open failed");
    goto out;
  }
  char *buf = sbx_malloc(TAR_BLOCK);
  for (;;) {
    struct archive_entry *e = archive_entry_new();
    int r = archive_read_next_header2(disk, e);
    if (r == ARCHIVE_EOF) {
      archive_entry_free(e);
      break;
    }
    if (r < ARCHIVE_WARN) {
      rc = sbx_err(err, SBX_E_OS, "pack %s: %s", local_path, archive_error_string(disk));
      archive_entry_free(e);
      break;
    }
    archive_read_disk_descend(disk);
    const char *name = archive_entry_pathname(e);
    if (strlen(name) < strip) {
      archive_entry_free(e);
      continue;
    }
    archive_entry_copy_pathname(e, name + strip);
    if (archive_write_header(out, e) < ARCHIVE_WARN) {
      rc = w.rc ? w.rc : sbx_err(err, SBX_E_OS, "pack %s: %s", name, archive_error_string(out));
      archive_entry_free(e);
      break;
    }
    if (archive_entry_filetype(e) == AE_IFREG && archive_entry_size(e) > 0) {
      ssize_t n;
      while ((n = archive_read_data(disk, buf, TAR_BLOCK)) > 0) {
        if (archive_write_data(out, buf, (size_t)n) < 0) {
          rc = w.rc ? w.rc : sbx_err(err, SBX_E_OS, "pack %s: %s", name, archive_error_string(out));
          break;
        }
      }
      if (n < 0 && rc == 0) rc = sbx_err(err, SBX_E_OS, "pack %s: %s", name, archive_error_string(disk));
    }
    archive_entry_free(e);
    if (rc) break;
  }
  sbx_free(buf);
  if (rc == 0 && archive_write_close(out) != ARCHIVE_OK)
    rc = w.rc ? w.rc : sbx_err(err, SBX_E_OS, "pack %s: %s", local_path, archive_error_string(out));
out:
  archive_read_free(disk);
  archive_write_free(out);
  return rc;
}

typedef struct {
  int (*cb)(void *ud, const void **p, size_t *n);
  void *ud;
  int rc;
} rctx;

static la_ssize_t on_read(struct archive *a, void *ud, const void **p) {
  rctx *r = ud;
  size_t n = 0;
  if (r->rc < 0) return -1;
  int rc = r->cb(r->ud, p, &n);
  if (rc < 0) {
    r->rc = rc;
    archive_set_error(a, EIO, "source failed");
    return -1;
  }
  return rc == 0 ? 0 : (la_ssize_t)n;
}

/* Relative, and no `..` component. */
static bool safe_name(const char *name) {
  if (!name || !*name || name[0] == '/') return false;
  for (const char *p = name; (p = strstr(p, "..")); p += 2)
    if ((p == name || p[-1] == '/') && (p[2] == 0 || p[2] == '/')) return false;
  return true;
}

int sbxi_tar_unpack(int (*read_cb)(void *ud, const void **p, size_t *n), void *ud, const char *local_dir,
                    sbx_error *err) {
  char dest[PATH_MAX]; /* symlinks above the tree are the caller's choice */
  if (!realpath(local_dir, dest)) return sbx_err_os(err, errno, "unpack: %s", local_dir);
  local_dir = dest;
  struct archive *in = archive_read_new();
  struct archive *disk = archive_write_disk_new();
  rctx r = {read_cb, ud, 0};
  int rc = 0;
  archive_read_support_format_tar(in);
  archive_read_support_format_gnutar(in);
  /* Member names are checked below (no absolute names, no `..`); they are
   * then prefixed with the resolved destination, so libarchive's own
   * absolute-path and dot-dot checks would refuse every member. The symlink
   * check stays: nothing is written through a symlink in the tree. */
  archive_write_disk_set_options(disk, ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                           ARCHIVE_EXTRACT_UNLINK);
  archive_write_disk_set_standard_lookup(disk);
  if (archive_read_open(in, &r, NULL, on_read, NULL) != ARCHIVE_OK) {
    rc = r.rc ? r.rc : sbx_err(err, SBX_E_PARSE, "unpack: %s", archive_error_string(in));
    goto out;
  }
  sbx_buf full = SBX_BUF_INIT(PATH_MAX);
  for (;;) {
    struct archive_entry *e;
    int h = archive_read_next_header(in, &e);
    if (h == ARCHIVE_EOF) break;
    if (h < ARCHIVE_WARN) {
      rc = r.rc ? r.rc : sbx_err(err, SBX_E_PARSE, "unpack: %s", archive_error_string(in));
      break;
    }
    const char *name = archive_entry_pathname(e);
    if (!safe_name(name)) {
      rc = sbx_err(err, SBX_E_PARSE, "unpack: unsafe member name %s", name ? name : "");
      break;
    }
    sbx_buf_reset(&full);
    if ((rc = sbx_buf_printf(&full, err, "%s/%s", local_dir, name)) < 0) break;
    archive_entry_copy_pathname(e, full.ptr);
    const char *hl = archive_entry_hardlink(e);
    sbx_buf link = SBX_BUF_INIT(PATH_MAX);
    if (hl && !safe_name(hl)) {
      rc = sbx_err(err, SBX_E_PARSE, "unpack: unsafe link target %s", hl);
      break;
    }
    if (hl) {
      if ((rc = sbx_buf_printf(&link, err, "%s/%s", local_dir, hl)) < 0) break;
      archive_entry_copy_hardlink(e, link.ptr);
    }
    int w = archive_write_header(disk, e);
    sbx_buf_free(&link);
    if (w < ARCHIVE_WARN) {
      rc = sbx_err(err, SBX_E_OS, "unpack %s: %s", name, archive_error_string(disk));
      break;
    }
    const void *blk;
    size_t n;
    la_int64_t off;
    int d;
    while ((d = archive_read_data_block(in, &blk, &n, &off)) == ARCHIVE_OK) {
      if (archive_write_data_block(disk, blk, n, off) < ARCHIVE_WARN) {
        d = ARCHIVE_FATAL;
        rc = sbx_err(err, SBX_E_OS, "unpack %s: %s", name, archive_error_string(disk));
        break;
      }
    }
    if (d != ARCHIVE_EOF && rc == 0)
      rc = r.rc ? r.rc : sbx_err(err, SBX_E_PARSE, "unpack %s: %s", name, archive_error_string(in));
    if (rc) break;
    if (archive_write_finish_entry(disk) < ARCHIVE_WARN) {
      rc = sbx_err(err, SBX_E_OS, "unpack %s: %s", name, archive_error_string(disk));
      break;
    }
  }
  sbx_buf_free(&full);
  /* closing applies the deferred directory modes and times */
  if (archive_write_close(disk) != ARCHIVE_OK && rc == 0)
    rc = sbx_err(err, SBX_E_OS, "unpack: %s", archive_error_string(disk));
out:
  archive_read_free(in);
  archive_write_free(disk);
  return rc;
}

/* ---- through the agent ---- */
typedef struct {
  sbx_transfer *t;
  sbx_error *err;
} xfer_ctx;

static int push_sink(void *ud, const void *p, size_t n) {
  xfer_ctx *x = ud;
  return sbx_transfer_write(x->t, p, n, x->err);
}

int sbx_sandbox_push_path(sbx_sandbox *s, const char *local_path, const char *dest_dir, sbx_error *err) {
  sbx_error tmp;
  if (!err) err = &tmp;
  sbx_transfer *t;
  int rc = sbx_sandbox_push_begin(s, dest_dir, &t, err);
  if (rc < 0) return rc;
  xfer_ctx x = {t, err};
  rc = sbxi_tar_pack(local_path, push_sink, &x, err);
  if (rc == 0) rc = sbx_transfer_finish(t, err);
  sbx_transfer_close(t); /* unfinished: closing aborts the push and dest is untouched */
  return rc;
}

static int pull_source(void *ud, const void **p, size_t *n) {
  xfer_ctx *x = ud;
  return sbx_transfer_read(x->t, p, n, x->err);
}

int sbx_sandbox_pull_path(sbx_sandbox *s, const char *remote_path, const char *local_dir, sbx_error *err) {
  sbx_error tmp;
  if (!err) err = &tmp;
  sbx_transfer *t;
  int rc = sbx_sandbox_pull_begin(s, remote_path, &t, err);
  if (rc < 0) return rc;
  xfer_ctx x = {t, err};
  rc = sbxi_tar_unpack(pull_source, &x, local_dir, err);
  if (rc == 0) { /* libarchive may stop before `done`: read the RPC to its end */
    const void *p;
    size_t n;
    while ((rc = sbx_transfer_read(t, &p, &n, err)) == 1) {
    }
  }
  sbx_transfer_close(t);
  return rc;
}
