/* The qemu driver's settings: sbx_driver_config's qemu_* fields (sandboxd's
 * "qemu" object). The library reads no environment variable for them: the
 * programs map the ones in the env column onto the fields (core/env.h), so
 * a test or a bench pins a value without a config file.
 *
 *   field               env                 values
 *   qemu_binary         SBX_QEMU            absolute path, or a name looked up in PATH
 *   qemu_guest_dir      SBX_GUEST_DIR       absolute path
 *   qemu_kernel         -                   absolute path
 *   qemu_initrd         -                   absolute path
 *   qemu_guest_builder  SBX_GUEST_BUILDER   absolute path
 *   qemu_accel          SBX_QEMU_ACCEL      auto | kvm | tcg
 *   qemu_restore_mode   SBX_QEMU_RESTORE    mmap | copy
 *   qemu_agent          SBX_QEMU_AGENT      auto | vsock | tcp */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kvm.h"
#include "qemu.h"

#define DEFAULT_GUEST "/var/cache/sandbox/guest"
#define DEFAULT_QEMU "/usr/bin/qemu-system-x86_64"

static int check_path(const char *what, const char *v, sbx_error *err) {
  if (v && v[0] != '/') return sbx_err(err, SBX_E_INVAL, "qemu: %s \"%s\" is not an absolute path", what, v);
  return 0;
}

/* Index of v in the NULL-terminated words, or -1. NULL is words[0]. */
static int one_of(const char *what, const char *v, const char *const *words, sbx_error *err) {
  if (!v) return 0;
  for (int i = 0; words[i]; i++)
    if (strcmp(v, words[i]) == 0) return i;
  return sbx_err(err, SBX_E_INVAL, "qemu: %s \"%s\" is not one of %s|%s%s%s", what, v, words[0], words[1],
                 words[2] ? "|" : "", words[2] ? words[2] : "");
}

/* A bare name as QEMU's own docs give it (qemu-system-x86_64): the first
 * executable of that name in PATH. */
static char *find_binary(const char *name) {
  if (strchr(name, '/')) return sbx_strdup(name);
  const char *path = getenv("PATH");
  if (!path || !path[0]) path = "/usr/local/bin:/usr/bin:/bin";
  char buf[PATH_MAX];
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, ":");
    if (n > 0 && (size_t)snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, name) < sizeof buf && buf[0] == '/' &&
        access(buf, X_OK) == 0)
      return sbx_strdup(buf);
    p += n + (p[n] == ':');
  }
  snprintf(buf, sizeof buf, "/usr/bin/%s", name); /* for the "is missing" error */
  return sbx_strdup(buf);
}

int qemu_options(qemu_driver *qd, const sbx_driver_config *cfg, sbx_error *err) {
  static const char *const accels[] = {"auto", "kvm", "tcg", NULL};
  static const char *const restores[] = {"mmap", "copy", NULL};
  static const char *const agents[] = {"auto", "vsock", "tcp", NULL};
  const char *bin = cfg->qemu_binary;
  const char *guest = cfg->qemu_guest_dir;
  const char *builder = cfg->qemu_guest_builder;
  int accel, restore, agent, rc;
  if (bin && !bin[0]) return sbx_err(err, SBX_E_INVAL, "qemu: binary is empty");
  if ((rc = check_path("guest_dir", guest, err)) < 0 || (rc = check_path("kernel", cfg->qemu_kernel, err)) < 0 ||
      (rc = check_path("initrd", cfg->qemu_initrd, err)) < 0 ||
      (rc = check_path("guest_builder", builder, err)) < 0)
    return rc;
  if ((accel = one_of("accel", cfg->qemu_accel, accels, err)) < 0) return accel;
  if ((restore = one_of("restore_mode", cfg->qemu_restore_mode, restores, err)) < 0)
    return restore;
  if ((agent = one_of("agent", cfg->qemu_agent, agents, err)) < 0) return agent;

  qd->qemu_bin = find_binary(bin ? bin : DEFAULT_QEMU);
  qd->guest_dir = sbx_strdup(guest ? guest : DEFAULT_GUEST);
  qd->builder = builder ? sbx_strdup(builder) : NULL;
  /* A kernel or initrd given on its own is prebuilt: no builder runs. */
  qd->prebuilt = cfg->qemu_kernel || cfg->qemu_initrd;
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/vmlinuz", qd->guest_dir);
  qd->kernel = sbx_strdup(cfg->qemu_kernel ? cfg->qemu_kernel : p);
  snprintf(p, sizeof p, "%s/initramfs.cpio.gz", qd->guest_dir);
  qd->initrd = sbx_strdup(cfg->qemu_initrd ? cfg->qemu_initrd : p);

  char why[160];
  qd->accel_pinned = accel != 0;
  qd->accel = accel == 1 || (accel == 0 && sbxi_kvm_usable(why, sizeof why)) ? QEMU_ACCEL_KVM : QEMU_ACCEL_TCG;
  if (accel == 0) sbx_debug("qemu: accel auto: %s", why);
  qd->restore = restore == 1 ? QEMU_RESTORE_COPY : QEMU_RESTORE_MMAP;
  if (agent == 0) qd->agent = access("/dev/vhost-vsock", R_OK | W_OK) == 0 ? QEMU_AGENT_VSOCK : QEMU_AGENT_TCP;
  else qd->agent = agent == 1 ? QEMU_AGENT_VSOCK : QEMU_AGENT_TCP;
  return 0;
}
