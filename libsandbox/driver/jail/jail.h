/* jail.h - internals of the jail driver.
 *
 * The parent computes everything the child needs (a plan: a list of typed
 * setup operations, bubblewrap style) before clone, so the child between
 * clone and execve only makes system calls on prepared data: no malloc, no
 * stdio, nothing that a fork of a threaded process must not do. The child
 * stops at the first operation that fails and reports which one.
 *
 * silkd's pid 1 is normally cloned by the driver's zygote (zygote.c,
 * zygote_serve.c): the same plan, sent over a socket, run by a child of an
 * already started silkd, which then serves without an exec. */
#ifndef SBX_JAIL_H
#define SBX_JAIL_H

#include <limits.h>
#include <linux/filter.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

#include <sandbox/driver.h>

#include "../driver_internal.h"
#include "../../template/layers.h"

#define JAIL_OPS_MAX 96
#define JAIL_STR_MAX 256
#define JAIL_DATA_MAX 3072
/* The plan's strings live in one arena rather than in fixed fields, so a
 * plan is ~70 KiB, of which a few KiB are used, instead of ~340 KiB: less
 * to fault in and zero per clone, fewer page table entries to copy. */
#define JAIL_ARENA_MAX 65536

typedef enum jail_op_kind {
  /* host side: paths are trusted host paths, before pivot_root */
  JOP_TMPFS_HOST,   /* mount tmpfs at target (data = options) */
  JOP_MKDIR_HOST,   /* mkdir target (EEXIST ok) */
  JOP_OVERLAY_ROOT, /* mount overlay at target (data = options); becomes the new root */
  /* new-root side: target is relative to the new root and resolved beneath
   * it with no symlink followed, so a hostile layer cannot redirect a mount */
  JOP_OVERLAY,     /* overlay at target (a directory, created if missing) */
  JOP_TMPFS,       /* tmpfs at target (data = options, flags = mount flags) */
  JOP_DEVPTS,      /* devpts newinstance at target */
  JOP_PROC,        /* procfs at target */
  JOP_BIND_DEV,    /* bind host device src onto a new empty file target */
  JOP_MASK,        /* bind target's /dev/null over target; optional if missing */
  JOP_MASK_DIR,    /* empty read-only tmpfs over target; optional if missing */
  JOP_RO,          /* bind target onto itself read-only; optional if missing */
  JOP_SYMLINK,     /* symlink src at target */
  JOP_PIVOT,       /* pivot_root into the new root, detach the old one */
} jail_op_kind;

typedef struct jail_op {
  jail_op_kind kind;
  unsigned long flags;
  const char *src;    /* "" when unused; all three point into the plan's arena */
  const char *target; /* < JAIL_STR_MAX */
  const char *data;   /* < JAIL_DATA_MAX */
} jail_op;

typedef struct jail_nsfds {
  int net, ipc; /* -1: none */
} jail_nsfds;

typedef struct jail_plan {
  size_t nops;
  jail_op ops[JAIL_OPS_MAX];
  char hostname[64];
  int go_fd;     /* child reads one byte before exec: the parent has placed it in its cgroups */
  int report_fd; /* child writes a jail_report on failure; CLOEXEC, so EOF = exec'd */
  int listen_fd; /* becomes fd 3 for silkd; -1 for a test init */
  int exec_fd;   /* O_PATH of silkd on the host, exec'd with execveat; -1 = path exec */
  int stdio[3];
  int devnull_fd;
  int net_fd; /* a pooled network namespace to join, or -1: clone made one */
  int ipc_fd; /* the same for IPC */
  bool unshare_cgroup;
  bool from_zygote; /* cloned by the zygote: see jail_child_setup */
  const struct sock_fprog *seccomp;
  uint64_t keep_caps; /* bit per capability kept */
  char *const *argv;
  char *const *envp;
  size_t arena_len;
  char arena[JAIL_ARENA_MAX];
} jail_plan;

typedef struct jail_report {
  int op;     /* index into ops, or a negative step (see setup.c) */
  int errnum;
  char what[JAIL_STR_MAX];
} jail_report;

/* setup.c: the child side. jail_child never returns: it builds the jail
 * and execs (argv, exec_fd). jail_child_setup does all but the exec (a
 * failed step exits) and returns in the finished jail, fds 0-3 arranged and
 * the report pipe at fd 5; jail_child_ready then closes that pipe, which the
 * parent reads as "built", as it reads an exec's close-on-exec. */
__attribute__((noreturn)) void jail_child(const jail_plan *p);
void jail_child_setup(const jail_plan *p);
void jail_child_ready(void);
const char *jail_step_name(int step);

/* cgroup.c */
typedef struct jail_cgroup jail_cgroup;
int jail_cgroup_init(const char *name, jail_cgroup **out, sbx_error *err);
void jail_cgroup_free(jail_cgroup *cg);
int jail_cgroup_create(jail_cgroup *cg, const char *id, const sbx_size_tier *size, sbx_error *err);
int jail_cgroup_attach(jail_cgroup *cg, const char *id, pid_t pid, sbx_error *err);
int jail_cgroup_freeze(jail_cgroup *cg, const char *id, bool frozen, sbx_error *err);
/* Frozen or freezing (hibernated), as the kernel says: it survives a
 * restart of the host process. */
bool jail_cgroup_frozen(jail_cgroup *cg, const char *id);
int jail_cgroup_stats(jail_cgroup *cg, const char *id, sbx_stats *st, sbx_error *err);
/* Kill whatever is left in it, then remove it. Missing is fine. */
int jail_cgroup_remove(jail_cgroup *cg, const char *id, sbx_error *err);
/* Calls fn for each sandbox cgroup present (for reconcile). */
int jail_cgroup_list(jail_cgroup *cg, void (*fn)(void *ud, const char *id), void *ud, sbx_error *err);
bool jail_cgroup_exists(jail_cgroup *cg, const char *id);

/* netpool.c: fresh network and IPC namespaces made ahead (while a destroy
 * waits for the kernel); each pair is handed out once (take), never reused. */
typedef struct jail_netpool jail_netpool;
int jail_netpool_open(size_t size, jail_netpool **out, sbx_error *err);
jail_nsfds jail_netpool_take(jail_netpool *np); /* fds the caller closes; -1s: none ready */
void jail_netpool_refill(jail_netpool *np);
size_t jail_netpool_count(jail_netpool *np);
void jail_netpool_close(jail_netpool *np); /* destroys what is left */

/* zygote.c (driver side) and zygote_serve.c (in silkd --zygote): a
 * request is one SOCK_SEQPACKET message: a jail_zyg_req, then arena_len
 * bytes of the plan's arena, then nfilter BPF instructions; the fds travel
 * as SCM_RIGHTS, in the order of the set bits of fdmask. The reply is a
 * jail_zyg_reply. */
#define JAIL_ZYG_MAGIC 0x315a4a53u /* "SJZ1" */
#define JAIL_ZYG_NOSTR UINT32_MAX  /* an op string that is "" */
enum { ZFD_GO, ZFD_REPORT, ZFD_LISTEN, ZFD_STDIN, ZFD_STDOUT, ZFD_STDERR, ZFD_DEVNULL, ZFD_NET, ZFD_IPC, ZFD_COUNT };

typedef struct jail_zyg_op {
  uint32_t kind, src, target, data; /* offsets into the arena */
  uint64_t flags;
} jail_zyg_op;

typedef struct jail_zyg_req {
  uint32_t magic;
  uint32_t nops, arena_len, nfilter;
  uint64_t clone_flags; /* namespaces only: the zygote adds CLONE_PARENT */
  uint64_t keep_caps;
  int32_t nice; /* of the thread asking, which the child takes, as a fork from it would */
  uint32_t fdmask;
  cpu_set_t cpus; /* the asking thread's CPU affinity, likewise (and the zygote's for the clone) */
  uint32_t unshare_cgroup;
  char hostname[64];
  jail_zyg_op ops[JAIL_OPS_MAX];
} jail_zyg_req;

/* The zygote's first message: a silkd from another build (another request
 * layout) is not used. */
typedef struct jail_zyg_hello {
  uint32_t magic;
  uint32_t req_size; /* sizeof(jail_zyg_req) */
  uint32_t ops_max, arena_max;
} jail_zyg_hello;

typedef struct jail_zyg_reply {
  int32_t pid;   /* > 0: the child, which is the driver's own (CLONE_PARENT) */
  int32_t errnum;
} jail_zyg_reply;

typedef struct jail_zygote jail_zygote;
/* Starts silkd --zygote from silkd_fd and waits for its greeting; fails
 * (and leaves nothing running) if that silkd has no zygote mode. */
int jail_zygote_open(int silkd_fd, int devnull_fd, jail_zygote **out, sbx_error *err);
void jail_zygote_close(jail_zygote *z);
/* The zygote died (a request failed on its socket): reaped, and restarted
 * by jail_zygote_revive. */
bool jail_zygote_alive(jail_zygote *z);
int jail_zygote_revive(jail_zygote *z, sbx_error *err);
/* Clones the plan's pid 1 through the zygote. 0 and *pid; < 0 the clone
 * failed (err); JAIL_ZYGOTE_GONE: the zygote is gone, nothing was started,
 * the caller clones directly. */
#define JAIL_ZYGOTE_GONE 1
int jail_zygote_clone(jail_zygote *z, const jail_plan *p, unsigned long ns_flags, pid_t *pid, sbx_error *err);

/* seccomp.c */
int jail_seccomp_build(struct sock_fprog *out, sbx_error *err);
void jail_seccomp_free(struct sock_fprog *prog);
uint64_t jail_default_caps(void);

/* plan.c: builds the operation list for one clone. */
typedef struct jail_plan_args {
  const sbx_layers *layers;
  const char *sbx_dir;      /* <run_dir>/<id> */
  const char *upper_dir;    /* persistent upper (golden build) or NULL = tmpfs in scratch */
  const sbx_size_tier *size;
} jail_plan_args;
int jail_plan_build(jail_plan *p, const jail_plan_args *a, sbx_error *err);

/* jail.c: the handles and one jail's life, shared with golden.c and
 * reconcile.c. */
typedef struct jail_driver {
  sbx_driver base;
  char *templates_dir, *goldens_dir, *run_dir;
  int run_dirfd;
  int silkd_fd; /* O_PATH; -1 when no silkd was configured */
  int devnull_fd;
  jail_cgroup *cg;
  jail_netpool *netpool; /* NULL: each clone makes its own */
  jail_zygote *zygote;   /* NULL: each clone execs silkd */
  struct sock_fprog seccomp;
  uint64_t caps;
} jail_driver;

struct sbx_template {
  sbx_layers layers;
};

struct sbx_golden {
  sbx_layers layers;
};

struct sbx_instance {
  sbx_instance_hdr hdr;
  jail_driver *jd;
  int pidfd;
  bool is_child; /* ours to waitpid; an adopted jail is only watched */
  bool exited;
  int code;
};

int jail_start(jail_driver *jd, const sbx_layers *layers, const sbx_clone_spec *spec, const char *upper_dir,
               sbx_instance **out, sbx_error *err);
int jail_wait(sbx_instance *s, int timeout_ms, int *code, sbx_error *err);
int jail_destroy(sbx_instance *s, sbx_error *err);
void jail_golden_release(sbx_golden *g);
void jail_teardown_host(jail_driver *jd, const char *id);

/* pid 1 keeps an O_PATH descriptor of its writable layer's tmpfs at this
 * number: the tmpfs is mounted in the jail's own mount namespace and
 * detached from every path by pivot_root, so the host reaches it (to
 * freeze it into an image) only as /proc/<pid 1>/fd/JAIL_UPPER_FD. silkd
 * marks every descriptor from 3 up close-on-exec for the commands it
 * runs, so none of them inherits it. */
#define JAIL_UPPER_FD 6

/* layers.c: images (snapshot/restore) and the layer list each sandbox
 * records beside its state file. */
int jail_layers_save(int sbx_dirfd, const sbx_layers *layers, sbx_error *err);
int jail_snapshot(sbx_instance *s, const char *dir, sbx_error *err);
/* The restored sandbox's copy of its image's layers, and the copies whose
 * sandbox is gone (reconcile). */
void jail_image_drop(jail_driver *jd, const char *id);
void jail_images_sweep(jail_driver *jd);
int jail_restore(sbx_driver *d, const char *dir, const sbx_clone_spec *spec, sbx_instance **out, sbx_error *err);

/* golden.c, reconcile.c */
int jail_golden_build(sbx_driver *d, const sbx_template *t, const sbx_golden_spec *spec, sbx_golden **out,
                      sbx_error *err);
int jail_reconcile(sbx_driver *d, sbx_reconcile_fn fn, void *ud, sbx_error *err);

#endif
