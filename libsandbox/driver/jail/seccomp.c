/* The jail's seccomp filter and capability set.
 *
 * The filter is compiled once per driver (libseccomp costs ~0.8 ms per
 * compile here) and exported as classic BPF; each child only loads it. It
 * is a deny-list of kernel-level interfaces a sandboxed workload has no use
 * for and that are the usual doors to the kernel (io_uring among them, as
 * Docker's current default profile has it: programs fall back to plain
 * syscalls); everything else (ptrace of its own processes...) is left to the
 * namespaces and the reduced capabilities, as a container runtime does,
 * except what would reach into pid 1.
 * Denied calls fail with EPERM so programs see an ordinary permission
 * error; a foreign architecture's syscall (i386 numbers through int 0x80)
 * kills the process, because its numbers would bypass every rule below. */
#include <errno.h>
#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "jail.h"

/* Refused outright. mount/umount2/pivot_root are fine to refuse because
 * the filter is loaded after the jail is built. */
static const char *const denied[] = {
    "mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "open_by_handle_at",
    "name_to_handle_at", "reboot", "swapon", "swapoff", "clock_settime", "clock_settime64", "clock_adjtime",
    "clock_adjtime64", "settimeofday", "adjtimex", "stime", "acct", "quotactl", "quotactl_fd", "userfaultfd",
    "setns", "lookup_dcookie", "iopl", "ioperm", "nfsservctl", "vm86", "vm86old", "uselib",
    "syslog", "fanotify_init", "io_uring_setup", "io_uring_enter", "io_uring_register", NULL};

int jail_seccomp_build(struct sock_fprog *out, sbx_error *err) {
  memset(out, 0, sizeof *out);
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return sbx_err(err, SBX_E_NOMEM, "seccomp_init failed");
  int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (rc < 0) sbx_err(err, SBX_E_INTERNAL, "seccomp bad-arch action: %s", strerror(-rc));
  /* A binary tree on the syscall number rather than a list: the kernel
   * runs the filter once per syscall number when it is loaded, to build
   * its always-allowed cache, and that pass was ~90 us of every clone with
   * the list (docs/performance.md). Best effort: an older libseccomp keeps
   * the list, which is only slower. */
  if (rc == 0) (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
  for (size_t i = 0; denied[i] && rc == 0; i++) {
    int nr = seccomp_syscall_resolve_name(denied[i]);
    if (nr == __NR_SCMP_ERROR) continue; /* not on this architecture */
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
    if (rc < 0) sbx_err(err, SBX_E_INTERNAL, "seccomp rule %s: %s", denied[i], strerror(-rc));
  }
  /* A new user namespace would hand the workload a full capability set
   * over namespaces it owns, and with it most of the kernel surface the
   * list above closes. */
  if (rc == 0)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER));
  if (rc == 0)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER));
  /* Nothing may reach into pid 1 (silkd): it holds the sandbox's
   * host-side sockets, and a stopped silkd hangs every exec. Its being
   * non-dumpable is what the kernel enforces for all its threads (see
   * silkd/main.c); these rules are the second wall, on the pid a
   * workload would name it by. Only the low 32 bits are a pid_t. */
  static const struct {
    const char *name;
    unsigned arg;
  } pid1[] = {{"ptrace", 1}, {"pidfd_open", 0}, {"process_vm_readv", 0}, {"process_vm_writev", 0}};
  for (size_t i = 0; i < sizeof pid1 / sizeof pid1[0] && rc == 0; i++) {
    int nr = seccomp_syscall_resolve_name(pid1[i].name);
    if (nr == __NR_SCMP_ERROR) continue;
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                          SCMP_CMP(pid1[i].arg, SCMP_CMP_MASKED_EQ, 0xffffffffull, 1));
  }
  /* clone3 passes its flags in memory seccomp cannot read: answering
   * ENOSYS makes libc fall back to clone, which the rule above sees. */
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  if (rc < 0) {
    if (err && err->code == 0) sbx_err(err, SBX_E_INTERNAL, "seccomp rule: %s", strerror(-rc));
    seccomp_release(ctx);
    return SBX_E_INTERNAL;
  }
  /* libseccomp 2.5 exports only to an fd: go through a memfd. */
  int fd = memfd_create("sbx-seccomp", MFD_CLOEXEC);
  if (fd < 0) {
    seccomp_release(ctx);
    return sbx_err_os(err, errno, "memfd_create");
  }
  rc = seccomp_export_bpf(ctx, fd);
  seccomp_release(ctx);
  struct stat st;
  if (rc < 0 || fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) != 0) {
    close(fd);
    return sbx_err(err, SBX_E_INTERNAL, "seccomp export failed");
  }
  struct sock_filter *f = sbx_malloc((size_t)st.st_size);
  ssize_t n = pread(fd, f, (size_t)st.st_size, 0);
  close(fd);
  if (n != st.st_size) {
    sbx_free(f);
    return sbx_err(err, SBX_E_INTERNAL, "seccomp export short read");
  }
  out->filter = f;
  out->len = (unsigned short)((size_t)st.st_size / sizeof(struct sock_filter));
  return 0;
}

void jail_seccomp_free(struct sock_fprog *prog) {
  sbx_free(prog->filter);
  prog->filter = NULL;
  prog->len = 0;
}

/* Docker's default set minus CAP_MKNOD (a device node is a door to host
 * hardware, and nothing limits which ones without a devices cgroup) and
 * CAP_AUDIT_WRITE (no audit in a sandbox). */
uint64_t jail_default_caps(void) {
  static const int keep[] = {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FSETID, CAP_FOWNER, CAP_SETGID, CAP_SETUID,
                             CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_NET_RAW, CAP_SYS_CHROOT, CAP_KILL,
                             CAP_SETFCAP};
  uint64_t m = 0;
  for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) m |= 1ull << keep[i];
  return m;
}
