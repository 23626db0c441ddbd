/* The child side of a jail: from clone(2) to execve(2).
 *
 * Runs in a copy of the parent's address space that may have been forked
 * from a threaded process, so it only makes system calls on the prepared
 * plan (see jail.h). Each step either succeeds or the child reports it and
 * exits: a half-built jail never runs anything. */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "jailexec.h"
#include "util/util.h"

/* Negative report steps: the fixed part of the sequence around the ops. */
enum {
  STEP_GO = -1,
  STEP_CGROUPNS = -2,
  STEP_PRIVATE = -3,
  STEP_HOSTNAME = -4,
  STEP_LO = -5,
  STEP_FDS = -6,
  STEP_NNP = -7,
  STEP_CAPS = -8,
  STEP_SECCOMP = -9,
  STEP_EXEC = -10,
  STEP_NETNS = -11,
};

const char *jail_step_name(int step) {
  switch (step) {
  case STEP_GO: return "wait for parent";
  case STEP_CGROUPNS: return "unshare cgroup namespace";
  case STEP_PRIVATE: return "make mounts private";
  case STEP_HOSTNAME: return "sethostname";
  case STEP_LO: return "bring up lo";
  case STEP_FDS: return "arrange fds";
  case STEP_NNP: return "no_new_privs";
  case STEP_CAPS: return "drop capabilities";
  case STEP_SECCOMP: return "load seccomp filter";
  case STEP_EXEC: return "exec";
  case STEP_NETNS: return "join pooled namespace";
  default: return "setup";
  }
}

const char *jail_op_name(jail_op_kind kind) {
  switch (kind) {
  case JOP_TMPFS_HOST: return "tmpfs";
  case JOP_MKDIR_HOST: return "mkdir";
  case JOP_OVERLAY_ROOT: return "overlay root";
  case JOP_OVERLAY: return "overlay";
  case JOP_TMPFS: return "tmpfs";
  case JOP_DEVPTS: return "devpts";
  case JOP_PROC: return "proc";
  case JOP_BIND_DEV: return "bind device";
  case JOP_MASK: return "mask";
  case JOP_MASK_DIR: return "mask dir";
  case JOP_RO: return "read-only";
  case JOP_SYMLINK: return "symlink";
  case JOP_PIVOT: return "pivot_root";
  }
  return "op";
}

static int report_fd = -1;
static int upper_fd = -1; /* the writable layer's tmpfs, O_PATH */

static __attribute__((noreturn)) void fail(int step, int errnum, const char *what) {
  jail_report r;
  memset(&r, 0, sizeof r);
  r.op = step;
  r.errnum = errnum;
  if (what) {
    size_t n = strlen(what);
    if (n >= sizeof r.what) n = sizeof r.what - 1;
    memcpy(r.what, what, n);
  }
  if (report_fd >= 0) {
    ssize_t ignored = write(report_fd, &r, sizeof r);
    (void)ignored;
  }
  _exit(127);
}

/* "/proc/self/fd/N" without stdio. */
static void fd_path(char buf[32], int fd) {
  char digits[12];
  int n = 0;
  do {
    digits[n++] = (char)('0' + fd % 10);
    fd /= 10;
  } while (fd > 0);
  memcpy(buf, "/proc/self/fd/", 14);
  for (int i = 0; i < n; i++) buf[14 + i] = digits[n - 1 - i];
  buf[14 + n] = '\0';
}

/* mkdir -p beneath root, one component at a time through fds, so no
 * component is ever resolved through a symlink; then an O_PATH fd on the
 * final directory. */
static int ensure_dir(int root, const char *rel) {
  char part[JAIL_STR_MAX];
  size_t n = strlen(rel);
  if (n >= sizeof part) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(part, rel, n + 1);
  return sbxi_mkdirs_beneath(root, part, 0755);
}

/* An empty regular file beneath root to bind a device or /dev/null onto. */
static int ensure_file(int root, const char *rel) {
  int fd = sbxi_open_beneath(root, rel, O_WRONLY | O_CREAT | O_NOCTTY);
  if (fd < 0) return -1;
  close(fd);
  return sbxi_open_beneath(root, rel, O_PATH);
}

static void run_op(const jail_plan *p, size_t i, int *rootfd) {
  const jail_op *op = &p->ops[i];
  char tpath[32], spath[32];
  int tfd = -1;
  int step = (int)i;
  switch (op->kind) {
  case JOP_TMPFS_HOST:
    if (mount("tmpfs", op->target, "tmpfs", op->flags, op->data) < 0) fail(step, errno, op->target);
    /* Kept by pid 1 (JAIL_UPPER_FD): the host's only way to this tmpfs. */
    upper_fd = open(op->target, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (upper_fd < 0) fail(step, errno, op->target);
    return;
  case JOP_MKDIR_HOST:
    if (mkdir(op->target, 0755) < 0 && errno != EEXIST) fail(step, errno, op->target);
    return;
  case JOP_OVERLAY_ROOT:
    if (mount("overlay", op->target, "overlay", op->flags, op->data) < 0) fail(step, errno, op->target);
    *rootfd = open(op->target, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (*rootfd < 0) fail(step, errno, op->target);
    return;
  case JOP_PIVOT:
    /* pivot_root(".", ".") stacks the old root on the new one; detaching
     * it leaves no path back to the host's file systems. */
    if (fchdir(*rootfd) < 0) fail(step, errno, "fchdir new root");
    if (syscall(SYS_pivot_root, ".", ".") < 0) fail(step, errno, "pivot_root");
    if (umount2(".", MNT_DETACH) < 0) fail(step, errno, "detach old root");
    if (chdir("/") < 0) fail(step, errno, "chdir /");
    close(*rootfd);
    *rootfd = -1;
    return;
  default:
    break;
  }
  if (*rootfd < 0) fail(step, EINVAL, "no root yet");
  int root = *rootfd;
  bool optional = op->kind == JOP_MASK || op->kind == JOP_MASK_DIR || op->kind == JOP_RO;
  switch (op->kind) {
  case JOP_OVERLAY:
  case JOP_TMPFS:
  case JOP_DEVPTS:
  case JOP_PROC:
    tfd = ensure_dir(root, op->target);
    break;
  case JOP_BIND_DEV:
    tfd = ensure_file(root, op->target);
    break;
  case JOP_SYMLINK: {
    /* the parent of a symlink op is always a directory this plan made */
    if (symlinkat(op->src, root, op->target) < 0 && errno != EEXIST) fail(step, errno, op->target);
    return;
  }
  default:
    tfd = sbxi_open_beneath(root, op->target, O_PATH);
    if (tfd < 0 && errno == ENOENT && optional) return;
    break;
  }
  if (tfd < 0) fail(step, errno, op->target);
  fd_path(tpath, tfd);
  int rc = 0;
  switch (op->kind) {
  case JOP_OVERLAY:
    rc = mount("overlay", tpath, "overlay", op->flags, op->data);
    break;
  case JOP_TMPFS:
  case JOP_MASK_DIR:
    rc = mount("tmpfs", tpath, "tmpfs", op->flags, op->data);
    break;
  case JOP_DEVPTS:
    rc = mount("devpts", tpath, "devpts", op->flags, op->data);
    break;
  case JOP_PROC:
    rc = mount("proc", tpath, "proc", op->flags, NULL);
    break;
  case JOP_BIND_DEV:
    rc = mount(op->src, tpath, NULL, MS_BIND, NULL);
    break;
  case JOP_MASK: {
    /* one O_PATH fd on the jail's /dev/null serves every mask (closed with
     * the rest before exec) */
    static int null_fd = -1;
    if (null_fd < 0 && (null_fd = sbxi_open_beneath(root, "dev/null", O_PATH)) < 0) fail(step, errno, "dev/null");
    fd_path(spath, null_fd);
    rc = mount(spath, tpath, NULL, MS_BIND, NULL);
    break;
  }
  case JOP_RO:
    rc = mount(tpath, tpath, NULL, MS_BIND | MS_REC, NULL);
    if (rc == 0) {
      /* the fd still names what lay under the bind: reopen to reach it */
      close(tfd);
      tfd = sbxi_open_beneath(root, op->target, O_PATH);
      if (tfd < 0) fail(step, errno, op->target);
      fd_path(tpath, tfd);
      rc = mount(NULL, tpath, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | op->flags, NULL);
    }
    break;
  default:
    rc = -1;
    errno = EINVAL;
  }
  if (rc < 0) fail(step, errno, op->target);
  close(tfd);
}

static void lo_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) fail(STEP_LO, errno, "socket");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  memcpy(ifr.ifr_name, "lo", 3);
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) fail(STEP_LO, errno, "SIOCGIFFLAGS");
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) fail(STEP_LO, errno, "SIOCSIFFLAGS");
  close(s);
}

/* Move the fds pid 1 keeps to 0..4 and close every other one, so nothing
 * of the host (the parent's sockets, files, the other jails' fds) leaks in.
 * Everything goes through high copies first so the targets cannot clash. */
static void arrange_fds(const jail_plan *p) {
  enum { HI = 1000 };
  int in[3], lfd = -1, xfd = -1, rfd;
  for (int i = 0; i < 3; i++) {
    int src = p->stdio[i] >= 0 ? p->stdio[i] : p->devnull_fd;
    in[i] = fcntl(src, F_DUPFD_CLOEXEC, HI);
    if (in[i] < 0) fail(STEP_FDS, errno, "dup stdio");
  }
  if (p->listen_fd >= 0 && (lfd = fcntl(p->listen_fd, F_DUPFD_CLOEXEC, HI)) < 0) fail(STEP_FDS, errno, "dup listen");
  if (p->exec_fd >= 0 && (xfd = fcntl(p->exec_fd, F_DUPFD_CLOEXEC, HI)) < 0) fail(STEP_FDS, errno, "dup exec");
  if ((rfd = fcntl(report_fd, F_DUPFD_CLOEXEC, HI)) < 0) fail(STEP_FDS, errno, "dup report");
  if (upper_fd >= 0 && (upper_fd = fcntl(upper_fd, F_DUPFD_CLOEXEC, HI)) < 0) fail(STEP_FDS, errno, "dup upper");
  report_fd = rfd;
  for (int i = 0; i < 3; i++)
    if (dup2(in[i], i) < 0) fail(STEP_FDS, errno, "dup2 stdio");
  if (lfd >= 0 && dup2(lfd, 3) < 0) fail(STEP_FDS, errno, "dup2 listen");
  if (xfd >= 0 && dup3(xfd, 4, O_CLOEXEC) < 0) fail(STEP_FDS, errno, "dup3 exec");
  if (dup3(rfd, 5, O_CLOEXEC) < 0) fail(STEP_FDS, errno, "dup3 report");
  report_fd = 5;
  if (lfd < 0) close(3);
  if (xfd < 0) close(4);
  /* Not close-on-exec: an exec'd silkd keeps it (an O_PATH descriptor
   * reads nothing by itself; see JAIL_UPPER_FD). */
  if (upper_fd >= 0 && dup2(upper_fd, JAIL_UPPER_FD) < 0) fail(STEP_FDS, errno, "dup2 upper");
  if (syscall(SYS_close_range, upper_fd >= 0 ? JAIL_UPPER_FD + 1u : 6u, ~0u, 0u) < 0)
    fail(STEP_FDS, errno, "close_range");
}

static void drop_caps(uint64_t keep) {
  for (int cap = 0; cap < 64; cap++) {
    if (keep & (1ull << cap)) continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
      if (errno == EINVAL) break; /* past the kernel's last capability */
      fail(STEP_CAPS, errno, "PR_CAPBSET_DROP");
    }
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0) fail(STEP_CAPS, errno, "clear ambient");
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  memset(d, 0, sizeof d);
  d[0].effective = d[0].permitted = (uint32_t)keep;
  d[1].effective = d[1].permitted = (uint32_t)(keep >> 32);
  if (syscall(SYS_capset, &h, d) < 0) fail(STEP_CAPS, errno, "capset");
}

void jail_child_setup(const jail_plan *p) {
  report_fd = p->report_fd;

  /* Out of the host's session and process group, so no host terminal is
   * ours and no signal to a host group reaches us; no handler or mask of
   * the parent's stays. A zygote did all that once for itself (it leads a
   * session with no terminal, its dispositions are the defaults): a
   * process group of our own is then enough, and setsid's new scheduler
   * autogroup (~270 us here) and 64 sigactions are saved. */
  if (p->from_zygote) {
    setpgid(0, 0);
  } else {
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    for (int sig = 1; sig < NSIG; sig++) signal(sig, SIG_DFL);
    setsid();
  }

  /* Pooled network and IPC namespaces are fresh, empty and ours alone
   * (see netpool.c); lo is already up. */
  if (p->net_fd >= 0 && setns(p->net_fd, CLONE_NEWNET) < 0) fail(STEP_NETNS, errno, "net");
  if (p->ipc_fd >= 0 && setns(p->ipc_fd, CLONE_NEWIPC) < 0) fail(STEP_NETNS, errno, "ipc");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) fail(STEP_PRIVATE, errno, NULL);
  if (sethostname(p->hostname, strlen(p->hostname)) < 0) fail(STEP_HOSTNAME, errno, NULL);
  if (p->net_fd < 0) lo_up();

  /* The parent creates and joins our cgroups meanwhile, on the other
   * core: the mounts below are the host's fixed set, so what they cost the
   * kernel is charged to the parent's cgroup, not the sandbox's. */
  int rootfd = -1;
  for (size_t i = 0; i < p->nops; i++) run_op(p, i, &rootfd);
  if (rootfd >= 0) fail(STEP_EXEC, EINVAL, "plan has no pivot");

  /* Nothing of the workload runs before we are in the sandbox's cgroups,
   * and the cgroup namespace is entered only then, so its root is the
   * sandbox's own cgroup and nothing above it is visible. */
  char go;
  ssize_t n;
  do n = read(p->go_fd, &go, 1);
  while (n < 0 && errno == EINTR);
  if (n != 1) _exit(127); /* the parent gave up on us */
  if (p->unshare_cgroup && unshare(CLONE_NEWCGROUP) < 0) fail(STEP_CGROUPNS, errno, NULL);

  arrange_fds(p);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) fail(STEP_NNP, errno, NULL);
  drop_caps(p->keep_caps);
  if (p->seccomp && syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, p->seccomp) < 0)
    fail(STEP_SECCOMP, errno, NULL);
}

void jail_child_ready(void) {
  /* The parent reads the report pipe to its end: with no exec to close it,
   * closing it says the jail is built. */
  close(report_fd);
  report_fd = -1;
}

void jail_child(const jail_plan *p) {
  jail_child_setup(p);
  if (p->exec_fd >= 0)
    syscall(SYS_execveat, 4, "", p->argv, p->envp, AT_EMPTY_PATH);
  else
    execve(p->argv[0], p->argv, p->envp);
  fail(STEP_EXEC, errno, p->argv[0]);
}
