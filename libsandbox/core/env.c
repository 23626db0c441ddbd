/* The programs' environment variables mapped onto the library's knobs
 * (see env.h for why the library does not read them itself). */
#include <stdlib.h>
#include <string.h>

#include "base64_impl.h"
#include "env.h"

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && v[0] ? v : NULL;
}

static void set_str(const char **field, const char *name) {
  const char *v = env(name);
  if (v) *field = v;
}

void sbxi_env_apply(sbx_driver_config *cfg) {
  const char *scalar = env("SBX_B64_SCALAR");
  if (scalar && strcmp(scalar, "0") != 0) sbxi_b64_force_scalar(true);
  if (!cfg) return;
  const char *np = env("SBX_JAIL_NETPOOL");
  if (np) {
    long n = strtol(np, NULL, 10); /* the pool caps the stock itself */
    cfg->jail_netpool = n > 0 ? (int)(n > 1024 ? 1024 : n) : -1;
  }
  const char *zy = env("SBX_JAIL_ZYGOTE");
  if (zy && strcmp(zy, "0") == 0) cfg->jail_no_zygote = true;
  set_str(&cfg->qemu_binary, "SBX_QEMU");
  set_str(&cfg->qemu_guest_dir, "SBX_GUEST_DIR");
  set_str(&cfg->qemu_guest_builder, "SBX_GUEST_BUILDER");
  set_str(&cfg->qemu_accel, "SBX_QEMU_ACCEL");
  set_str(&cfg->qemu_restore_mode, "SBX_QEMU_RESTORE");
  set_str(&cfg->qemu_agent, "SBX_QEMU_AGENT");
}
