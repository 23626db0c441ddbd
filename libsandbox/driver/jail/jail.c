/* The jail driver: its operation table and the life of one jail.
 *
 * A jail is pid 1 of fresh pid, mount, net, ipc, uts and cgroup namespaces,
 * rooted in an overlayfs whose writable layer lives in a tmpfs inside its
 * own mount namespace. All its mounts therefore live and die with that
 * namespace, which is what makes teardown leak-free: killing pid 1 kills
 * the pid namespace, the mount namespace goes with it, and what remains on
 * the host is one cgroup per controller and one run directory. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "core/cleanup.h"
#include "jail.h"
#include "util/util.h"

#define DEFAULT_STATE "/var/lib/sandbox"
#define SILKD_ARGV0 "silkd"
/* Each destroy refills the stock, so a small one is enough; a burst of
 * clones beyond it makes its own namespaces. */
#define JAIL_NETPOOL_SIZE 2
static const char *const default_env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                          "HOME=/root", NULL};
static const char *const silkd_env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                        "HOME=/root", "SILKD_NET=none", NULL};
static const char *const silkd_argv[] = {SILKD_ARGV0, "--listen", "fd:3", NULL};

static void jail_close(sbx_driver *d);

static int jail_open(const sbx_driver_config *cfg, sbx_driver **out, sbx_error *err) {
  *out = NULL;
  if (geteuid() != 0) return sbx_err(err, SBX_E_UNSUPPORTED, "the jail driver needs root");
  jail_driver *jd = sbx_calloc(1, sizeof *jd);
  jd->base.ops = &sbxi_jail_driver_ops;
  jd->run_dirfd = jd->silkd_fd = jd->devnull_fd = -1;
  jd->templates_dir = sbx_strdup(cfg->templates_dir ? cfg->templates_dir : DEFAULT_STATE "/templates");
  jd->goldens_dir = sbx_strdup(cfg->goldens_dir ? cfg->goldens_dir : DEFAULT_STATE "/goldens");
  jd->run_dir = sbx_strdup(cfg->run_dir ? cfg->run_dir : "/run/sandbox");
  int rc = sbxi_mkdir_p(jd->run_dir, 0700, err);
  if (rc < 0) goto fail;
  if ((jd->run_dirfd = open(jd->run_dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
    rc = sbx_err_os(err, errno, "open %s", jd->run_dir);
    goto fail;
  }
  if ((jd->devnull_fd = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
    rc = sbx_err_os(err, errno, "open /dev/null");
    goto fail;
  }
  if (cfg->silkd_path && (jd->silkd_fd = open(cfg->silkd_path, O_PATH | O_CLOEXEC)) < 0) {
    rc = sbx_err_os(err, errno, "silkd %s", cfg->silkd_path);
    goto fail;
  }
  if ((rc = jail_cgroup_init(cfg->cgroup_name ? cfg->cgroup_name : "sandbox", &jd->cg, err)) < 0) goto fail;
  if ((rc = jail_seccomp_build(&jd->seccomp, err)) < 0) goto fail;
  jd->caps = jail_default_caps();
  /* jail_netpool sets the stock (< 0 = off, to compare). */
  int np = cfg->jail_netpool;
  if ((rc = jail_netpool_open(np < 0 ? 0 : np ? (size_t)np : JAIL_NETPOOL_SIZE, &jd->netpool, err)) < 0) goto fail;
  /* jail_no_zygote turns the zygote off (to compare, or to rule it out);
   * a silkd without the mode (or a stand-in) simply has none. */
  if (jd->silkd_fd >= 0 && !cfg->jail_no_zygote) {
    sbx_error zerr = {0};
    if (jail_zygote_open(jd->silkd_fd, jd->devnull_fd, &jd->zygote, &zerr) < 0)
      sbx_debug("jail: no zygote, clones exec silkd: %s", zerr.msg);
  }
  *out = &jd->base;
  return 0;
fail:
  jail_close(&jd->base);
  return rc;
}

static void jail_close(sbx_driver *d) {
  jail_driver *jd = (jail_driver *)d;
  jail_zygote_close(jd->zygote);
  jail_netpool_close(jd->netpool);
  if (jd->run_dirfd >= 0) close(jd->run_dirfd);
  if (jd->silkd_fd >= 0) close(jd->silkd_fd);
  if (jd->devnull_fd >= 0) close(jd->devnull_fd);
  if (jd->cg) jail_cgroup_free(jd->cg);
  jail_seccomp_free(&jd->seccomp);
  sbx_free(jd->templates_dir);
  sbx_free(jd->goldens_dir);
  sbx_free(jd->run_dir);
  sbx_free(jd);
}

/* ---- templates and goldens ---- */

static int jail_template_prepare(sbx_driver *d, const sbx_template_spec *spec, sbx_template **out, sbx_error *err) {
  jail_driver *jd = (jail_driver *)d;
  *out = NULL;
  const char *name = spec && spec->name ? spec->name : "host";
  sbx_template *t = sbx_calloc(1, sizeof *t);
  int rc;
  if (spec && spec->archive)
    rc = sbxi_tpl_import(jd->templates_dir, name, spec->archive, &t->layers, err);
  else if (strcmp(name, "host") == 0 && !(spec && spec->path))
    rc = sbxi_tpl_host(jd->templates_dir, &t->layers, err);
  else
    rc = sbxi_tpl_dir(jd->templates_dir, name, spec ? spec->path : NULL, &t->layers, err);
  if (rc < 0) {
    sbx_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

static void jail_template_release(sbx_template *t) {
  sbxi_layers_free(&t->layers);
  sbx_free(t);
}

void jail_golden_release(sbx_golden *g) {
  sbxi_layers_free(&g->layers);
  sbx_free(g);
}

/* ---- one jail ---- */

static int sock_path(const jail_driver *jd, const char *id, struct sockaddr_un *sa, sbx_error *err) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  return sbxi_path_fmt(sa->sun_path, sizeof sa->sun_path, err, "%s/%s/agent.sock", jd->run_dir, id);
}

void jail_teardown_host(jail_driver *jd, const char *id) {
  jail_cgroup_remove(jd->cg, id, NULL);
  sbxi_rm_rf_at(jd->run_dirfd, id, NULL);
  jail_image_drop(jd, id);
}

static int code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

static int report_error(const jail_plan *plan, const jail_report *r, sbx_error *err) {
  if (r->op >= 0 && (size_t)r->op < plan->nops)
    return sbx_err_os(err, r->errnum, "jail setup: %s %s", jail_op_name(plan->ops[r->op].kind), r->what);
  return sbx_err_os(err, r->errnum, "jail setup: %s%s%s", jail_step_name(r->op), r->what[0] ? " " : "", r->what);
}

/* silkd must outlive its workloads when the sandbox runs out of memory
 * (the writable layer is charged to the same cgroup, and its pages belong
 * to no process the OOM killer could weigh): pid 1 is exempt, set from
 * here because lowering the score takes CAP_SYS_RESOURCE, and silkd puts
 * each child back to 0. Before "go", so nothing of the sandbox runs first.
 * A host process without CAP_SYS_RESOURCE (root in a container) cannot:
 * the writable tmpfs cap (plan.c) is then what keeps a writer from
 * reaching the memory limit. */
static int exempt_from_oom(pid_t pid, sbx_error *err) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/oom_score_adj", (int)pid);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, "-1000", 5) != 5) {
    int e = errno;
    if (fd >= 0) close(fd);
    if (e == EACCES || e == EPERM) {
      sbx_debug("jail: pid 1 keeps its OOM score (no CAP_SYS_RESOURCE)");
      return 0;
    }
    return sbx_err_os(err, e, "write %s", path);
  }
  close(fd);
  return 0;
}

/* One clone in progress: what it holds, released by start_undo on failure. */
struct start {
  jail_driver *jd;
  const sbx_clone_spec *spec;
  const sbxi_clone_spec *hook;
  const sbx_layers *layers;
  const sbx_size_tier *size;
  const char *id;
  char dir[PATH_MAX];
  int dfd, lfd, go[2], rep[2];
  jail_nsfds ns;
  jail_plan *plan;
  sbx_instance *s;
  bool cg_made, pooled, zygote;
  pid_t pid;
  uint64_t t_start, t_clone, t_attach, t_go, t_exec;
};

static int start_validate(const struct start *st, sbx_error *err) {
  int rc = sbxi_check_id(st->spec->id, err);
  if (rc < 0) return rc;
  if (st->spec->net != SBX_NET_NONE) return sbx_err(err, SBX_E_UNSUPPORTED, "jail: only net=none is available");
  if (!st->hook->init_argv && st->jd->silkd_fd < 0)
    return sbx_err(err, SBX_E_INVAL, "jail: no silkd_path configured");
  if (st->hook->init_argv && (!st->hook->init_argv[0] || st->hook->init_argv[0][0] != '/'))
    return sbx_err(err, SBX_E_INVAL, "jail: init_argv[0] must be an absolute path");
  return 0;
}

/* <run_dir>/<id> with root/ and rw/; removed again if any part fails. */
static int start_run_dir(struct start *st, sbx_error *err) {
  jail_driver *jd = st->jd;
  if (mkdirat(jd->run_dirfd, st->id, 0700) < 0) {
    if (errno == EEXIST) return sbx_err(err, SBX_E_EXISTS, "sandbox %s already exists", st->id);
    return sbx_err_os(err, errno, "mkdir %s/%s", jd->run_dir, st->id);
  }
  int rc = sbxi_path_fmt(st->dir, sizeof st->dir, err, "%s/%s", jd->run_dir, st->id);
  if (rc < 0) {
    sbxi_rm_rf_at(jd->run_dirfd, st->id, NULL);
    return rc;
  }
  st->dfd = openat(jd->run_dirfd, st->id, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (st->dfd < 0 || mkdirat(st->dfd, "root", 0755) < 0 || mkdirat(st->dfd, "rw", 0700) < 0) {
    rc = sbx_err_os(err, errno, "mkdir in %s", st->dir);
    if (st->dfd >= 0) close(sbxi_steal_fd(&st->dfd));
    sbxi_rm_rf_at(jd->run_dirfd, st->id, NULL);
    return rc;
  }
  return 0;
}

/* The plan the child executes, and the descriptors it inherits: the
 * agent's listening socket, go, the report pipe, pooled namespaces. */
static int start_plan(struct start *st, const char *upper_dir, sbx_error *err) {
  jail_driver *jd = st->jd;
  jail_plan *plan = st->plan;
  jail_plan_args pa = {st->layers, st->dir, upper_dir, st->size};
  int rc = jail_plan_build(plan, &pa, err);
  if (rc < 0) return rc;
  snprintf(plan->hostname, sizeof plan->hostname, "%s", st->spec->hostname ? st->spec->hostname : st->id);
  if (!st->hook->init_argv) {
    struct sockaddr_un sa;
    if ((rc = sock_path(jd, st->id, &sa, err)) < 0) return rc;
    st->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (st->lfd < 0 || bind(st->lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(st->lfd, 128) < 0)
      return sbx_err_os(err, errno, "agent socket %s", sa.sun_path);
  }
  /* go is a socket pair, not a pipe: a child that failed early has
   * closed its end, and send(MSG_NOSIGNAL) then fails instead of raising
   * SIGPIPE in the host process. */
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, st->go) < 0 || pipe2(st->rep, O_CLOEXEC) < 0)
    return sbx_err_os(err, errno, "pipe");
  plan->go_fd = st->go[0];
  plan->report_fd = st->rep[1];
  plan->listen_fd = st->lfd;
  plan->exec_fd = st->hook->init_argv ? -1 : jd->silkd_fd;
  for (int i = 0; i < 3; i++) plan->stdio[i] = st->spec->stdio[i];
  plan->devnull_fd = jd->devnull_fd;
  st->ns = jail_netpool_take(jd->netpool);
  st->pooled = st->ns.net >= 0;
  plan->net_fd = st->ns.net;
  plan->ipc_fd = st->ns.ipc;
  /* The cgroup namespace is entered by the child itself, once it is in
   * its cgroups (see setup.c). */
  plan->unshare_cgroup = true;
  plan->seccomp = &jd->seccomp;
  plan->keep_caps = jd->caps;
  const sbxi_clone_spec *hook = st->hook;
  plan->argv = (char *const *)(hook->init_argv ? hook->init_argv : silkd_argv);
  plan->envp = (char *const *)(hook->init_argv ? (hook->init_env ? hook->init_env : default_env) : silkd_env);
  return 0;
}

/* pid 1, from the zygote or a clone of this process; then our ends of
 * what the child alone needs are closed. */
static int start_spawn(struct start *st, sbx_error *err) {
  jail_driver *jd = st->jd;
  st->t_clone = sbx_now_ns();
  /* A fork-like clone (no new stack): the child continues here on a copy
   * of our stack, as with fork, and never returns from jail_child. */
  unsigned long flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | SIGCHLD;
  if (st->ns.net < 0) flags |= CLONE_NEWNET;
  if (st->ns.ipc < 0) flags |= CLONE_NEWIPC;
  /* silkd comes from the zygote when there is one: the same setup, then
   * silkd's loop with no exec (zygote_serve.c). A zygote that died leaves
   * this clone to the exec path and is restarted at the next destroy. */
  if (jd->zygote && !st->hook->init_argv) {
    int rc = jail_zygote_clone(jd->zygote, st->plan, flags & ~(unsigned long)SIGCHLD, &st->pid, err);
    if (rc < 0) return rc;
    st->zygote = rc == 0;
  }
  if (!st->zygote) {
    st->pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
    if (st->pid < 0) return sbx_err_os(err, errno, "clone");
    if (st->pid == 0) {
      close(st->go[1]);
      close(st->rep[0]);
      jail_child(st->plan);
    }
  }
  close(sbxi_steal_fd(&st->go[0]));
  close(sbxi_steal_fd(&st->rep[1]));
  /* The child holds the namespaces now: ours are the last other references. */
  if (st->ns.net >= 0) close(st->ns.net);
  if (st->ns.ipc >= 0) close(st->ns.ipc);
  st->ns.net = st->ns.ipc = -1;
  return 0;
}

/* The instance, its cgroups (made while the child builds its root on the
 * other core) and its OOM exemption, before go. */
static int start_attach(struct start *st, sbx_error *err) {
  jail_driver *jd = st->jd;
  sbx_instance *s = st->s = sbx_calloc(1, sizeof *s);
  s->hdr.drv = &jd->base;
  snprintf(s->hdr.id, sizeof s->hdr.id, "%s", st->id);
  s->hdr.pid = st->pid;
  s->jd = jd;
  s->is_child = true;
  s->pidfd = (int)syscall(SYS_pidfd_open, st->pid, 0);
  if (s->pidfd < 0) return sbx_err_os(err, errno, "pidfd_open");
  int rc = jail_cgroup_create(jd->cg, st->id, st->size, err);
  if (rc < 0) return rc;
  st->cg_made = true;
  st->t_attach = sbx_now_ns();
  if ((rc = jail_cgroup_attach(jd->cg, st->id, st->pid, err)) < 0) return rc;
  if (!st->hook->init_argv && (rc = exempt_from_oom(st->pid, err)) < 0) return rc;
  return 0;
}

/* Send go and read the child's setup report: EOF (exec'd) is success. */
static int start_go(struct start *st, sbx_error *err) {
  st->t_go = sbx_now_ns();
  /* A child that failed its setup has already exited: its report says
   * why, which matters more than the failed send. */
  int go_errno = send(st->go[1], "g", 1, MSG_NOSIGNAL) == 1 ? 0 : errno;
  close(sbxi_steal_fd(&st->go[1]));
  /* Destroys refill the stock (see jail_destroy); only a burst of clones
   * that emptied it refills here, while the child finishes and silkd
   * starts. */
  if (jail_netpool_count(st->jd->netpool) == 0) jail_netpool_refill(st->jd->netpool);
  jail_report r;
  ssize_t n;
  do n = read(st->rep[0], &r, sizeof r);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof r && go_errno) return sbx_err_os(err, go_errno, "start jail");
  if (n == (ssize_t)sizeof r) return report_error(st->plan, &r, err);
  if (n != 0) return sbx_err(err, SBX_E_INTERNAL, "jail setup: short report");
  close(sbxi_steal_fd(&st->rep[0]));
  st->t_exec = sbx_now_ns();
  if (st->lfd >= 0) close(sbxi_steal_fd(&st->lfd)); /* pid 1 holds it now */
  return 0;
}

/* The state file lets a restarted host find and re-identify pid 1; the
 * layers file says what its images stack on (layers.c). */
static int start_record(struct start *st, sbx_error *err) {
  char line[64];
  snprintf(line, sizeof line, "%d %llu\n", (int)st->pid, sbxi_proc_starttime(st->pid));
  sbxi_cleanup_close int sfd = openat(st->dfd, "state", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (sfd < 0 || write(sfd, line, strlen(line)) != (ssize_t)strlen(line)) return sbx_err_os(err, errno, "write state");
  return jail_layers_save(st->dfd, st->layers, err);
}

static int start_wait_ready(struct start *st, sbx_error *err) {
  if (st->hook->init_argv) return 0;
  sbxi_cleanup_close int afd = -1;
  int timeout = st->spec->ready_timeout_ms > 0 ? st->spec->ready_timeout_ms : 10000;
  int rc = st->jd->base.ops->connect(st->s, &afd, err);
  if (rc == 0) rc = sbx_ready_probe(afd, timeout, err);
  return rc < 0 ? sbx_err_wrap(err, "sandbox %s not ready", st->id) : 0;
}

static void start_undo(struct start *st) {
  jail_driver *jd = st->jd;
  if (st->pid > 0) {
    kill(st->pid, SIGKILL);
    while (waitpid(st->pid, NULL, 0) < 0 && errno == EINTR) {}
  }
  if (st->s) {
    if (st->s->pidfd >= 0) close(st->s->pidfd);
    sbx_free(st->s);
  }
  for (int i = 0; i < 2; i++) {
    if (st->go[i] >= 0) close(st->go[i]);
    if (st->rep[i] >= 0) close(st->rep[i]);
  }
  if (st->lfd >= 0) close(st->lfd);
  if (st->ns.net >= 0) close(st->ns.net);
  if (st->ns.ipc >= 0) close(st->ns.ipc);
  close(st->dfd);
  if (st->cg_made) jail_cgroup_remove(jd->cg, st->id, NULL);
  sbxi_rm_rf_at(jd->run_dirfd, st->id, NULL);
  sbx_free(st->plan);
  /* No destroy follows a failed clone: replace what it took here. */
  jail_netpool_refill(jd->netpool);
}

/* Validate, make the run directory, then plan, spawn, attach, go, record
 * and wait for the agent; any failure undoes all of it. */
int jail_start(jail_driver *jd, const sbx_layers *layers, const sbx_clone_spec *spec, const char *upper_dir,
               sbx_instance **out, sbx_error *err) {
  *out = NULL;
  struct start st = {.jd = jd,
                     .spec = spec,
                     .hook = sbxi_clone_spec_of(spec),
                     .layers = layers,
                     .size = spec->size ? spec->size : sbx_size_tier_get("small"),
                     .id = spec->id,
                     .dfd = -1,
                     .lfd = -1,
                     .go = {-1, -1},
                     .rep = {-1, -1},
                     .ns = {-1, -1},
                     .pid = -1};
  int rc = start_validate(&st, err);
  if (rc < 0) return rc;
  if ((rc = start_run_dir(&st, err)) < 0) return rc;
  st.t_start = sbx_now_ns();
  st.plan = sbx_calloc(1, sizeof *st.plan);
  if ((rc = start_plan(&st, upper_dir, err)) < 0 || (rc = start_spawn(&st, err)) < 0 ||
      (rc = start_attach(&st, err)) < 0 || (rc = start_go(&st, err)) < 0 || (rc = start_record(&st, err)) < 0 ||
      (rc = start_wait_ready(&st, err)) < 0) {
    start_undo(&st);
    return rc;
  }
  close(st.dfd);
  sbx_free(st.plan);
  /* The child's setup runs alongside "clone and cgroups"; "go to exec" is
   * what it still needed once the parent was done. */
  sbx_debug("jail %s: prepare %.0f us, clone and cgroups %.0f us (cgroup attach %.0f us), go to exec %.0f us, "
            "exec to ready %.0f us, pooled namespaces %s, zygote %s",
            st.id, (double)(st.t_clone - st.t_start) / 1e3, (double)(st.t_go - st.t_clone) / 1e3,
            (double)(st.t_go - st.t_attach) / 1e3, (double)(st.t_exec - st.t_go) / 1e3,
            (double)(sbx_now_ns() - st.t_exec) / 1e3, st.pooled ? "yes" : "no", st.zygote ? "yes" : "no");
  *out = st.s;
  return 0;
}

static int jail_clone(sbx_driver *d, const sbx_golden *g, const sbx_clone_spec *spec, sbx_instance **out,
                      sbx_error *err) {
  if (!g || !spec) return sbx_err(err, SBX_E_INVAL, "clone needs a golden and a spec");
  return jail_start((jail_driver *)d, &g->layers, spec, NULL, out, err);
}

static int jail_connect(sbx_instance *s, int *fd_out, sbx_error *err) {
  *fd_out = -1;
  struct sockaddr_un sa;
  int rc = sock_path(s->jd, s->hdr.id, &sa, err);
  if (rc < 0) return rc;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return sbx_err_os(err, errno, "socket");
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    rc = sbx_err_os(err, errno, "connect %s", sa.sun_path);
    close(fd);
    return rc;
  }
  *fd_out = fd;
  return 0;
}

static int jail_pause(sbx_instance *s, sbx_error *err) { return jail_cgroup_freeze(s->jd->cg, s->hdr.id, true, err); }
static int jail_resume(sbx_instance *s, sbx_error *err) {
  return jail_cgroup_freeze(s->jd->cg, s->hdr.id, false, err);
}

static bool jail_is_paused(sbx_instance *s) { return jail_cgroup_frozen(s->jd->cg, s->hdr.id); }

static int jail_stats(sbx_instance *s, sbx_stats *out, sbx_error *err) {
  return jail_cgroup_stats(s->jd->cg, s->hdr.id, out, err);
}

int jail_wait(sbx_instance *s, int timeout_ms, int *code, sbx_error *err) {
  if (!s->exited) {
    int rc = sbxi_pidfd_wait(s->pidfd, timeout_ms, s->hdr.id, err);
    if (rc < 0) return rc;
    if (s->is_child) {
      int status;
      pid_t w;
      do w = waitpid(s->hdr.pid, &status, 0);
      while (w < 0 && errno == EINTR);
      if (w < 0) return sbx_err_os(err, errno, "waitpid");
      s->code = code_of(status);
    } else {
      s->code = -1; /* not our child: its status went to its parent */
    }
    s->exited = true;
  }
  if (code) *code = s->code;
  return 0;
}

int jail_destroy(sbx_instance *s, sbx_error *err) {
  jail_driver *jd = s->jd;
  if (!s->exited) {
    /* pid 1's death makes the kernel kill every process of the pid
     * namespace, and its wait returns only once they are all gone. A
     * frozen task cannot act on SIGKILL, so thaw first. */
    syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
    jail_cgroup_freeze(jd->cg, s->hdr.id, false, NULL);
    /* The kernel tears the jail down meanwhile: a good moment to make the
     * namespaces the next clone will take, off its path. */
    jail_netpool_refill(jd->netpool);
    if (jd->zygote && !jail_zygote_alive(jd->zygote)) jail_zygote_revive(jd->zygote, NULL);
    jail_wait(s, -1, NULL, NULL);
  }
  int rc = jail_cgroup_remove(jd->cg, s->hdr.id, err);
  int rc2 = sbxi_rm_rf_at(jd->run_dirfd, s->hdr.id, rc < 0 ? NULL : err);
  jail_image_drop(jd, s->hdr.id);
  close(s->pidfd);
  sbx_free(s);
  return rc < 0 ? rc : rc2;
}

static int jail_pidfd(const sbx_instance *s) { return s->pidfd; }

const sbx_driver_ops sbxi_jail_driver_ops = {
    .name = "jail",
    .open = jail_open,
    .close = jail_close,
    .template_prepare = jail_template_prepare,
    .template_release = jail_template_release,
    .golden_build = jail_golden_build,
    .golden_release = jail_golden_release,
    .clone = jail_clone,
    .connect = jail_connect,
    .pause = jail_pause,
    .resume = jail_resume,
    .snapshot = jail_snapshot,
    .restore = jail_restore,
    .is_paused = jail_is_paused,
    .pause_keeps = "memory",
    .image_keeps = "filesystem",
    .stats = jail_stats,
    .wait = jail_wait,
    .destroy = jail_destroy,
    .reconcile = jail_reconcile,
    .pidfd = jail_pidfd,
};
