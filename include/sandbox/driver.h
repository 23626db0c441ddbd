/* sandbox/driver.h - the driver interface: one small table of operations.
 *
 * A driver turns templates into running sandboxes. Everything above it
 * (pools, sandboxd, sbxctl) is written once against this table, as redis'
 * ae.c is written once against its polling backends. A process picks one
 * driver at start (sbx_driver_open("jail"|"qemu"|"auto")) and keeps it.
 *
 * Lifecycle:
 *   template_prepare  -> a registered root filesystem, read-only
 *   golden_build      -> template + the layer written by an optional warmup
 *                        argv, frozen read-only (spec §1.6)
 *   clone             -> a running sandbox whose silkd answers `info`
 *   connect           -> a connected stream to silkd (the agent channel)
 *   pause / resume    -> freeze / thaw every process of the sandbox
 *   snapshot/restore  -> an image of the sandbox in a directory, and a new
 *                        sandbox started from one (fork, checkpoint,
 *                        branch, promote, archive). What images and pauses
 *                        keep is declared per driver (sbx_driver_*_keeps):
 *                        the jail pauses with the cgroup freezer (memory
 *                        kept) and images its filesystem only (a restore
 *                        starts fresh processes); qemu answers
 *                        SBX_E_UNSUPPORTED to snapshot/restore for now
 *   stats             -> cpu, memory, pids
 *   destroy           -> kill, wait, unmount, remove cgroups and scratch
 *   reconcile         -> after a restart: list what exists on disk and in
 *                        the kernel; the caller adopts or removes each one
 *
 * Handles (sbx_template, sbx_golden, sbx_instance) are owned by the driver
 * that made them and are used by one thread at a time; different handles
 * may be used from different threads.
 */
#ifndef SANDBOX_DRIVER_H
#define SANDBOX_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sandbox/error.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- size tiers (sandboxd-http.md §1.4) ---- */
typedef struct sbx_size_tier {
  const char *name;   /* "small" ... "2xlarge", exact and lowercase */
  unsigned vcpus;     /* jail: CFS quota of this many CPUs */
  uint64_t mem_bytes; /* jail: memory cgroup limit; VM: guest RAM */
  uint32_t pids_max;  /* jail: pids cgroup limit (a fork bomb stops here) */
  uint64_t disk_bytes; /* jail: size cap of the writable layer's tmpfs */
} sbx_size_tier;

/* The five tiers in spec order; *count = 5. */
const sbx_size_tier *sbx_size_tiers(size_t *count);
/* NULL if the name is not exactly one of the tiers (free-form is refused). */
const sbx_size_tier *sbx_size_tier_get(const char *name);

typedef enum sbx_net { SBX_NET_NONE = 0, SBX_NET_EGRESS = 1 } sbx_net;

/* ---- configuration given once when a driver is opened ----
 * This and the specs below are growable option structs: struct_size first,
 * set by the SBX_*_INIT(...) macro (see sandbox/client.h, "option
 * structs"). The library reads no environment variable: every knob is a
 * field here. */
typedef struct sbx_driver_config {
  size_t struct_size;        /* SBX_DRIVER_CONFIG_INIT */
  const char *templates_dir; /* registered templates; default /var/lib/sandbox/templates */
  const char *goldens_dir;   /* frozen golden layers; default /var/lib/sandbox/goldens */
  const char *run_dir;       /* per-sandbox scratch and agent sockets; default /run/sandbox */
  const char *silkd_path;    /* the static silkd binary on the host; required for clone */
  /* Parent cgroup under each controller; default "sandbox". Sandbox ids
   * name the cgroups below it, so drivers sharing it must not share ids. */
  const char *cgroup_name;
  /* qemu driver (sandboxd's "qemu" object, spec §7.4). NULL = the default.
   * The programs (sandboxd, sbxctl, benches) let the SBX_GUEST_DIR,
   * SBX_GUEST_BUILDER, SBX_QEMU, SBX_QEMU_ACCEL, SBX_QEMU_RESTORE and
   * SBX_QEMU_AGENT environment variables override these. */
  const char *qemu_binary;        /* default /usr/bin/qemu-system-x86_64; a bare name is looked up in PATH */
  const char *qemu_guest_dir;     /* vmlinuz + initramfs.cpio.gz; default /var/cache/sandbox/guest */
  const char *qemu_kernel;        /* default <qemu_guest_dir>/vmlinuz */
  const char *qemu_initrd;        /* default <qemu_guest_dir>/initramfs.cpio.gz */
  const char *qemu_guest_builder; /* build-guest-image run on open; unused when kernel or initrd is given */
  const char *qemu_accel;         /* "auto" (default: kvm where usable), "kvm", "tcg" */
  const char *qemu_restore_mode;  /* "mmap" (default) or "copy" */
  const char *qemu_agent;         /* "auto" (default: vsock where usable), "vsock", "tcp" */
  /* jail driver (the programs read SBX_JAIL_NETPOOL and SBX_JAIL_ZYGOTE). */
  int jail_netpool;    /* network namespaces kept ready for clones; 0 = 2, < 0 = none */
  bool jail_no_zygote; /* exec silkd for every clone instead of forking the zygote */
} sbx_driver_config;
#define SBX_DRIVER_CONFIG_INIT(...) {.struct_size = sizeof(sbx_driver_config), __VA_ARGS__}

typedef struct sbx_driver sbx_driver;
typedef struct sbx_template sbx_template;
typedef struct sbx_golden sbx_golden;
typedef struct sbx_instance sbx_instance;

typedef struct sbx_template_spec {
  size_t struct_size;  /* SBX_TEMPLATE_SPEC_INIT */
  const char *name;    /* "host" (built in) or a name under templates_dir */
  const char *path;    /* a directory root to register under name; NULL = look it up */
  const char *archive; /* a root filesystem archive (tar, tar.gz, tar.zst...) to import as name */
} sbx_template_spec;
#define SBX_TEMPLATE_SPEC_INIT(...) {.struct_size = sizeof(sbx_template_spec), __VA_ARGS__}

typedef struct sbx_golden_spec {
  size_t struct_size;        /* SBX_GOLDEN_SPEC_INIT */
  const char *key;           /* directory name under goldens_dir; NULL = no golden layer kept */
  const char *const *warmup; /* NULL-terminated argv run once as the builder's init; NULL = none */
  const sbx_size_tier *size; /* builder's tier; NULL = small */
  int timeout_ms;            /* warmup limit; 0 = 120 s (spec §5.2) */
} sbx_golden_spec;
#define SBX_GOLDEN_SPEC_INIT(...) {.struct_size = sizeof(sbx_golden_spec), __VA_ARGS__}

typedef struct sbx_clone_spec {
  size_t struct_size;        /* SBX_CLONE_SPEC_INIT */
  const char *id;            /* [a-zA-Z0-9._-]{1,63}, unique on this node */
  const char *hostname;      /* NULL = id */
  const sbx_size_tier *size; /* NULL = small */
  sbx_net net;               /* only SBX_NET_NONE on the jail for now */
  int stdio[3];              /* fds for pid 1's stdin/out/err; -1 = /dev/null */
  int ready_timeout_ms;      /* 0 = 10 s */
} sbx_clone_spec;
/* stdio starts at -1: set it after, not in the macro. */
#define SBX_CLONE_SPEC_INIT(...) {.struct_size = sizeof(sbx_clone_spec), .stdio = {-1, -1, -1}, __VA_ARGS__}

/* Fill spec with defaults: all stdio -1, everything else zero. Inline, so
 * the size is the caller's. */
static inline void sbx_clone_spec_init(sbx_clone_spec *spec) {
  sbx_clone_spec d = SBX_CLONE_SPEC_INIT();
  *spec = d;
}

typedef struct sbx_stats {
  uint64_t cpu_ns;    /* CPU time used by all processes, cumulative */
  uint64_t mem_bytes; /* memory charged now (including the tmpfs layer) */
  uint64_t mem_limit;
  uint32_t pids;      /* processes and threads now */
  uint32_t pids_max;
  uint64_t oom_kills; /* processes the OOM killer took from it, ever (jail; 0 for a VM) */
} sbx_stats;

/* What reconcile found for one sandbox. For a live one, adopted is a handle
 * on it: return true to keep it (the caller now owns the handle) or false
 * to have it destroyed. For a dead one, adopted is NULL and the answer is
 * ignored (it is cleaned up). fn may be NULL: then everything is destroyed. */
typedef struct sbx_found {
  const char *id;
  pid_t init_pid; /* 0 if pid 1 is gone */
  bool alive;
} sbx_found;
typedef bool (*sbx_reconcile_fn)(void *ud, const sbx_found *found, sbx_instance *adopted);

/* A driver's table of operations (opaque: the sbx_* calls below dispatch
 * through it). */
typedef struct sbx_driver_ops sbx_driver_ops;

/* ---- registry ----
 * "jail", "qemu", or "auto" (qemu where /dev/kvm is usable, else jail).
 * SBX_E_UNSUPPORTED for a driver that is not built in. */
const sbx_driver_ops *sbx_driver_get(const char *name, sbx_error *err);
int sbx_driver_open(const char *name, const sbx_driver_config *cfg, sbx_driver **out, sbx_error *err);
void sbx_driver_close(sbx_driver *d);
const char *sbx_driver_name(const sbx_driver *d);

/* Accessors every driver's instance answers. */
const char *sbx_instance_id(const sbx_instance *s);
pid_t sbx_instance_pid(const sbx_instance *s); /* host pid of pid 1; 0 for a VM */
sbx_driver *sbx_instance_driver(const sbx_instance *s);
/* The driver's pidfd of pid 1 (see the op); -1 when it offers none. Poll
 * it, or dup it to watch pid 1 beyond the instance's life. */
int sbx_instance_pidfd(const sbx_instance *s);

/* ---- dispatch (the table, spelled out) ---- */
int sbx_template_prepare(sbx_driver *d, const sbx_template_spec *spec, sbx_template **out, sbx_error *err);
void sbx_template_release(sbx_driver *d, sbx_template *t);
int sbx_golden_build(sbx_driver *d, const sbx_template *t, const sbx_golden_spec *spec, sbx_golden **out,
                     sbx_error *err);
void sbx_golden_release(sbx_driver *d, sbx_golden *g);
int sbx_sandbox_clone(sbx_driver *d, const sbx_golden *g, const sbx_clone_spec *spec, sbx_instance **out,
                      sbx_error *err);
int sbx_sandbox_connect(sbx_instance *s, int *fd_out, sbx_error *err);
int sbx_sandbox_pause(sbx_instance *s, sbx_error *err);
int sbx_sandbox_resume(sbx_instance *s, sbx_error *err);
/* Write an image of s into dir (created here; it must not exist, and it is
 * complete once this returns 0: a crash leaves no file named "layers" in
 * it). The jail pauses s while its writable layer is copied and leaves a
 * paused s paused. The image is not synced to disk: a caller that must find
 * it after a crash syncs it (syncfs) before recording it. */
int sbx_sandbox_snapshot(sbx_instance *s, const char *dir, sbx_error *err);
/* A new sandbox from an image written by snapshot, as clone does. */
int sbx_sandbox_restore(sbx_driver *d, const char *dir, const sbx_clone_spec *spec, sbx_instance **out,
                        sbx_error *err);
/* Paused (hibernated) now; also true for a sandbox adopted after a restart
 * that was paused before it. */
bool sbx_sandbox_is_paused(sbx_instance *s);
/* "memory" or "filesystem": what a pause and an image keep; NULL when the
 * driver cannot do that verb (its calls answer SBX_E_UNSUPPORTED). */
const char *sbx_driver_pause_keeps(const sbx_driver *d);
const char *sbx_driver_image_keeps(const sbx_driver *d);
int sbx_sandbox_stats(sbx_instance *s, sbx_stats *out, sbx_error *err);
/* Wait for pid 1 to exit (timeout_ms < 0: forever); *code as a shell
 * reports it (128 + signal). SBX_E_TIMEOUT if still running. */
int sbx_sandbox_wait(sbx_instance *s, int timeout_ms, int *code, sbx_error *err);
/* Always releases s, even when part of the teardown failed (the error
 * then says what was left behind). */
int sbx_sandbox_destroy(sbx_instance *s, sbx_error *err);
/* For each sandbox found under run_dir, call fn; adopted ones are handed
 * over through the callback and kept running, the rest are destroyed.
 * Returns how many were adopted. Run it before any clone of this driver
 * (a clone in flight has no state file yet and would look dead). */
int sbx_driver_reconcile(sbx_driver *d, sbx_reconcile_fn fn, void *ud, sbx_error *err);

/* ---- the agent channel (driver-independent) ----
 * Readiness (spec §5.1): send {"v":1,"op":"info"} and receive an info frame
 * of at most 4096 bytes within timeout_ms. */
int sbx_ready_probe(int fd, int timeout_ms, sbx_error *err);

#ifdef __cplusplus
}
#endif
#endif
