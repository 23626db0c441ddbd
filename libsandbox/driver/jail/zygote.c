/* The driver's side of the jail zygote (see zygote_serve.c): start it,
 * send it plans, restart it when it died.
 *
 * The zygote is an optimisation only: whenever it is missing (a silkd
 * without --zygote, a test's stand-in agent, SBX_JAIL_ZYGOTE=0) or dies,
 * the driver clones and execs silkd itself, as it did before. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "jail.h"

/* Generous: an ASan silkd takes tens of ms to start on a loaded machine. */
#define ZYG_HELLO_MS 10000
#define ZYG_REPLY_MS 10000

/* silkd's environment on the exec path (jail.c), which the children keep. */
static const char *const zyg_env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                      "HOME=/root", "SILKD_NET=none", NULL};

struct jail_zygote {
  pthread_mutex_t mu; /* one request at a time on the socket */
  int silkd_fd, devnull_fd; /* borrowed from the driver */
  int sock;                 /* -1: dead */
  pid_t pid;
  int failed_starts; /* restarts stop after a few: the exec path is there */
};
#define ZYG_MAX_FAILED_STARTS 3

static void zyg_kill(jail_zygote *z) {
  if (z->sock >= 0) close(z->sock);
  z->sock = -1;
  if (z->pid > 0) {
    /* It holds nothing to tidy up (the end of its socket alone would make
     * it exit): SIGKILL covers a wedged one too. */
    kill(z->pid, SIGKILL);
    while (waitpid(z->pid, NULL, 0) < 0 && errno == EINTR) {}
  }
  z->pid = -1;
}

static int zyg_spawn(jail_zygote *z, sbx_error *err) {
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) return sbx_err_os(err, errno, "socketpair");
  static const char *const argv[] = {"silkd", "--zygote", "fd:3", NULL};
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = fork();
  if (pid == 0) {
    /* Only system calls until the exec: the host may be threaded. Its
     * handlers do not survive the exec, the mask would: clear it. */
    /* stdio is /dev/null: each child gets its own from the plan, and a
     * silkd without the mode would only print its usage into the host's
     * log (the driver logs why there is no zygote). */
    if (dup2(sp[1], 3) < 0 || dup3(z->silkd_fd, 4, O_CLOEXEC) < 0 || dup2(z->devnull_fd, 0) < 0 ||
        dup2(z->devnull_fd, 1) < 0 || dup2(z->devnull_fd, 2) < 0)
      _exit(127);
    syscall(SYS_close_range, 5u, ~0u, 0u);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    syscall(SYS_execveat, 4, "", argv, zyg_env, AT_EMPTY_PATH);
    _exit(127);
  }
  int e = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  close(sp[1]);
  if (pid < 0) {
    close(sp[0]);
    return sbx_err_os(err, e, "fork zygote");
  }
  z->sock = sp[0];
  z->pid = pid;
  struct pollfd pfd = {sp[0], POLLIN, 0};
  jail_zyg_hello hello = {0}, want = {JAIL_ZYG_MAGIC, sizeof(jail_zyg_req), JAIL_OPS_MAX, JAIL_ARENA_MAX};
  int n;
  do n = poll(&pfd, 1, ZYG_HELLO_MS);
  while (n < 0 && errno == EINTR);
  if (n != 1 || read(sp[0], &hello, sizeof hello) != (ssize_t)sizeof hello ||
      memcmp(&hello, &want, sizeof want) != 0) {
    zyg_kill(z);
    return sbx_err(err, SBX_E_UNSUPPORTED, "silkd has no zygote mode of this driver's version");
  }
  return 0;
}

int jail_zygote_open(int silkd_fd, int devnull_fd, jail_zygote **out, sbx_error *err) {
  *out = NULL;
  jail_zygote *z = sbx_calloc(1, sizeof *z);
  pthread_mutex_init(&z->mu, NULL);
  z->silkd_fd = silkd_fd;
  z->devnull_fd = devnull_fd;
  z->sock = -1;
  z->pid = -1;
  int rc = zyg_spawn(z, err);
  if (rc < 0) {
    pthread_mutex_destroy(&z->mu);
    sbx_free(z);
    return rc;
  }
  *out = z;
  return 0;
}

void jail_zygote_close(jail_zygote *z) {
  if (!z) return;
  zyg_kill(z);
  pthread_mutex_destroy(&z->mu);
  sbx_free(z);
}

bool jail_zygote_alive(jail_zygote *z) {
  pthread_mutex_lock(&z->mu);
  bool alive = z->sock >= 0;
  pthread_mutex_unlock(&z->mu);
  return alive;
}

int jail_zygote_revive(jail_zygote *z, sbx_error *err) {
  pthread_mutex_lock(&z->mu);
  int rc = 0;
  if (z->sock < 0 && z->failed_starts >= ZYG_MAX_FAILED_STARTS)
    rc = sbx_err(err, SBX_E_UNSUPPORTED, "jail zygote: gave up after %d failed starts", z->failed_starts);
  else if (z->sock < 0 && (rc = zyg_spawn(z, err)) < 0)
    z->failed_starts++;
  pthread_mutex_unlock(&z->mu);
  return rc;
}

static uint32_t off_of(const jail_plan *p, const char *s) {
  if (s >= p->arena && s < p->arena + p->arena_len) return (uint32_t)(s - p->arena);
  return JAIL_ZYG_NOSTR; /* the "" literal of an unused field */
}

int jail_zygote_clone(jail_zygote *z, const jail_plan *p, unsigned long ns_flags, pid_t *pid, sbx_error *err) {
  *pid = -1;
  jail_zyg_req *h = sbx_calloc(1, sizeof *h);
  h->magic = JAIL_ZYG_MAGIC;
  h->nops = (uint32_t)p->nops;
  h->arena_len = (uint32_t)p->arena_len;
  h->nfilter = p->seccomp ? p->seccomp->len : 0;
  h->clone_flags = ns_flags;
  h->keep_caps = p->keep_caps;
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, 0); /* this thread's */
  h->nice = errno ? 0 : nice;
  if (sched_getaffinity(0, sizeof h->cpus, &h->cpus) < 0) CPU_ZERO(&h->cpus); /* empty: leave as is */
  h->unshare_cgroup = p->unshare_cgroup;
  snprintf(h->hostname, sizeof h->hostname, "%s", p->hostname);
  for (size_t i = 0; i < p->nops; i++) {
    const jail_op *op = &p->ops[i];
    h->ops[i] = (jail_zyg_op){(uint32_t)op->kind, off_of(p, op->src), off_of(p, op->target), off_of(p, op->data),
                              op->flags};
  }
  const int in[ZFD_COUNT] = {p->go_fd, p->report_fd, p->listen_fd, p->stdio[0], p->stdio[1],
                             p->stdio[2], p->devnull_fd, p->net_fd, p->ipc_fd};
  int fds[ZFD_COUNT], nfds = 0;
  for (int i = 0; i < ZFD_COUNT; i++)
    if (in[i] >= 0) {
      h->fdmask |= 1u << i;
      fds[nfds++] = in[i];
    }
  struct iovec iov[3] = {{h, sizeof *h},
                         {(void *)p->arena, p->arena_len},
                         {p->seccomp ? (void *)p->seccomp->filter : NULL, h->nfilter * sizeof(struct sock_filter)}};
  union {
    struct cmsghdr c;
    char buf[CMSG_SPACE(ZFD_COUNT * sizeof(int))];
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  struct msghdr m = {.msg_iov = iov, .msg_iovlen = 3, .msg_control = ctl.buf,
                     .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int))};
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
  memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));

  int rc = JAIL_ZYGOTE_GONE;
  jail_zyg_reply r;
  pthread_mutex_lock(&z->mu);
  if (z->sock >= 0 && sendmsg(z->sock, &m, MSG_NOSIGNAL) == (ssize_t)(sizeof *h + iov[1].iov_len + iov[2].iov_len)) {
    struct pollfd pfd = {z->sock, POLLIN, 0};
    int n;
    do n = poll(&pfd, 1, ZYG_REPLY_MS);
    while (n < 0 && errno == EINTR);
    ssize_t got = n == 1 ? recv(z->sock, &r, sizeof r, 0) : -1;
    if (got == (ssize_t)sizeof r) rc = 0;
  }
  /* A zygote that did not answer is dead or wedged: either way it is not
   * asked again; jail_zygote_revive starts a new one. */
  if (rc == JAIL_ZYGOTE_GONE && z->sock >= 0) zyg_kill(z);
  pthread_mutex_unlock(&z->mu);
  sbx_free(h);
  if (rc == JAIL_ZYGOTE_GONE) return rc;
  if (r.pid <= 0) return sbx_err_os(err, r.errnum ? r.errnum : EPROTO, "clone (zygote)");
  *pid = r.pid;
  return 0;
}
