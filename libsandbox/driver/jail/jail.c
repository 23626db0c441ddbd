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

int jail_start(jail_driver *jd, const sbx_layers *layers, const sbx_clone_spec *spec, const char *upper_dir,
                      sbx_instance **out, sbx_error *err) {
  *out = NULL;
  const sbxi_clone_spec *hook = sbxi_clone_spec_of(spec);
  int rc = sbxi_check_id(spec->id, err);
  if (rc < 0) return rc;
  if (spec->net != SBX_NET_NONE) return sbx_err(err, SBX_E_UNSUPPORTED, "jail: only net=none is available");
  if (!hook->init_argv && jd->silkd_fd < 0) return sbx_err(err, SBX_E_INVAL, "jail: no silkd_path configured");
  if (hook->init_argv && (!hook->init_argv[0] || hook->init_argv[0][0] != '/'))
    return sbx_err(err, SBX_E_INVAL, "jail: init_argv[0] must be an absolute path");
  const sbx_size_tier *size = spec->size ? spec->size : sbx_size_tier_get("small");
  const char *id = spec->id;

  if (mkdirat(jd->run_dirfd, id, 0700) < 0) {
    if (errno == EEXIST) return sbx_err(err, SBX_E_EXISTS, "sandbox %s already exists", id);
    return sbx_err_os(err, errno, "mkdir %s/%s", jd->run_dir, id);
  }
  char dir[PATH_MAX];
  if ((rc = sbxi_path_fmt(dir, sizeof dir, err, "%s/%s", jd->run_dir, id)) < 0) {
    sbxi_rm_rf_at(jd->run_dirfd, id, NULL);
    return rc;
  }
  int dfd = openat(jd->run_dirfd, id, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0 || mkdirat(dfd, "root", 0755) < 0 || mkdirat(dfd, "rw", 0700) < 0) {
    rc = sbx_err_os(err, errno, "mkdir in %s", dir);
    if (dfd >= 0) close(dfd);
    sbxi_rm_rf_at(jd->run_dirfd, id, NULL);
    return rc;
  }

  uint64_t t_start = sbx_now_ns(), t_clone = 0, t_exec = 0, t_attach = 0, t_go = 0;
  jail_plan *plan = sbx_calloc(1, sizeof *plan);
  sbx_instance *s = NULL;
  int lfd = -1, go[2] = {-1, -1}, rep[2] = {-1, -1};
  jail_nsfds ns = {-1, -1};
  bool cg_made = false;
  pid_t pid = -1;
  jail_plan_args pa = {layers, dir, upper_dir, size};
  if ((rc = jail_plan_build(plan, &pa, err)) < 0) goto fail;
  snprintf(plan->hostname, sizeof plan->hostname, "%s", spec->hostname ? spec->hostname : id);

  if (!hook->init_argv) {
    struct sockaddr_un sa;
    if ((rc = sock_path(jd, id, &sa, err)) < 0) goto fail;
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 128) < 0) {
      rc = sbx_err_os(err, errno, "agent socket %s", sa.sun_path);
      goto fail;
    }
  }
  /* go is a socket pair, not a pipe: a child that failed early has
   * closed its end, and send(MSG_NOSIGNAL) then fails instead of raising
   * SIGPIPE in the host process. */
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go) < 0 || pipe2(rep, O_CLOEXEC) < 0) {
    rc = sbx_err_os(err, errno, "pipe");
    goto fail;
  }
  plan->go_fd = go[0];
  plan->report_fd = rep[1];
  plan->listen_fd = lfd;
  plan->exec_fd = hook->init_argv ? -1 : jd->silkd_fd;
  for (int i = 0; i < 3; i++) plan->stdio[i] = spec->stdio[i];
  plan->devnull_fd = jd->devnull_fd;
  ns = jail_netpool_take(jd->netpool);
  bool pooled = ns.net >= 0;
  plan->net_fd = ns.net;
  plan->ipc_fd = ns.ipc;
  /* The cgroup namespace is entered by the child itself, once it is in
   * its cgroups (see setup.c). */
  plan->unshare_cgroup = true;
  plan->seccomp = &jd->seccomp;
  plan->keep_caps = jd->caps;
  plan->argv = (char *const *)(hook->init_argv ? hook->init_argv : silkd_argv);
  plan->envp = (char *const *)(hook->init_argv ? (hook->init_env ? hook->init_env : default_env) : silkd_env);

  t_clone = sbx_now_ns();
  /* A fork-like clone (no new stack): the child continues here on a copy
   * of our stack, as with fork, and never returns from jail_child. */
  unsigned long flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | SIGCHLD;
  if (ns.net < 0) flags |= CLONE_NEWNET;
  if (ns.ipc < 0) flags |= CLONE_NEWIPC;
  /* silkd comes from the zygote when there is one: the same setup, then
   * silkd's loop with no exec (zygote_serve.c). A zygote that died leaves
   * this clone to the exec path and is restarted at the next destroy. */
  bool zygote = false;
  if (jd->zygote && !hook->init_argv) {
    rc = jail_zygote_clone(jd->zygote, plan, flags & ~(unsigned long)SIGCHLD, &pid, err);
    if (rc < 0) goto fail;
    zygote = rc == 0;
  }
  if (!zygote) {
    pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
    if (pid < 0) {
      rc = sbx_err_os(err, errno, "clone");
      goto fail;
    }
    if (pid == 0) {
      close(go[1]);
      close(rep[0]);
      jail_child(plan);
    }
  }
  close(go[0]);
  go[0] = -1;
  close(rep[1]);
  rep[1] = -1;
  /* The child holds the namespaces now: ours are the last other references. */
  if (ns.net >= 0) close(ns.net);
  if (ns.ipc >= 0) close(ns.ipc);
  ns.net = ns.ipc = -1;

  s = sbx_calloc(1, sizeof *s);
  s->hdr.drv = &jd->base;
  snprintf(s->hdr.id, sizeof s->hdr.id, "%s", id);
  s->hdr.pid = pid;
  s->jd = jd;
  s->is_child = true;
  s->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (s->pidfd < 0) {
    rc = sbx_err_os(err, errno, "pidfd_open");
    goto fail;
  }
  /* The cgroups are made while the child builds its root on the other
   * core; it waits for go before anything of the workload runs. */
  if ((rc = jail_cgroup_create(jd->cg, id, size, err)) < 0) goto fail;
  cg_made = true;
  t_attach = sbx_now_ns();
  if ((rc = jail_cgroup_attach(jd->cg, id, pid, err)) < 0) goto fail;
  if (!hook->init_argv && (rc = exempt_from_oom(pid, err)) < 0) goto fail;
  t_go = sbx_now_ns();
  /* A child that failed its setup has already exited: its report says
   * why, which matters more than the failed send. */
  int go_errno = send(go[1], "g", 1, MSG_NOSIGNAL) == 1 ? 0 : errno;
  close(go[1]);
  go[1] = -1;
  /* Destroys refill the stock (see jail_destroy); only a burst of clones
   * that emptied it refills here, while the child finishes and silkd
   * starts. */
  if (jail_netpool_count(jd->netpool) == 0) jail_netpool_refill(jd->netpool);
  jail_report r;
  ssize_t n;
  do n = read(rep[0], &r, sizeof r);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof r && go_errno) {
    rc = sbx_err_os(err, go_errno, "start jail");
    goto fail;
  }
  if (n == (ssize_t)sizeof r) {
    rc = report_error(plan, &r, err);
    goto fail;
  }
  if (n != 0) {
    rc = sbx_err(err, SBX_E_INTERNAL, "jail setup: short report");
    goto fail;
  }
  close(rep[0]);
  rep[0] = -1;
  t_exec = sbx_now_ns();
  if (lfd >= 0) close(lfd); /* pid 1 holds it now */
  lfd = -1;

  /* The state file lets a restarted host find and re-identify pid 1. */
  char st[64];
  snprintf(st, sizeof st, "%d %llu\n", (int)pid, sbxi_proc_starttime(pid));
  int sfd = openat(dfd, "state", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (sfd < 0 || write(sfd, st, strlen(st)) != (ssize_t)strlen(st)) {
    rc = sbx_err_os(err, errno, "write state");
    if (sfd >= 0) close(sfd);
    goto fail;
  }
  close(sfd);
  /* ... and the layers it runs on, which its images stack on (layers.c). */
  if ((rc = jail_layers_save(dfd, layers, err)) < 0) goto fail;

  if (!hook->init_argv) {
    int afd = -1;
    int timeout = spec->ready_timeout_ms > 0 ? spec->ready_timeout_ms : 10000;
    rc = jd->base.ops->connect(s, &afd, err);
    if (rc == 0) rc = sbx_ready_probe(afd, timeout, err);
    if (afd >= 0) close(afd);
    if (rc < 0) {
      sbx_err_wrap(err, "sandbox %s not ready", id);
      goto fail;
    }
  }
  close(dfd);
  sbx_free(plan);
  /* The child's setup runs alongside "clone and cgroups"; "go to exec" is
   * what it still needed once the parent was done. */
  sbx_debug("jail %s: prepare %.0f us, clone and cgroups %.0f us (cgroup attach %.0f us), go to exec %.0f us, "
            "exec to ready %.0f us, pooled namespaces %s, zygote %s",
            id, (double)(t_clone - t_start) / 1e3, (double)(t_go - t_clone) / 1e3, (double)(t_go - t_attach) / 1e3,
            (double)(t_exec - t_go) / 1e3, (double)(sbx_now_ns() - t_exec) / 1e3, pooled ? "yes" : "no",
            zygote ? "yes" : "no");
  *out = s;
  return 0;

fail:
  if (pid > 0) {
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
  }
  if (s) {
    if (s->pidfd >= 0) close(s->pidfd);
    sbx_free(s);
  }
  for (int i = 0; i < 2; i++) {
    if (go[i] >= 0) close(go[i]);
    if (rep[i] >= 0) close(rep[i]);
  }
  if (lfd >= 0) close(lfd);
  if (ns.net >= 0) close(ns.net);
  if (ns.ipc >= 0) close(ns.ipc);
  close(dfd);
  if (cg_made) jail_cgroup_remove(jd->cg, id, NULL);
  sbxi_rm_rf_at(jd->run_dirfd, id, NULL);
  sbx_free(plan);
  /* No destroy follows a failed clone: replace what it took here. */
  jail_netpool_refill(jd->netpool);
  return rc;
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
