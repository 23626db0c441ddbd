/* The qemu driver: its operation table, templates, clones and the calls a
 * running VM answers (QMP for pause/resume, /proc of QEMU for stats).
 *
 * The guest (kernel + initramfs) comes from scripts/build-guest-image; the
 * driver keeps it in its guest_dir (options.c) and runs the builder
 * (idempotent) whenever it can find it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../template/layers.h"
#include "qemu.h"
#include "util/util.h"

#define DEFAULT_STATE "/var/lib/sandbox"
#define FIRST_CID 1000
#define RESTORE_TIMEOUT_MS 60000

static void qemu_close(sbx_driver *d);

static bool have_guest(const qemu_driver *qd) { return access(qd->kernel, R_OK) == 0 && access(qd->initrd, R_OK) == 0; }

/* The builder script: the configured one, else the source tree that holds
 * the silkd we were given (build/bin/silkd -> scripts/), else installed. */
static int build_guest(qemu_driver *qd, const char *silkd, sbx_error *err) {
  const char *cands[4] = {qd->builder, NULL, "/usr/local/libexec/sandbox/build-guest-image",
                          "/usr/libexec/sandbox/build-guest-image"};
  char from_silkd[PATH_MAX] = "";
  if (silkd) {
    char real[PATH_MAX];
    if (realpath(silkd, real)) {
      char *s = strrchr(real, '/');
      for (int up = 0; s && up < 2; up++) { /* drop /silkd, then /bin */
        *s = '\0';
        s = strrchr(real, '/');
      }
      if (s) {
        *s = '\0';
        if (sbxi_path_fmt(from_silkd, sizeof from_silkd, NULL, "%s/scripts/build-guest-image", real) == 0)
          cands[1] = from_silkd;
      }
    }
  }
  for (size_t i = 0; i < 4; i++) {
    if (!cands[i] || access(cands[i], X_OK) != 0) continue;
    sbx_debug("qemu: guest image in %s by %s", qd->guest_dir, cands[i]);
    const char *argv[] = {cands[i], "--out", qd->guest_dir, silkd ? "--silkd" : NULL, silkd, NULL};
    return qemu_run_helper(argv, err);
  }
  if (have_guest(qd)) return 0; /* prebuilt, no builder here */
  return sbx_err(err, SBX_E_NOTFOUND,
                 "qemu: no guest image in %s and no build-guest-image to make one (set qemu.guest_dir or "
                 "qemu.guest_builder)",
                 qd->guest_dir);
}

static int qemu_open(const sbx_driver_config *cfg, sbx_driver **out, sbx_error *err) {
  *out = NULL;
  if (geteuid() != 0) return sbx_err(err, SBX_E_UNSUPPORTED, "the qemu driver needs root");
  qemu_driver *qd = sbx_calloc(1, sizeof *qd);
  qd->base.ops = &sbxi_qemu_driver_ops;
  qd->run_dirfd = -1;
  qd->templates_dir = sbx_strdup(cfg->templates_dir ? cfg->templates_dir : DEFAULT_STATE "/templates");
  qd->goldens_dir = sbx_strdup(cfg->goldens_dir ? cfg->goldens_dir : DEFAULT_STATE "/goldens");
  qd->run_dir = sbx_strdup(cfg->run_dir ? cfg->run_dir : "/run/sandbox");
  qd->next_cid = FIRST_CID + (uint32_t)(getpid() % 1000) * 1000;
  int rc = qemu_options(qd, cfg, err);
  if (rc < 0) goto fail;
  if ((rc = sbxi_mkdir_p(qd->run_dir, 0700, err)) < 0) goto fail;
  if ((qd->run_dirfd = open(qd->run_dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
    rc = sbx_err_os(err, errno, "open %s", qd->run_dir);
    goto fail;
  }
  if (access(qd->qemu_bin, X_OK) != 0) {
    rc = sbx_err(err, SBX_E_UNSUPPORTED, "qemu: %s is missing (Debian: qemu-system-x86)", qd->qemu_bin);
    goto fail;
  }
  /* The builder is idempotent (a stamp of its inputs), so it runs every
   * time it is at hand: a guest image older than silkd is rebuilt. A
   * configured kernel or initrd is taken as it is. */
  if (!qd->prebuilt && (rc = build_guest(qd, cfg->silkd_path, err)) < 0) goto fail;
  if (!have_guest(qd)) {
    rc = sbx_err(err, SBX_E_NOTFOUND, "qemu: no guest kernel %s or initrd %s", qd->kernel, qd->initrd);
    goto fail;
  }
  qd->tsc_khz = qemu_host_tsc_khz();
  sbx_debug("qemu: accel %s, agent %s, restore %s, tsc %lu kHz, kernel %s, initrd %s",
            qd->accel == QEMU_ACCEL_KVM ? "kvm" : "tcg", qd->agent == QEMU_AGENT_VSOCK ? "vsock" : "tcp",
            qd->restore == QEMU_RESTORE_MMAP ? "mmap" : "copy", qd->tsc_khz, qd->kernel, qd->initrd);
  *out = &qd->base;
  return 0;
fail:
  qemu_close(&qd->base);
  return rc;
}

static void qemu_close(sbx_driver *d) {
  qemu_driver *qd = (qemu_driver *)d;
  if (qd->run_dirfd >= 0) close(qd->run_dirfd);
  sbx_free(qd->templates_dir);
  sbx_free(qd->goldens_dir);
  sbx_free(qd->run_dir);
  sbx_free(qd->guest_dir);
  sbx_free(qd->kernel);
  sbx_free(qd->initrd);
  sbx_free(qd->builder);
  sbx_free(qd->qemu_bin);
  sbx_free(qd);
}

/* ---- templates ----
 * "host" with no path is the guest image itself (busybox + silkd in the
 * initramfs): the host's own /usr is not a VM's root. Anything else is a
 * directory or an archive, registered as for the jail, then imaged. */
static int qemu_template_prepare(sbx_driver *d, const sbx_template_spec *spec, sbx_template **out,
                                 sbx_error *err) {
  qemu_driver *qd = (qemu_driver *)d;
  *out = NULL;
  const char *name = spec && spec->name ? spec->name : "host";
  sbx_template *t = sbx_calloc(1, sizeof *t);
  if (strcmp(name, "host") == 0 && !(spec && (spec->path || spec->archive))) {
    *out = t;
    return 0;
  }
  sbx_layers l = {0};
  int rc;
  if (spec && spec->archive)
    rc = sbxi_tpl_import(qd->templates_dir, name, spec->archive, &l, err);
  else
    rc = sbxi_tpl_dir(qd->templates_dir, name, spec ? spec->path : NULL, &l, err);
  if (rc == 0 && (l.npoints != 1 || l.pts[0].nlowers != 1 || l.pts[0].name[0]))
    rc = sbx_err(err, SBX_E_UNSUPPORTED, "qemu: template %s is not a single root directory", name);
  if (rc == 0) rc = qemu_template_disk(qd, name, l.pts[0].lowers[0], &t->disk, err);
  sbxi_layers_free(&l);
  if (rc < 0) {
    sbx_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

static void qemu_template_release(sbx_template *t) {
  sbx_free(t->disk);
  sbx_free(t);
}

/* ---- clones ---- */

static int qemu_clone(sbx_driver *d, const sbx_golden *g, const sbx_clone_spec *spec, sbx_instance **out,
                      sbx_error *err) {
  qemu_driver *qd = (qemu_driver *)d;
  *out = NULL;
  if (!g || !spec) return sbx_err(err, SBX_E_INVAL, "clone needs a golden and a spec");
  if (spec->net != SBX_NET_NONE) return sbx_err(err, SBX_E_UNSUPPORTED, "qemu: only net=none is available");
  if (sbxi_clone_spec_of(spec)->init_argv) return sbx_err(err, SBX_E_UNSUPPORTED, "qemu: init_argv is a jail test hook");
  /* The machine is the golden's: its RAM size and vCPUs are in the saved
   * state. Another tier needs another golden. */
  if (spec->size && strcmp(spec->size->name, g->size->name) != 0)
    return sbx_err(err, SBX_E_INVAL, "qemu: golden is %s, clone asks for %s", g->size->name, spec->size->name);
  char state[PATH_MAX], ram[PATH_MAX];
  if (sbxi_path_fmt(state, sizeof state, err, "%s/state", g->dir) < 0 ||
      sbxi_path_fmt(ram, sizeof ram, err, "%s/ram", g->dir) < 0)
    return SBX_E_NAMETOOLONG;
  bool mm = g->restore == QEMU_RESTORE_MMAP;
  qemu_vm_args va = {.size = g->size, .disk = g->disk, .incoming = state, .accel = g->accel, .agent = g->agent,
                     .mem_path = mm ? ram : NULL, .mem_share = false};
  uint64_t t0 = sbx_now_ns();
  sbx_instance *s = NULL;
  int rc = qemu_vm_start(qd, spec->id, &va, &s, err);
  if (rc < 0) return rc;
  if (mm) {
    /* The clone's RAM is a private mapping of the golden's file: what the
     * guest writes is copied on write, the rest stays shared page cache. */
    const char *args = "{\"uri\":\"fd:" QEMU_INCOMING_FD_STR "\"}";
    if ((rc = qemu_ignore_shared(s, err)) < 0 || (rc = qmp_cmd(s->qmp, "migrate-incoming", args, NULL, err)) < 0)
      goto fail;
  }
  uint64_t t1 = sbx_now_ns();
  /* -S -incoming: paused until the stream is in, then cont. */
  char st[32];
  uint64_t deadline = sbx_now_ns() + RESTORE_TIMEOUT_MS * 1000000ull;
  for (;;) {
    if ((rc = qmp_status(s->qmp, st, sizeof st, err)) < 0) goto fail;
    if (strcmp(st, "inmigrate") != 0) break;
    if (sbx_now_ns() >= deadline) {
      rc = sbx_err(err, SBX_E_TIMEOUT, "qemu: restore of %s from %s still running after %d ms", spec->id, state,
                   RESTORE_TIMEOUT_MS);
      goto fail;
    }
    usleep(2000);
  }
  if (strcmp(st, "prelaunch") != 0 && strcmp(st, "paused") != 0 && strcmp(st, "postmigrate") != 0 &&
      strcmp(st, "running") != 0) {
    rc = sbx_err(err, SBX_E_REMOTE, "qemu: restore of %s ended in state %s", spec->id, st);
    goto fail;
  }
  uint64_t t2 = sbx_now_ns();
  if (strcmp(st, "running") != 0 && (rc = qmp_cmd(s->qmp, "cont", NULL, NULL, err)) < 0) goto fail;
  int timeout = spec->ready_timeout_ms > 0 ? spec->ready_timeout_ms : 10000;
  /* Under TCG a restored guest needs a moment; the spec's 10 s default is
   * for KVM, so it is scaled here rather than failing a slow but sound VM. */
  if (g->accel == QEMU_ACCEL_TCG && spec->ready_timeout_ms <= 0) timeout = 60000;
  if ((rc = qemu_vm_wait_ready(s, timeout, err)) < 0) goto fail;
  uint64_t t3 = sbx_now_ns();
  if ((rc = qemu_identity(s, spec->hostname ? spec->hostname : spec->id, err)) < 0) goto fail;
  sbx_debug("qemu %s: spawn+qmp %.1f ms, restore %.1f ms, cont to ready %.1f ms, identity %.1f ms", spec->id,
            (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6, (double)(t3 - t2) / 1e6,
            (double)(sbx_now_ns() - t3) / 1e6);
  *out = s;
  return 0;
fail:
  qemu_vm_destroy(s, NULL);
  return rc;
}

static int qemu_connect(sbx_instance *s, int *fd_out, sbx_error *err) {
  *fd_out = -1;
  int fd = qemu_vm_agent_dial(s, err);
  if (fd < 0) return fd;
  *fd_out = fd;
  return 0;
}

static int need_qmp(sbx_instance *s, sbx_error *err) {
  if (s->qmp) return 0;
  char path[PATH_MAX];
  int rc = qemu_run_dir_path(s->qd, s->hdr.id, "qmp.sock", path, sizeof path, err);
  return rc < 0 ? rc : qmp_connect(path, 2000, &s->qmp, err);
}

static int qemu_pause(sbx_instance *s, sbx_error *err) {
  int rc = need_qmp(s, err);
  return rc < 0 ? rc : qmp_cmd(s->qmp, "stop", NULL, NULL, err);
}

static int qemu_resume(sbx_instance *s, sbx_error *err) {
  int rc = need_qmp(s, err);
  return rc < 0 ? rc : qmp_cmd(s->qmp, "cont", NULL, NULL, err);
}

static int qemu_snapshot(sbx_instance *s, const char *dir, sbx_error *err) {
  (void)s, (void)dir;
  return sbx_err(err, SBX_E_UNSUPPORTED, "qemu: snapshot is not implemented yet");
}

static int qemu_restore_op(sbx_driver *d, const char *dir, const sbx_clone_spec *spec, sbx_instance **out,
                        sbx_error *err) {
  (void)d, (void)dir, (void)spec;
  *out = NULL;
  return sbx_err(err, SBX_E_UNSUPPORTED, "qemu: restore is not implemented yet");
}

/* The VM as the host sees it: QEMU's CPU time and resident memory, its
 * threads as pids. The guest's own processes are silkd's business (ps). */
static int qemu_stats(sbx_instance *s, sbx_stats *out, sbx_error *err) {
  memset(out, 0, sizeof *out);
  out->mem_limit = s->size->mem_bytes;
  out->pids_max = s->size->pids_max;
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)s->qemu_pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sbx_err_os(err, errno, "stats of %s", s->hdr.id);
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return sbx_err(err, SBX_E_PARSE, "stats of %s: empty %s", s->hdr.id, path);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  unsigned long long utime = 0, stime = 0, threads = 0, rss = 0;
  /* fields 14, 15 (utime, stime), 20 (num_threads), 24 (rss pages) */
  for (int f = 2; p && f < 24; f++) {
    p = strchr(p + 1, ' ');
    if (!p) break;
    if (f + 1 == 14) utime = strtoull(p + 1, NULL, 10);
    if (f + 1 == 15) stime = strtoull(p + 1, NULL, 10);
    if (f + 1 == 20) threads = strtoull(p + 1, NULL, 10);
    if (f + 1 == 24) rss = strtoull(p + 1, NULL, 10);
  }
  long hz = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  out->cpu_ns = (utime + stime) * (1000000000ull / (unsigned long long)(hz > 0 ? hz : 100));
  out->mem_bytes = rss * (unsigned long long)(page > 0 ? page : 4096);
  out->pids = (uint32_t)threads;
  return 0;
}

static int qemu_wait_op(sbx_instance *s, int timeout_ms, int *code, sbx_error *err) {
  return qemu_vm_wait(s, timeout_ms, code, err);
}

static int qemu_destroy(sbx_instance *s, sbx_error *err) { return qemu_vm_destroy(s, err); }

static int qemu_pidfd(const sbx_instance *s) { return s->pidfd; }

const sbx_driver_ops sbxi_qemu_driver_ops = {
    .name = "qemu",
    .open = qemu_open,
    .close = qemu_close,
    .template_prepare = qemu_template_prepare,
    .template_release = qemu_template_release,
    .golden_build = qemu_golden_build,
    .golden_release = qemu_golden_release,
    .clone = qemu_clone,
    .connect = qemu_connect,
    .pause = qemu_pause,
    .resume = qemu_resume,
    .snapshot = qemu_snapshot,
    .restore = qemu_restore_op,
    .stats = qemu_stats,
    .wait = qemu_wait_op,
    .destroy = qemu_destroy,
    .reconcile = qemu_reconcile,
    .pidfd = qemu_pidfd,
};
