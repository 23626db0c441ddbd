/* child.c - spawning children, the §7.1 environment, and reaping.
 *
 * Reaping is one waitpid(-1) loop on SIGCHLD: as pid 1 of a jail every
 * orphan in the sandbox re-parents to us, and a pid we do not know is simply
 * collected so no zombie is left.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "silkd.h"
#include "core/path.h"

int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return -1;
  return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* ---- child watch list ---- */

struct watch {
  pid_t pid;
  child_cb cb;
  void *arg;
  struct watch *next;
};
static struct watch *watches;

void child_watch(pid_t pid, child_cb cb, void *arg) {
  struct watch *w = sbx_calloc(1, sizeof *w);
  w->pid = pid;
  w->cb = cb;
  w->arg = arg;
  w->next = watches;
  watches = w;
}

void child_unwatch(pid_t pid) {
  for (struct watch **pw = &watches; *pw; pw = &(*pw)->next) {
    if ((*pw)->pid == pid) {
      struct watch *w = *pw;
      *pw = w->next;
      sbx_free(w);
      return;
    }
  }
}

void child_reap_all(void) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      if (pid < 0 && errno == EINTR) continue;
      return;
    }
    for (struct watch **pw = &watches; *pw; pw = &(*pw)->next) {
      if ((*pw)->pid == pid) {
        struct watch *w = *pw;
        *pw = w->next;
        child_cb cb = w->cb;
        void *arg = w->arg;
        sbx_free(w);
        cb(arg, pid, status);
        break;
      }
    }
  }
}

int child_exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

/* ---- environment (§7.1, §7.3) ---- */

static const char *const proxy_names[] = {"http_proxy", "https_proxy", "no_proxy",
                                          "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"};
static char *proxy_values[6];

void env_init(void) {
  for (size_t i = 0; i < 6; i++) {
    const char *v = getenv(proxy_names[i]);
    if (v && *v) proxy_values[i] = sbx_strdup(v);
  }
}

static int has_nic = -1;
static int lane_direct = -1;

bool net_has_nic(void) {
  if (has_nic >= 0) return has_nic;
  const char *net = getenv("SILKD_NET");
  if (net && strcmp(net, "egress") == 0) return (has_nic = 1);
  if (net && strcmp(net, "none") == 0) return (has_nic = 0);
  int dfd = open("/sys/class/net", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return (has_nic = 1);
  int fd = dup(dfd);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  has_nic = 0;
  if (d) {
    struct dirent *de;
    while ((de = readdir(d))) {
      if (de->d_name[0] == '.') continue;
      char p[512];
      struct stat st;
      if (sbxi_path_fmt(p, sizeof p, NULL, "%s/device", de->d_name) == 0 && fstatat(dfd, p, &st, 0) == 0) has_nic = 1;
    }
    closedir(d);
  }
  close(dfd);
  return has_nic;
}

bool net_has_direct_route(void) {
  if (!net_has_nic()) return false;
  if (lane_direct >= 0) return lane_direct;
  int fd = open("/etc/silkd-lane", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true; /* absent: direct, and ask again next time */
  char b[16] = {0};
  ssize_t n = read(fd, b, 8);
  close(fd);
  char *s = b;
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
  while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
  lane_direct = strcmp(s, "relay") != 0;
  return lane_direct;
}

struct envv {
  char **v;
  size_t len;
};

static void envv_set(struct envv *e, const char *key, const char *value) {
  size_t kl = strlen(key);
  char *entry = sbx_malloc(kl + strlen(value) + 2);
  sprintf(entry, "%s=%s", key, value);
  for (size_t i = 0; i < e->len; i++) {
    if (strncmp(e->v[i], key, kl) == 0 && e->v[i][kl] == '=') {
      sbx_free(e->v[i]);
      e->v[i] = entry;
      return;
    }
  }
  e->v = sbx_reallocarray(e->v, e->len + 2, sizeof *e->v);
  e->v[e->len++] = entry;
  e->v[e->len] = NULL;
}

char **env_build(const sbx_wire_map *req_env, const char *home, const char *user) {
  struct envv e = {0};
  envv_set(&e, "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  envv_set(&e, "TERM", "xterm-256color");
  if (!net_has_direct_route()) {
    for (size_t i = 0; i < 6; i++)
      if (proxy_values[i]) envv_set(&e, proxy_names[i], proxy_values[i]);
  }
  if (req_env)
    for (size_t i = 0; i < req_env->len; i++) envv_set(&e, req_env->items[i].key, req_env->items[i].value);
  if (home) envv_set(&e, "HOME", home);
  if (user) envv_set(&e, "USER", user);
  return e.v;
}

/* §7.2: the daemon's whole environment, minus the proxy variables when
 * the guest has a direct route (git and language servers). */
char **env_inherit(void) {
  extern char **environ;
  struct envv e = {0};
  bool direct = net_has_direct_route();
  for (char **p = environ; p && *p; p++) {
    const char *eq = strchr(*p, '=');
    if (!eq) continue;
    bool proxy = false;
    for (size_t i = 0; direct && i < 6; i++)
      proxy |= strlen(proxy_names[i]) == (size_t)(eq - *p) && strncmp(*p, proxy_names[i], (size_t)(eq - *p)) == 0;
    if (proxy) continue;
    e.v = sbx_reallocarray(e.v, e.len + 2, sizeof *e.v);
    e.v[e.len++] = sbx_strdup(*p);
    e.v[e.len] = NULL;
  }
  if (!e.v) e.v = sbx_calloc(1, sizeof *e.v);
  return e.v;
}

char **envp_set(char **envp, const char *key, const char *value) {
  struct envv e = {envp, 0};
  while (envp && envp[e.len]) e.len++;
  envv_set(&e, key, value);
  return e.v;
}

void envp_free(char **envp) {
  if (!envp) return;
  for (char **p = envp; *p; p++) sbx_free(*p);
  sbx_free(envp);
}

bool env_keys_valid(const sbx_wire_map *env, char *msg, size_t msglen) {
  for (size_t i = 0; env && i < env->len; i++) {
    const char *k = env->items[i].key;
    if (!*k || strchr(k, '=')) {
      snprintf(msg, msglen, "invalid env name \"%s\"", k);
      return false;
    }
  }
  return true;
}

/* ---- users ---- */

int user_lookup(const char *name, uid_t *uid, gid_t *gid, char **home) {
  FILE *f = fopen("/etc/passwd", "re");
  if (!f) return -1;
  struct passwd pw, *res;
  char buf[4096];
  int rc = -1;
  while (fgetpwent_r(f, &pw, buf, sizeof buf, &res) == 0) {
    if (strcmp(pw.pw_name, name) == 0) {
      *uid = pw.pw_uid;
      *gid = pw.pw_gid;
      *home = sbx_strdup(pw.pw_dir ? pw.pw_dir : "/");
      rc = 0;
      break;
    }
  }
  fclose(f);
  return rc;
}

/* ---- spawning ---- */

/* Only async-signal-safe calls below until execve: the daemon has threads.
 * The vfork child shares our memory and we stay suspended until it execs or
 * exits, so it reports a failure by storing it in the parent's frame (as
 * glibc's posix_spawn does) instead of through a pipe. */
struct spawn_fail {
  volatile int stage, err;
};

static void child_fail(struct spawn_fail *f, int stage, int err) {
  f->err = err;
  f->stage = stage;
  _exit(127);
}

static const char *env_get(char **envp, const char *key) {
  size_t kl = strlen(key);
  for (char **p = envp; p && *p; p++)
    if (strncmp(*p, key, kl) == 0 && (*p)[kl] == '=') return *p + kl + 1;
  return NULL;
}

static void exec_search(const char *const *argv, char **envp) {
  const char *file = argv[0];
  if (strchr(file, '/')) {
    execve(file, (char *const *)argv, envp);
    return;
  }
  const char *path = env_get(envp, "PATH");
  if (!path) path = "/usr/bin:/bin";
  size_t fl = strlen(file);
  bool eacces = false;
  char buf[4096];
  for (const char *p = path;; p++) {
    const char *end = strchr(p, ':');
    size_t dl = end ? (size_t)(end - p) : strlen(p);
    if (dl + fl + 2 <= sizeof buf) {
      memcpy(buf, p, dl);
      size_t off = dl;
      if (dl == 0) buf[off++] = '.';
      buf[off++] = '/';
      memcpy(buf + off, file, fl + 1);
      execve(buf, (char *const *)argv, envp);
      if (errno == EACCES) eacces = true;
      else if (errno != ENOENT && errno != ENOTDIR) return;
    }
    if (!end) break;
    p = end;
  }
  errno = eacces ? EACCES : ENOENT;
}

/* A jail's host makes pid 1 exempt from the OOM killer (oom_score_adj
 * -1000), which a child inherits: every workload goes back to 0, so that
 * when a sandbox runs out of memory the kernel kills a workload, never
 * silkd. Raising the value needs no privilege; elsewhere it is already 0.
 * Async-signal-safe: it runs in the vfork child. */
static void child_reset_oom_score(void) {
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = write(fd, "0", 1);
  (void)n;
  close(fd);
}

int spawn_child(const struct spawn_opts *o, pid_t *pidp, sbx_error *err) {
  /* Not a local: the compiler does not know the child writes our stack, and
   * proved a local's 0 unchanged. Only the loop thread spawns. */
  static struct spawn_fail fail;
  fail.stage = fail.err = 0;
  /* vfork: the daemon's page tables are not copied, which is most of the
   * cost of a short exec. The child only touches its own locals, fail and
   * fds before execve or _exit. */
  pid_t pid = vfork();
  if (pid < 0) return sbx_err_os(err, errno, "spawn");
  if (pid == 0) {
    /* execve resets caught signals; ignored ones (SIGPIPE) we reset here. */
    sigset_t none;
    sigemptyset(&none);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (o->setsid_ctty) {
      if (setsid() < 0) child_fail(&fail, 1, errno);
    } else if (o->new_pgrp) {
      setpgid(0, 0);
    }
    /* Move the three fds above 2 first so dup2 cannot clobber one another. */
    int fds[3] = {o->fd0, o->fd1, o->fd2};
    for (int i = 0; i < 3; i++) {
      int nfd = fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
      if (nfd < 0) child_fail(&fail, 1, errno);
      fds[i] = nfd;
    }
    for (int i = 0; i < 3; i++)
      if (dup2(fds[i], i) < 0) child_fail(&fail, 1, errno);
    if (o->setsid_ctty && ioctl(0, TIOCSCTTY, 0) < 0) child_fail(&fail, 1, errno);
    /* Every other daemon descriptor is closed by exec. */
    syscall(SYS_close_range, 3, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */);
    child_reset_oom_score();
    /* Raw syscalls: glibc's setuid family would broadcast the change to
     * every thread of the daemon, whose memory this vfork child shares. */
    if (o->has_user) {
      if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setgid, o->gid) < 0 || syscall(SYS_setuid, o->uid) < 0)
        child_fail(&fail, 1, errno);
      /* The uid change set the dumpable flag of the memory we share with
       * silkd to fs.suid_dumpable, which a host may have at 1: silkd stays
       * non-dumpable (main.c). */
      prctl(PR_SET_DUMPABLE, 0);
    }
    if (o->cwd && chdir(o->cwd) < 0) child_fail(&fail, 2, errno);
    exec_search(o->argv, o->envp);
    child_fail(&fail, 3, errno);
  }
  if (fail.stage) {
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    /* the directory is named: a bad cwd and a missing program are both ENOENT */
    if (fail.stage == 2) sbx_err_os(err, fail.err, "spawn: cwd %s", o->cwd);
    else sbx_err_os(err, fail.err, "spawn");
    return err ? err->code : SBX_E_OS;
  }
  *pidp = pid;
  return 0;
}

const char *silkd_shell(void) {
  static const char *const bash[] = {"/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"};
  for (size_t i = 0; i < sizeof bash / sizeof *bash; i++)
    if (access(bash[i], X_OK) == 0) return bash[i];
  return "/bin/sh";
}
