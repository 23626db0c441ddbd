/* A few fresh network (and IPC) namespaces made ahead, off the clone path.
 *
 * Creating a network namespace is the largest kernel cost of a clone here
 * (about 0.4-0.5 ms of wall time, most of it registering lo and its
 * sysctls), and it depends on nothing about the sandbox: an empty namespace
 * with lo up is what net=none means. So the driver keeps a small stock and
 * a clone joins one with setns instead of asking clone for CLONE_NEWNET.
 * An IPC namespace (0.15 ms) is just as generic and rides along.
 * Each namespace is handed to exactly one sandbox and never returns to the
 * stock: take() removes it, the caller closes its fd once the child has
 * joined it, and the namespace dies with the sandbox's last process as it
 * would have otherwise. When the stock is empty the clone makes its own, so
 * the pool only ever saves time.
 *
 * No thread: the stock is refilled by destroy while the kernel tears the
 * jail down (time the caller spends waiting anyway), and by a clone that
 * found it empty while it waits for its child. A namespace is made by a
 * short-lived vfork-style child (shared memory and fd table, so its fd lands
 * in ours) that only opens its namespace and brings lo up: the calling
 * thread itself never changes namespace. */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "jail.h"

#define NETPOOL_MAX 8
#define NETPOOL_STACK (64 * 1024)

struct jail_netpool {
  pthread_mutex_t mu;
  jail_nsfds fds[NETPOOL_MAX];
  size_t n, want;
};

typedef struct mk_result {
  int net, ipc;
} mk_result;

/* Runs in the vfork-style child, in its new network namespace, on its own
 * stack while the parent waits: raw system calls only, nothing that a
 * sanitizer would track on a stack it does not know. */
__attribute__((no_sanitize_address, no_sanitize("undefined"))) static int mk_child(void *arg) {
  mk_result *r = arg;
  int ipc = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/ns/ipc", O_RDONLY | O_CLOEXEC);
  int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  int s = fd < 0 ? -1 : (int)syscall(SYS_socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct ifreq ifr;
  __builtin_memset(&ifr, 0, sizeof ifr);
  ifr.ifr_name[0] = 'l';
  ifr.ifr_name[1] = 'o';
  long rc = s < 0 ? -1 : syscall(SYS_ioctl, s, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    rc = syscall(SYS_ioctl, s, SIOCSIFFLAGS, &ifr);
  }
  if (s >= 0) syscall(SYS_close, s);
  if ((rc != 0 || ipc < 0) && fd >= 0) {
    syscall(SYS_close, fd);
    fd = -1;
  }
  if (fd < 0 && ipc >= 0) {
    syscall(SYS_close, ipc);
    ipc = -1;
  }
  r->net = fd;
  r->ipc = ipc;
  syscall(SYS_exit, 0);
  return 0;
}

/* One fresh pair of namespaces (network with lo up, IPC), or a negative
 * errno. */
static int make_one(jail_nsfds *out) {
  void *stack = mmap(NULL, NETPOOL_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -errno;
  mk_result r = {-1, -1};
  /* As posix_spawn does: the helper shares our memory, so none of the host
   * process's signal handlers may run in it; it inherits this mask. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  /* Exit signal 0: no SIGCHLD for a host process's handler, and a
   * waitpid(-1) elsewhere does not reap it (only __WCLONE does). */
  pid_t pid = clone(mk_child, (char *)stack + NETPOOL_STACK,
                    CLONE_NEWNET | CLONE_NEWIPC | CLONE_VM | CLONE_FILES | CLONE_VFORK, &r);
  int e = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (pid > 0)
    while (waitpid(pid, NULL, __WCLONE) < 0 && errno == EINTR) {}
  munmap(stack, NETPOOL_STACK);
  if (pid < 0) return -e;
  if (r.net < 0) return -EIO;
  out->net = r.net;
  out->ipc = r.ipc;
  return 0;
}

static void close_pair(jail_nsfds *p) {
  if (p->net >= 0) close(p->net);
  if (p->ipc >= 0) close(p->ipc);
  p->net = p->ipc = -1;
}

int jail_netpool_open(size_t size, jail_netpool **out, sbx_error *err) {
  *out = NULL;
  if (size == 0) return 0;
  jail_netpool *np = sbx_calloc(1, sizeof *np);
  np->want = size < NETPOOL_MAX ? size : NETPOOL_MAX;
  pthread_mutex_init(&np->mu, NULL);
  int rc = make_one(&np->fds[0]);
  if (rc < 0) {
    pthread_mutex_destroy(&np->mu);
    sbx_free(np);
    return sbx_err_os(err, -rc, "jail: make a network namespace");
  }
  np->n = 1;
  jail_netpool_refill(np);
  *out = np;
  return 0;
}

jail_nsfds jail_netpool_take(jail_netpool *np) {
  jail_nsfds p = {-1, -1};
  if (!np) return p;
  pthread_mutex_lock(&np->mu);
  if (np->n > 0) p = np->fds[--np->n];
  pthread_mutex_unlock(&np->mu);
  return p;
}

void jail_netpool_refill(jail_netpool *np) {
  if (!np) return;
  for (;;) {
    pthread_mutex_lock(&np->mu);
    bool more = np->n < np->want;
    pthread_mutex_unlock(&np->mu);
    if (!more) return;
    jail_nsfds p;
    if (make_one(&p) < 0) return; /* clones make their own meanwhile */
    pthread_mutex_lock(&np->mu);
    if (np->n < np->want) {
      np->fds[np->n++] = p;
      p.net = p.ipc = -1;
    }
    pthread_mutex_unlock(&np->mu);
    if (p.net >= 0) {
      close_pair(&p); /* another caller filled it first */
      return;
    }
  }
}

size_t jail_netpool_count(jail_netpool *np) {
  if (!np) return 0;
  pthread_mutex_lock(&np->mu);
  size_t n = np->n;
  pthread_mutex_unlock(&np->mu);
  return n;
}

void jail_netpool_close(jail_netpool *np) {
  if (!np) return;
  /* Closing the last reference is what destroys a namespace. */
  for (size_t i = 0; i < np->n; i++) close_pair(&np->fds[i]);
  pthread_mutex_destroy(&np->mu);
  sbx_free(np);
}
