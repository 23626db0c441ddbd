/* jailexec.h - the jail's setup-plan executor, shared on purpose by the
 * jail driver (which builds plans and sends them to its zygote) and silkd
 * (which runs the zygote in --zygote mode). Internal to the project: not
 * installed, not exported (sbxi_/jail_ names; only sbx_* leave
 * libsandbox.so). It needs no other project header.
 *
 * The parent computes everything the child needs (a plan: a list of typed
 * setup operations, bubblewrap style) before clone, so the child between
 * clone and execve only makes system calls on prepared data: no malloc, no
 * stdio, nothing that a fork of a threaded process must not do. The child
 * stops at the first operation that fails and reports which one.
 *   setup.c         the child side: runs a plan (jail_child, jail_child_setup)
 *   zygote_serve.c  silkd --zygote: receives plans and clones their pid 1
 * The zygote is silkd itself, started once per driver and already past its
 * C library's start-up; it clones each jail's pid 1 on request and that
 * child calls run(arg) in the finished jail instead of exec'ing silkd. See
 * docs/drivers.md (jail zygote) and docs/security.md. */
#ifndef SBX_JAILEXEC_H
#define SBX_JAILEXEC_H

#include <linux/filter.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
/* What an op does, for a failure report ("overlay root"). */
const char *jail_op_name(jail_op_kind kind);

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

/* zygote_serve.c: serves clone requests on fd (a SOCK_SEQPACKET socket to
 * the driver) until it reaches its end (0) or fails (-errno). Returns in
 * the zygote only; each child runs run(arg) and _exits with what it
 * returns. */
int sbxi_jail_zygote_serve(int fd, int (*run)(void *arg), void *arg);

/* pid 1 keeps an O_PATH descriptor of its writable layer's tmpfs at this
 * number: the tmpfs is mounted in the jail's own mount namespace and
 * detached from every path by pivot_root, so the host reaches it (to
 * freeze it into an image) only as /proc/<pid 1>/fd/JAIL_UPPER_FD. silkd
 * marks every descriptor from 3 up close-on-exec for the commands it
 * runs, so none of them inherits it. */
#define JAIL_UPPER_FD 6

#endif
