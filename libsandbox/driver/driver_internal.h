/* driver_internal.h - what the drivers share: the instance header, their ops
 * tables, and helpers for ids, /proc and pidfds. */
#ifndef SBX_DRIVER_INTERNAL_H
#define SBX_DRIVER_INTERNAL_H

#include <sandbox/driver.h>

#include "core/path.h"

#define SBX_ID_MAX 64

/* First member of every driver's sbx_instance, so the generic accessors
 * and dispatch work without knowing the driver. */
typedef struct sbx_instance_hdr {
  sbx_driver *drv;
  char id[SBX_ID_MAX];
  pid_t pid;
} sbx_instance_hdr;

extern const sbx_driver_ops sbxi_jail_driver_ops;
extern const sbx_driver_ops sbxi_qemu_driver_ops;

/* [a-zA-Z0-9._-]{1,63}, not "." or "..": safe as a file and cgroup name. */
int sbxi_check_id(const char *id, sbx_error *err);

/* The fields of a /proc/.../stat file after the command name, from the
 * state (field 3) on, read into buf; NULL when it cannot be read. */
const char *sbxi_proc_stat_fields(const char *path, char *buf, size_t cap);

/* Starting time of pid in clock ticks (field 22 of /proc/pid/stat); with
 * the pid it names a process unambiguously across pid reuse. 0 if gone. */
unsigned long long sbxi_proc_starttime(pid_t pid);

/* Wait until a pidfd is readable (its process exited); timeout_ms < 0 waits
 * forever. SBX_E_TIMEOUT naming the sandbox id if it is still running. */
int sbxi_pidfd_wait(int pidfd, int timeout_ms, const char *id, sbx_error *err);

#endif
