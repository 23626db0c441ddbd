/* jail.h - internals of the jail driver.
 *
 * The parent computes everything the child needs (a plan: a list of typed
 * setup operations, bubblewrap style) before clone, so the child between
 * clone and execve only makes system calls on prepared data: no malloc, no
 * stdio, nothing that a fork of a threaded process must not do. The child
 * stops at the first operation that fails and reports which one.
 *
 * The plan, its executor (the child's setup) and the zygote's protocol are
 * the executor's own unit, shared with silkd: libsandbox/jailexec/.
 * silkd's pid 1 is normally cloned by the driver's zygote (zygote.c, and
 * jailexec/zygote_serve.c in silkd --zygote): the same plan, sent over a socket, run by a child of an
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
#include "jailexec/jailexec.h"

typedef struct jail_nsfds {
  int net, ipc; /* -1: none */
} jail_nsfds;

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
