/* The environment variables of the programs (sandboxd, sbxctl, silkd, the
 * benches and tests), in one place. The library itself reads none: a knob
 * reaches it through sbx_driver_config or a setter, and a program that
 * wants the documented variables to keep working calls sbxi_env_apply
 * after filling its config from its own flags and files (the environment
 * wins, so a test or a bench can pin a value without a config file). */
#ifndef SBX_CORE_ENV_H
#define SBX_CORE_ENV_H

#include <sandbox/driver.h>

/* SBX_B64_SCALAR=1 (any value but "" and "0") forces the scalar base64.
 * With cfg non-NULL, also (each only when set and non-empty; strings point
 * into the environment):
 *   SBX_JAIL_NETPOOL=N   jail_netpool (0 = none)
 *   SBX_JAIL_ZYGOTE=0    jail_no_zygote
 *   SBX_QEMU             qemu_binary
 *   SBX_GUEST_DIR        qemu_guest_dir
 *   SBX_GUEST_BUILDER    qemu_guest_builder
 *   SBX_QEMU_ACCEL       qemu_accel
 *   SBX_QEMU_RESTORE     qemu_restore_mode
 *   SBX_QEMU_AGENT       qemu_agent */
void sbxi_env_apply(sbx_driver_config *cfg);

#endif
