/* The zygote's side: silkd --zygote runs this loop (see zygote.h).
 *
 * Each request carries a jail plan computed by the driver; the zygote
 * clones a child into the new namespaces, and the child runs exactly the
 * setup the exec path runs (jail_child_setup), then calls silkd's serving
 * loop in place of execve: glibc's start-up (dozens of trapped CPUID
 * instructions on a VM), the static constructors and the new address space
 * are paid once per driver instead of once per jail.
 *
 * The child is cloned with CLONE_PARENT, so it is the driver's child as on
 * the exec path: the driver waits for it, signals it and reaps it; the
 * zygote never sees it again. The zygote is single-threaded and holds
 * nothing but its socket to the driver; the child wipes the request it was
 * built from before it runs anything of silkd's (docs/security.md). */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "jailexec.h"

#define ZYG_FILTER_MAX 4096 /* BPF_MAXINSNS */

/* One request, received whole. Static: the zygote serves one at a time. */
static struct {
  jail_zyg_req h;
  char tail[JAIL_ARENA_MAX + ZYG_FILTER_MAX * sizeof(struct sock_filter)];
} req;
static size_t req_seen; /* the most of req any request has written */
static jail_plan plan;
static struct sock_fprog prog;

static const char *str_at(uint32_t off) {
  if (off == JAIL_ZYG_NOSTR) return "";
  if (off >= req.h.arena_len || !memchr(req.tail + off, '\0', req.h.arena_len - off)) return NULL;
  return req.tail + off;
}

/* At start we made ourselves what jail_child_setup makes of a child of
 * the driver: the leader of a session with no terminal (and we open none,
 * so it never gets one), default signal dispositions, nothing blocked. A
 * child then needs only a process group of its own (plan.from_zygote). */
static bool clean_start;

/* The driver is trusted (it made our socket); this catches a mismatch of
 * versions or a bug, so a malformed plan is refused rather than run. */
static int build_plan(size_t len, const int *fds) {
  const jail_zyg_req *h = &req.h;
  if (len < sizeof *h || h->magic != JAIL_ZYG_MAGIC || h->nops > JAIL_OPS_MAX || h->arena_len > JAIL_ARENA_MAX ||
      h->nfilter > ZYG_FILTER_MAX || len != sizeof *h + h->arena_len + h->nfilter * sizeof(struct sock_filter) ||
      !memchr(h->hostname, '\0', sizeof h->hostname) || fds[ZFD_GO] < 0 || fds[ZFD_REPORT] < 0 ||
      fds[ZFD_DEVNULL] < 0)
    return -EPROTO;
  /* Fail closed: never a child in the host's namespaces. pid, mount and
   * uts are always new; net and ipc are new or the pool's. */
  const uint64_t always = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS;
  if ((h->clone_flags & always) != always || (!(h->clone_flags & CLONE_NEWNET) && fds[ZFD_NET] < 0) ||
      (!(h->clone_flags & CLONE_NEWIPC) && fds[ZFD_IPC] < 0))
    return -EPROTO;
  memset(&plan, 0, offsetof(jail_plan, arena));
  plan.nops = h->nops;
  for (size_t i = 0; i < h->nops; i++) {
    const jail_zyg_op *z = &h->ops[i];
    jail_op *op = &plan.ops[i];
    if (z->kind > JOP_PIVOT) return -EPROTO;
    op->kind = (jail_op_kind)z->kind;
    op->flags = (unsigned long)z->flags;
    if (!(op->src = str_at(z->src)) || !(op->target = str_at(z->target)) || !(op->data = str_at(z->data)))
      return -EPROTO;
  }
  memcpy(plan.hostname, h->hostname, sizeof plan.hostname);
  plan.go_fd = fds[ZFD_GO];
  plan.report_fd = fds[ZFD_REPORT];
  plan.listen_fd = fds[ZFD_LISTEN];
  plan.exec_fd = -1;
  for (int i = 0; i < 3; i++) plan.stdio[i] = fds[ZFD_STDIN + i];
  plan.devnull_fd = fds[ZFD_DEVNULL];
  plan.net_fd = fds[ZFD_NET];
  plan.ipc_fd = fds[ZFD_IPC];
  plan.unshare_cgroup = h->unshare_cgroup != 0;
  plan.from_zygote = clean_start;
  plan.keep_caps = h->keep_caps;
  if (h->nfilter) {
    prog.len = (unsigned short)h->nfilter;
    prog.filter = (struct sock_filter *)(req.tail + h->arena_len);
    plan.seccomp = &prog;
  }
  return 0;
}

/* Where glibc keeps this thread's tid and robust list: a raw clone does
 * not update them as fork does, and the child goes on running glibc. */
static long tid_addr;
static void *robust_head;
static size_t robust_len;

static __attribute__((noreturn)) void child(int (*run)(void *), void *arg) {
  /* CLONE_CHILD_SETTID wrote our tid (1) where glibc reads it; the robust
   * list is per task and a clone starts with none. */
  syscall(SYS_set_robust_list, robust_head, robust_len);
  setpriority(PRIO_PROCESS, 0, req.h.nice);
  jail_child_setup(&plan);
  /* Nothing of the driver's other jails (paths, ids) stays in our memory.
   * Only what requests ever wrote: the rest of these ~170 KiB was never
   * touched, and wiping it would fault in private pages in every jail. */
  explicit_bzero(&req, req_seen);
  explicit_bzero(&plan, offsetof(jail_plan, arena));
#if defined(__x86_64__)
  /* Every child of one zygote starts with its stack protector value: a
   * fresh one keeps one jail's from telling another's. Set here, where
   * nothing on the stack is left to return through (this function and its
   * callers never return). Should getrandom fail (only before the kernel's
   * pool is ready), the inherited value stays. */
  uint64_t canary;
  if (getrandom(&canary, sizeof canary, GRND_NONBLOCK) == (ssize_t)sizeof canary) {
    canary &= ~(uint64_t)0xff; /* as glibc: a leading zero byte stops string overreads */
    __asm__ volatile("movq %0, %%fs:0x28" : : "r"(canary) : "memory");
  }
#endif
  prctl(PR_SET_NAME, "silkd", 0, 0, 0);
  jail_child_ready();
  _exit(run(arg));
}

/* Makes us what jail_child_setup makes of a child of the driver (see
 * clean_start); false if any of it failed, and then children do it all. */
static bool start_clean(void) {
  sigset_t none;
  sigemptyset(&none);
  bool ok = sigprocmask(SIG_SETMASK, &none, NULL) == 0;
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig == SIGKILL || sig == SIGSTOP || (sig >= 32 && sig < SIGRTMIN)) continue; /* fixed, or glibc's own */
    if (signal(sig, SIG_DFL) == SIG_ERR) ok = false;
  }
  return ok && setsid() >= 0;
}

/* One request: its length, and its fds in ZFD order (-1: not sent). < 0
 * on a malformed one (its fds closed); 0 at the end of the stream. fds is
 * all -1 on every return that received none, so the caller's close loop
 * never closes a descriptor it does not own (recvmsg may fail with EPROTO,
 * which the caller treats as a malformed request). */
static ssize_t recv_req(int fd, int fds[ZFD_COUNT]) {
  for (int i = 0; i < ZFD_COUNT; i++) fds[i] = -1;
  union {
    struct cmsghdr c;
    char buf[CMSG_SPACE(ZFD_COUNT * sizeof(int))];
  } ctl;
  struct iovec iov = {&req, sizeof req};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  ssize_t n;
  do n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return n < 0 ? -errno : 0;
  if ((size_t)n > req_seen) req_seen = (size_t)n;
  int got[ZFD_COUNT], ngot = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k && ngot < ZFD_COUNT; i++)
      memcpy(&got[ngot++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
  }
  bool ok = !(m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) && n >= (ssize_t)sizeof req.h &&
            __builtin_popcount(req.h.fdmask & ((1u << ZFD_COUNT) - 1)) == ngot && (req.h.fdmask >> ZFD_COUNT) == 0;
  for (int i = 0, used = 0; i < ZFD_COUNT; i++) fds[i] = ok && (req.h.fdmask & (1u << i)) ? got[used++] : -1;
  if (ok) return n;
  for (int i = 0; i < ngot; i++) close(got[i]);
  return -EPROTO;
}

int sbxi_jail_zygote_serve(int fd, int (*run)(void *), void *arg) {
  if (prctl(PR_GET_TID_ADDRESS, &tid_addr, 0, 0, 0) < 0 || !tid_addr) return -errno;
  if (syscall(SYS_get_robust_list, 0, &robust_head, &robust_len) < 0) return -errno;
  clean_start = start_clean();
  const jail_zyg_hello hello = {JAIL_ZYG_MAGIC, sizeof(jail_zyg_req), JAIL_OPS_MAX, JAIL_ARENA_MAX};
  if (write(fd, &hello, sizeof hello) != (ssize_t)sizeof hello) return -errno;
  for (;;) {
    int fds[ZFD_COUNT];
    ssize_t n = recv_req(fd, fds);
    if (n == 0) return 0;
    if (n < 0 && n != -EPROTO) return (int)n;
    jail_zyg_reply r = {0, 0};
    int rc = n < 0 ? (int)n : build_plan((size_t)n, fds);
    if (rc == 0) {
      unsigned long flags = (unsigned long)req.h.clone_flags &
                            (CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWNET | CLONE_NEWIPC);
      /* CLONE_CHILD_SETTID: the child's glibc reads its tid where it is
       * written (see tid_addr). */
      /* The clone and the child run where the asking thread would have:
       * background provisioning stays off the CPUs kept for claims. */
      if (CPU_COUNT(&req.h.cpus) > 0) sched_setaffinity(0, sizeof req.h.cpus, &req.h.cpus);
      pid_t pid = (pid_t)syscall(SYS_clone, flags | CLONE_PARENT | CLONE_CHILD_SETTID, NULL, NULL, tid_addr, NULL);
      if (pid == 0) child(run, arg);
      if (pid < 0) rc = -errno;
      r.pid = pid > 0 ? pid : 0;
    }
    r.errnum = rc < 0 ? -rc : 0;
    for (int i = 0; i < ZFD_COUNT; i++)
      if (fds[i] >= 0) close(fds[i]);
    if (send(fd, &r, sizeof r, MSG_NOSIGNAL) != (ssize_t)sizeof r) return -errno;
  }
}
