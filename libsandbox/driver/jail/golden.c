/* Golden build for the jail (spec §1.6): the template plus the layer its
 * warmup argv writes, run once as pid 1 of a builder jail whose upper layer
 * is a directory on disk, then frozen read-only by becoming a lower. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "jail.h"
#include "util/util.h"

int jail_golden_build(sbx_driver *d, const sbx_template *t, const sbx_golden_spec *spec, sbx_golden **out,
                             sbx_error *err) {
  jail_driver *jd = (jail_driver *)d;
  *out = NULL;
  sbx_golden *g = sbx_calloc(1, sizeof *g);
  sbxi_layers_copy(&g->layers, &t->layers);
  if (!spec || !spec->key || !spec->warmup) {
    *out = g; /* no warmup: the template's layers are the golden */
    return 0;
  }
  int rc = sbxi_check_id(spec->key, err);
  if (rc < 0) goto fail;
  if ((rc = sbxi_mkdir_p(jd->goldens_dir, 0700, err)) < 0) goto fail;
  char final[PATH_MAX], tmp[PATH_MAX], ready[PATH_MAX];
  if ((rc = sbxi_path_fmt(final, sizeof final, err, "%s/%s", jd->goldens_dir, spec->key)) < 0) goto fail;
  if ((rc = sbxi_path_fmt(ready, sizeof ready, err, "%s/.ready", final)) < 0) goto fail;
  if (access(ready, F_OK) != 0) {
    /* Built in a temporary sibling and renamed into place (spec §1.6), so
     * a crash never leaves half a golden. */
    int gfd = open(jd->goldens_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (gfd < 0) {
      rc = sbx_err_os(err, errno, "open %s", jd->goldens_dir);
      goto fail;
    }
    /* Unique per build, so two builders of one key never share scratch;
     * the first rename wins and the other adopts its result. */
    static unsigned seq;
    unsigned n = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
    char tname[128];
    snprintf(tname, sizeof tname, ".%s.tmp.%d.%u", spec->key, (int)getpid(), n);
    if ((rc = sbxi_path_fmt(tmp, sizeof tmp, err, "%s/%s", jd->goldens_dir, tname)) < 0 || mkdir(tmp, 0700) < 0) {
      if (rc == 0) rc = sbx_err_os(err, errno, "mkdir %s", tmp);
      close(gfd);
      goto fail;
    }
    sbxi_clone_spec cs = {.pub = SBX_CLONE_SPEC_INIT(), .init_argv = spec->warmup};
    char id[SBX_ID_MAX];
    snprintf(id, sizeof id, "golden-%.40s-%d-%u", spec->key, (int)getpid(), n);
    cs.pub.id = id;
    cs.pub.size = spec->size;
    sbx_instance *s = NULL;
    rc = jail_start(jd, &t->layers, &cs.pub, tmp, &s, err);
    int code = -1;
    if (rc == 0) {
      rc = jail_wait(s, spec->timeout_ms > 0 ? spec->timeout_ms : 120000, &code, err);
      jail_destroy(s, NULL);
      if (rc == 0 && code != 0) rc = sbx_err(err, SBX_E_REMOTE, "golden %s: warmup exited with %d", spec->key, code);
    }
    /* Work directories are overlayfs scratch, not part of the layer. */
    for (size_t i = 0; rc == 0 && i < t->layers.npoints; i++) {
      char w[32];
      snprintf(w, sizeof w, "w%zu", i);
      int tfd = openat(gfd, tname, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (tfd < 0) {
        rc = sbx_err_os(err, errno, "open %s", tmp);
        break;
      }
      rc = sbxi_rm_rf_at(tfd, w, err);
      if (rc == 0) {
        int fd = openat(tfd, ".ready", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) close(fd);
      }
      close(tfd);
    }
    if (rc == 0 && renameat(gfd, tname, gfd, spec->key) < 0) {
      if ((errno == EEXIST || errno == ENOTEMPTY) && access(ready, F_OK) == 0)
        sbxi_rm_rf_at(gfd, tname, NULL); /* another builder finished first */
      else
        rc = sbx_err_os(err, errno, "rename %s", tmp);
    }
    if (rc < 0) sbxi_rm_rf_at(gfd, tname, NULL);
    close(gfd);
    if (rc < 0) goto fail;
  }
  for (size_t i = 0; i < g->layers.npoints; i++) {
    char layer[PATH_MAX];
    if ((rc = sbxi_path_fmt(layer, sizeof layer, err, "%s/u%zu", final, i)) < 0) goto fail;
    if ((rc = sbxi_layers_push(&g->layers, i, layer, err)) < 0) goto fail;
  }
  *out = g;
  return 0;
fail:
  jail_golden_release(g);
  return rc;
}

