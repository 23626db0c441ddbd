/* qemu.h - internals of the qemu (microVM) driver.
 *
 * One sandbox is one qemu-system-x86_64 -M microvm process, our child,
 * owned through a pidfd. Its run directory <run_dir>/<id> holds the QMP
 * socket, the serial console log and a state file (pid, start time, agent
 * address) that lets a restarted host find it again.
 *
 * A golden is a booted guest whose silkd answered, stopped and migrated to
 * a file; a clone is a new QEMU started with -incoming from that file. The
 * template's root is a read-only disk shared by the golden and all clones;
 * every write lands in a tmpfs inside the guest, so a clone owns no disk
 * file on the host. */
#ifndef SBX_QEMU_H
#define SBX_QEMU_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include <sandbox/core.h>
#include <sandbox/driver.h>

#include "../driver_internal.h"

#define QEMU_AGENT_PORT 2048
/* A clone's QEMU reads the golden's saved state from this fd. */
#define QEMU_INCOMING_FD 3
#define QEMU_INCOMING_FD_STR "3"

typedef enum qemu_accel { QEMU_ACCEL_TCG = 0, QEMU_ACCEL_KVM = 1 } qemu_accel;
typedef enum qemu_agent { QEMU_AGENT_TCP = 0, QEMU_AGENT_VSOCK = 1 } qemu_agent;
/* copy: a clone reads the golden's RAM from the migration stream into its
 * own memory. mmap: the golden's RAM is a file; a clone maps it private
 * (copy-on-write) and the stream carries only device state. */
typedef enum qemu_restore { QEMU_RESTORE_COPY = 0, QEMU_RESTORE_MMAP = 1 } qemu_restore;

typedef struct qemu_driver {
  sbx_driver base;
  char *templates_dir, *goldens_dir, *run_dir;
  char *guest_dir; /* where the builder writes vmlinuz + initramfs.cpio.gz */
  char *kernel, *initrd;
  char *builder;   /* build-guest-image given by config or env, or NULL */
  bool prebuilt;   /* kernel or initrd configured: no builder runs */
  char *qemu_bin;
  int run_dirfd;
  qemu_accel accel;
  bool accel_pinned; /* accel kvm|tcg configured: no fallback from KVM to TCG */
  qemu_agent agent;
  qemu_restore restore;
  unsigned long tsc_khz; /* 0 = unknown: the kernel calibrates */
  uint32_t next_cid;     /* vsock guest CIDs handed out by this driver */
} qemu_driver;

struct sbx_template {
  char *disk; /* read-only root image; NULL = the initramfs is the root */
};

struct sbx_golden {
  char *dir;   /* holds "state" (the migration stream) and "vm.args" */
  bool owned;  /* a keyless golden: removed on release */
  char *disk;  /* the template disk the state refers to, or NULL */
  const sbx_size_tier *size;
  qemu_accel accel; /* a clone must run the machine its golden ran */
  qemu_agent agent;
  qemu_restore restore; /* mmap: dir also holds "ram" */
};

/* What a QEMU process is: enough to rebuild the command line of a clone
 * identical to its golden's (migration needs the same machine). */
typedef struct qemu_vm_args {
  const sbx_size_tier *size;
  const char *disk;     /* NULL = none */
  const char *incoming; /* migration file to restore from, NULL = cold boot */
  const char *mem_path; /* file-backed guest RAM, NULL = anonymous */
  bool mem_share;       /* golden: writes go to the file; clone: private COW */
  qemu_accel accel;
  qemu_agent agent;
  uint16_t port;        /* host TCP port forwarded to guest 2048 (tcp agent) */
  uint32_t cid;         /* guest CID (vsock agent) */
} qemu_vm_args;

struct sbx_instance {
  sbx_instance_hdr hdr; /* hdr.pid stays 0: a VM has no host pid 1 */
  qemu_driver *qd;
  pid_t qemu_pid;
  int pidfd;
  bool is_child; /* ours to waitpid; an adopted VM is only watched */
  bool exited;
  int code;
  qemu_agent agent;
  uint16_t port;
  uint32_t cid;
  const sbx_size_tier *size;
  struct qmp *qmp;
};

/* accel.c */
unsigned long qemu_host_tsc_khz(void);

/* options.c: the configured settings and their environment overrides
 * into qd (binary, guest paths, builder, accel, restore, agent). */
int qemu_options(qemu_driver *qd, const sbx_driver_config *cfg, sbx_error *err);

/* qmp.c: a blocking QMP client. Events are skipped. */
typedef struct qmp qmp;
int qmp_connect(const char *path, int timeout_ms, qmp **out, sbx_error *err);
void qmp_close(qmp *q);
/* Runs one command; args is a JSON object text or NULL. *ret (if not NULL)
 * receives the "return" member as JSON text (sbx_free it). */
int qmp_cmd(qmp *q, const char *cmd, const char *args, char **ret, sbx_error *err);
/* query-status's "status" into buf. */
int qmp_status(qmp *q, char *buf, size_t len, sbx_error *err);

/* vm.c: one QEMU process. */
int qemu_vm_start(qemu_driver *qd, const char *id, const qemu_vm_args *a, sbx_instance **out, sbx_error *err);
int qemu_vm_agent_dial(sbx_instance *s, sbx_error *err);
/* Waits until silkd answers info (a fresh connection per attempt). */
int qemu_vm_wait_ready(sbx_instance *s, int timeout_ms, sbx_error *err);
int qemu_vm_wait(sbx_instance *s, int timeout_ms, int *code, sbx_error *err);
int qemu_vm_destroy(sbx_instance *s, sbx_error *err);
int qemu_run_dir_path(const qemu_driver *qd, const char *id, const char *name, char *buf, size_t len,
                      sbx_error *err);
int qemu_write_state(sbx_instance *s, sbx_error *err);

/* x-ignore-shared: RAM in a shared file-backed block stays out of the
 * stream (both ends must set it). */
int qemu_ignore_shared(sbx_instance *s, sbx_error *err);

/* identity.c: hostname, machine-id, a reseeded RNG and the wall clock. */
int qemu_identity(sbx_instance *s, const char *hostname, sbx_error *err);

/* golden.c, disk.c, reconcile.c */
int qemu_golden_build(sbx_driver *d, const sbx_template *t, const sbx_golden_spec *spec, sbx_golden **out,
                      sbx_error *err);
void qemu_golden_release(sbx_golden *g);
int qemu_template_disk(qemu_driver *qd, const char *name, const char *root, char **out, sbx_error *err);
int qemu_reconcile(sbx_driver *d, sbx_reconcile_fn fn, void *ud, sbx_error *err);

/* Run argv (a helper: mkfs, the guest image builder), stdout dropped;
 * SBX_E_OS / SBX_E_REMOTE when it cannot start or exits non-zero. */
int qemu_run_helper(const char *const *argv, sbx_error *err);

#endif
