/* Golden build for the qemu driver (spec §1.6): cold-boot a builder VM,
 * wait for silkd, run the warmup, stop it and migrate its whole state to
 * <goldens_dir>/<key>/state. Built in a temporary sibling and renamed into
 * place, so a crash never leaves half a golden; a finished one is adopted
 * when it was made for the same machine (vm.args). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandbox/agent.h>

#include "../../core/cleanup.h"
#include "../../template/layers.h"
#include "../kvm.h"
#include "qemu.h"
#include "util/util.h"

#define BOOT_TIMEOUT_MS 90000 /* spec §1.6: the builder's probe */
/* A working KVM boots this guest in well under a second; a host whose
 * /dev/kvm passes the probe but never runs a real kernel is given this long
 * before the driver falls back to TCG for good. */
#define KVM_BOOT_TIMEOUT_MS 20000
/* 16 GiB (2xlarge) in copy mode at disk speed, with room to spare */
#define SAVE_TIMEOUT_MS 600000

void qemu_golden_release(sbx_golden *g) {
  if (!g) return;
  if (g->owned && g->dir) {
    char parent[PATH_MAX];
    char *slash = sbxi_path_fmt(parent, sizeof parent, NULL, "%s", g->dir) == 0 ? strrchr(parent, '/') : NULL;
    if (slash) {
      *slash = '\0';
      int pfd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (pfd >= 0) {
        sbxi_rm_rf_at(pfd, slash + 1, NULL);
        close(pfd);
      }
    }
  }
  sbx_free(g->dir);
  sbx_free(g->disk);
  sbx_free(g);
}

static int warmup(sbx_instance *s, const char *const *argv, int timeout_ms, sbx_error *err) {
  int fd = qemu_vm_agent_dial(s, err);
  if (fd < 0) return fd;
  sbx_agent *a = NULL;
  int rc = sbx_agent_open(fd, &a, err);
  if (rc < 0) return rc;
  sbx_agent_set_timeout(a, timeout_ms);
  sbx_buf out = SBX_BUF_INIT(1 << 20), eout = SBX_BUF_INIT(1 << 20);
  int code = -1;
  rc = sbx_agent_run(a, argv, &out, &eout, &code, err);
  sbx_agent_close(a);
  if (rc == 0 && code != 0)
    rc = sbx_err(err, SBX_E_REMOTE, "warmup exited with %d: %.200s", code, eout.ptr ? eout.ptr : "");
  sbx_buf_free(&out);
  sbx_buf_free(&eout);
  return rc;
}

/* stop, then the whole machine into file through exec: (QEMU 7.2 has no
 * file: target). The default 128 MiB/s cap would double the time. */
static int snapshot_to(sbx_instance *s, const char *file, bool ignore_shared, sbx_error *err) {
  if (strchr(file, '\'')) return sbx_err(err, SBX_E_INVAL, "qemu: snapshot path holds a quote");
  int rc = qmp_cmd(s->qmp, "stop", NULL, NULL, err);
  if (rc == 0) rc = qmp_cmd(s->qmp, "migrate-set-parameters", "{\"max-bandwidth\":107374182400}", NULL, err);
  if (rc == 0 && ignore_shared) rc = qemu_ignore_shared(s, err);
  if (rc < 0) return rc;
  sbxi_cleanup_buf sbx_buf args = SBX_BUF_INIT(PATH_MAX + 64);
  json_t *uri = json_sprintf("exec:cat > '%s'", file);
  char *u = json_dumps(uri, JSON_ENCODE_ANY);
  json_decref(uri);
  rc = sbx_buf_printf(&args, err, "{\"uri\":%s}", u ? u : "\"\"");
  free(u);
  if (rc == 0) rc = qmp_cmd(s->qmp, "migrate", args.ptr, NULL, err);
  if (rc < 0) return rc;
  uint64_t deadline = sbx_now_ns() + SAVE_TIMEOUT_MS * 1000000ull;
  for (;;) {
    if (sbx_now_ns() >= deadline) {
      qmp_cmd(s->qmp, "migrate_cancel", NULL, NULL, NULL);
      return sbx_err(err, SBX_E_TIMEOUT, "qemu: migration to %s still running after %d ms", file, SAVE_TIMEOUT_MS);
    }
    char *ret = NULL;
    if ((rc = qmp_cmd(s->qmp, "query-migrate", NULL, &ret, err)) < 0) return rc;
    json_t *j = json_loads(ret, 0, NULL);
    sbx_free(ret);
    const char *st = json_string_value(json_object_get(j, "status"));
    if (st && strcmp(st, "completed") == 0) {
      json_decref(j);
      return 0;
    }
    if (!st || strcmp(st, "failed") == 0 || strcmp(st, "cancelled") == 0) {
      const char *why = json_string_value(json_object_get(j, "error-desc"));
      rc = sbx_err(err, SBX_E_REMOTE, "qemu: migration to %s %s: %s", file, st ? st : "lost", why ? why : "");
      json_decref(j);
      return rc;
    }
    json_decref(j);
    usleep(5000);
  }
}

static void args_line(const qemu_driver *qd, const sbx_golden *g, char *buf, size_t len) {
  snprintf(buf, len, "v2 %s %s %s %s %s %s %s\n", g->size->name, g->accel == QEMU_ACCEL_KVM ? "kvm" : "tcg",
           g->agent == QEMU_AGENT_VSOCK ? "vsock" : "tcp", g->restore == QEMU_RESTORE_MMAP ? "mmap" : "copy",
           g->disk ? g->disk : "-", qd->kernel, qd->initrd);
}

static bool adoptable(const char *dir, const char *want) {
  char path[PATH_MAX], have[3 * PATH_MAX + 128];
  if (sbxi_path_fmt(path, sizeof path, NULL, "%s/vm.args", dir) < 0) return false;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, have, sizeof have - 1);
  close(fd);
  if (n <= 0) return false;
  have[n] = '\0';
  if (sbxi_path_fmt(path, sizeof path, NULL, "%s/state", dir) < 0) return false;
  return strcmp(have, want) == 0 && access(path, R_OK) == 0;
}

/* *booted tells a failed boot (worth a retry under TCG) from a failed
 * warmup or save (not the accelerator's fault). */
static int boot_and_save(qemu_driver *qd, sbx_golden *g, const sbx_golden_spec *spec, const char *dir,
                         bool *booted, sbx_error *err) {
  *booted = false;
  static unsigned seq;
  char id[SBX_ID_MAX], state[PATH_MAX], ram[PATH_MAX];
  snprintf(id, sizeof id, "golden-%d-%u", (int)getpid(), __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
  if (sbxi_path_fmt(state, sizeof state, err, "%s/state", dir) < 0 ||
      sbxi_path_fmt(ram, sizeof ram, err, "%s/ram", dir) < 0)
    return SBX_E_NAMETOOLONG;
  bool mm = g->restore == QEMU_RESTORE_MMAP;
  if (mm) unlink(ram); /* a retry starts from a fresh file */
  qemu_vm_args va = {.size = g->size, .disk = g->disk, .accel = g->accel, .agent = g->agent,
                     .mem_path = mm ? ram : NULL, .mem_share = true};
  sbx_instance *s = NULL;
  int rc = qemu_vm_start(qd, id, &va, &s, err);
  if (rc < 0) return rc;
  rc = qemu_vm_wait_ready(s, g->accel == QEMU_ACCEL_KVM ? KVM_BOOT_TIMEOUT_MS : BOOT_TIMEOUT_MS, err);
  *booted = rc == 0;
  if (rc == 0 && spec && spec->warmup)
    rc = warmup(s, spec->warmup, spec->timeout_ms > 0 ? spec->timeout_ms : 120000, err);
  if (rc == 0) rc = snapshot_to(s, state, mm, err);
  qemu_vm_destroy(s, NULL);
  return rc;
}

int qemu_golden_build(sbx_driver *d, const sbx_template *t, const sbx_golden_spec *spec, sbx_golden **out,
                      sbx_error *err) {
  qemu_driver *qd = (qemu_driver *)d;
  *out = NULL;
  sbx_golden *g = sbx_calloc(1, sizeof *g);
  g->size = spec && spec->size ? spec->size : sbx_size_tier_get("small");
  g->disk = t && t->disk ? sbx_strdup(t->disk) : NULL;
  g->accel = qd->accel;
  g->agent = qd->agent;
  g->restore = qd->restore;
  const char *key = spec ? spec->key : NULL;
  int rc = 0;
  if (key && (rc = sbxi_check_id(key, err)) < 0) goto fail;
  const char *parent = key ? qd->goldens_dir : qd->run_dir;
  if ((rc = sbxi_mkdir_p(parent, 0700, err)) < 0) goto fail;
  char final[PATH_MAX], tmp[PATH_MAX], want[3 * PATH_MAX + 128];
  static unsigned seq;
  unsigned n = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
  if (key) {
    if ((rc = sbxi_path_fmt(final, sizeof final, err, "%s/%s", parent, key)) < 0) goto fail;
    args_line(qd, g, want, sizeof want);
    if (adoptable(final, want)) {
      g->dir = sbx_strdup(final);
      *out = g;
      return 0;
    }
    if ((rc = sbxi_path_fmt(tmp, sizeof tmp, err, "%s/.%s.tmp.%d.%u", parent, key, (int)getpid(), n)) < 0) goto fail;
  } else {
    /* A keyless golden lives in run_dir under a dot name (reconcile skips
     * those) and goes away with its handle. */
    if ((rc = sbxi_path_fmt(final, sizeof final, err, "%s/.golden-%d-%u", parent, (int)getpid(), n)) < 0) goto fail;
    memcpy(tmp, final, sizeof tmp);
    g->owned = true;
  }
  if (mkdir(tmp, 0700) < 0) {
    rc = sbx_err_os(err, errno, "mkdir %s", tmp);
    goto fail;
  }
  g->dir = sbx_strdup(tmp);
  bool renamed = false;
  bool booted = false;
  rc = boot_and_save(qd, g, spec, tmp, &booted, err);
  if (rc < 0 && !booted && g->accel == QEMU_ACCEL_KVM && !qd->accel_pinned) {
    sbx_warn("qemu: no guest answered under KVM; falling back to TCG on this host (%s)", err ? err->msg : "");
    qd->accel = g->accel = QEMU_ACCEL_TCG;
    int mfd = open(SBXI_KVM_BROKEN_MARK, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (mfd >= 0) close(mfd);
    sbx_err_clear(err);
    rc = boot_and_save(qd, g, spec, tmp, &booted, err);
  }
  if (rc == 0) {
    args_line(qd, g, want, sizeof want);
    char path[PATH_MAX];
    int fd = -1;
    if ((rc = sbxi_path_fmt(path, sizeof path, err, "%s/vm.args", tmp)) == 0 &&
        ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
         write(fd, want, strlen(want)) != (ssize_t)strlen(want)))
      rc = sbx_err_os(err, errno, "write %s", path);
    if (fd >= 0) close(fd);
  }
  if (rc == 0 && key) {
    if (rename(tmp, final) == 0) {
      renamed = true;
    } else if (errno == EEXIST || errno == ENOTEMPTY) {
      /* Another builder finished first, or a stale golden for another
       * machine: replace the stale one, adopt the good one. */
      if (adoptable(final, want)) {
        renamed = false;
      } else {
        int pfd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (pfd >= 0) {
          sbxi_rm_rf_at(pfd, key, NULL);
          close(pfd);
        }
        if (rename(tmp, final) == 0)
          renamed = true;
        else
          rc = sbx_err_os(err, errno, "rename %s", tmp);
      }
    } else {
      rc = sbx_err_os(err, errno, "rename %s", tmp);
    }
  }
  if (key && !renamed) {
    g->owned = true; /* remove the temporary directory */
    qemu_golden_release(g);
    if (rc < 0) return rc;
    /* lost the race: adopt the winner */
    g = sbx_calloc(1, sizeof *g);
    g->size = spec && spec->size ? spec->size : sbx_size_tier_get("small");
    g->disk = t && t->disk ? sbx_strdup(t->disk) : NULL;
    g->accel = qd->accel;
    g->agent = qd->agent;
    g->restore = qd->restore;
  }
  if (rc < 0) goto fail;
  if (key) {
    sbx_free(g->dir);
    g->dir = sbx_strdup(final);
  }
  *out = g;
  return 0;
fail:
  qemu_golden_release(g);
  return rc;
}
