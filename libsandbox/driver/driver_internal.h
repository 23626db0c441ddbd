/* driver_internal.h - what the drivers share: the instance header, their ops
 * tables, and helpers for ids, /proc and pidfds. */
#ifndef SBX_DRIVER_INTERNAL_H
#define SBX_DRIVER_INTERNAL_H

#include <sandbox/driver.h>

#include "core/path.h"

#define SBX_ID_MAX 64

/* First member of every driver's sbx_instance, so the generic accessors
 * and dispatch work without knowing the driver. */
/* The table each driver fills. Only the sbx_* wrappers of driver.c call
 * it: they hand every op full-size copies of the caller's option structs,
 * and every clone spec an op sees is the pub member of an sbxi_clone_spec. */
typedef struct sbx_driver_ops {
  const char *name;
  int (*open)(const sbx_driver_config *cfg, sbx_driver **out, sbx_error *err);
  void (*close)(sbx_driver *d);

  int (*template_prepare)(sbx_driver *d, const sbx_template_spec *spec, sbx_template **out, sbx_error *err);
  void (*template_release)(sbx_template *t);
  int (*golden_build)(sbx_driver *d, const sbx_template *t, const sbx_golden_spec *spec, sbx_golden **out,
                      sbx_error *err);
  void (*golden_release)(sbx_golden *g);

  int (*clone)(sbx_driver *d, const sbx_golden *g, const sbx_clone_spec *spec, sbx_instance **out,
               sbx_error *err);
  int (*connect)(sbx_instance *s, int *fd_out, sbx_error *err);
  int (*pause)(sbx_instance *s, sbx_error *err);
  int (*resume)(sbx_instance *s, sbx_error *err);
  int (*snapshot)(sbx_instance *s, const char *dir, sbx_error *err);
  int (*restore)(sbx_driver *d, const char *dir, const sbx_clone_spec *spec, sbx_instance **out, sbx_error *err);
  /* Paused now, as the kernel or VMM says (survives a restart of the
   * caller); NULL = never reported paused. */
  bool (*is_paused)(sbx_instance *s);
  /* What a pause (hibernate) and an image (snapshot: fork, checkpoint,
   * promote, archive) keep: "memory" (processes, memory and the
   * filesystem), "filesystem" (files only: a restore starts fresh
   * processes). NULL = the verb is not available with this driver. */
  const char *pause_keeps;
  const char *image_keeps;
  int (*stats)(sbx_instance *s, sbx_stats *out, sbx_error *err);
  /* Wait for pid 1 to exit (timeout_ms < 0: forever); *code as a shell
   * reports it (128 + signal). SBX_E_TIMEOUT if still running. */
  int (*wait)(sbx_instance *s, int timeout_ms, int *code, sbx_error *err);
  /* Always releases s, even when part of the teardown failed (the error
   * then says what was left behind). */
  int (*destroy)(sbx_instance *s, sbx_error *err);
  /* For each sandbox found under run_dir, call fn; adopted ones are handed
   * over through the callback and kept running, the rest are destroyed.
   * Returns how many were adopted. Run it before any clone of this driver
   * (a clone in flight has no state file yet and would look dead). */
  int (*reconcile)(sbx_driver *d, sbx_reconcile_fn fn, void *ud, sbx_error *err);
  /* The pidfd of pid 1 (of the VMM process for a VM): readable once it
   * exited. Owned by the instance, valid until destroy. NULL: none. */
  int (*pidfd)(const sbx_instance *s);
} sbx_driver_ops;

/* Every driver handle starts with this, so the wrappers below dispatch. */
struct sbx_driver {
  const sbx_driver_ops *ops;
};

/* A clone spec with the internal init hook: run init_argv as pid 1
 * instead of silkd (the jail's golden warmup and the tests); clone then
 * returns once it is exec'd, without the readiness probe. */
typedef struct sbxi_clone_spec {
  sbx_clone_spec pub;
  const char *const *init_argv;
  const char *const *init_env; /* for init_argv; NULL = a minimal PATH */
} sbxi_clone_spec;

static inline const sbxi_clone_spec *sbxi_clone_spec_of(const sbx_clone_spec *spec) {
  return (const sbxi_clone_spec *)spec;
}

/* sbx_sandbox_clone with the init hook (tests: pid 1 is init_argv). */
int sbxi_sandbox_clone_init(sbx_driver *d, const sbx_golden *g, const sbx_clone_spec *spec,
                            const char *const *init_argv, const char *const *init_env, sbx_instance **out,
                            sbx_error *err);

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

/* ---- the readiness probe in steps (ready.c) ---- */
#define SBXI_INFO_FRAME_MAX 4096
struct sbxi_ready_buf {
  size_t len;
  char buf[SBXI_INFO_FRAME_MAX + 1];
};
/* Send the info request. */
int sbxi_ready_send(int fd, sbx_error *err);
/* Read what has arrived, without blocking: 1 once the info answer is
 * complete, 0 while more is to come, -1 on an error or another answer. */
int sbxi_ready_recv(int fd, struct sbxi_ready_buf *b, sbx_error *err);

#endif
