/* One QEMU process: its command line, its start, its agent channel, its
 * end.
 *
 * A clone's command line must describe the same machine as its golden's
 * (migration refuses anything else), so both come from qemu_vm_args and
 * differ only in -incoming and in the host end of the agent channel. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../template/layers.h"
#include "qemu.h"

extern char **environ;

#define ARGV_MAX 64

int qemu_run_dir_path(const qemu_driver *qd, const char *id, const char *name, char *buf, size_t len,
                      sbx_error *err) {
  return sbxi_path_fmt(buf, len, err, "%s/%s%s%s", qd->run_dir, id, name ? "/" : "", name ? name : "");
}

/* A port the kernel just handed out and released: QEMU binds it a few ms
 * later. Another process could take it in between; QEMU then fails to
 * start and the caller sees that error (rare, and never silent). */
static int free_port(uint16_t *port, sbx_error *err) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return sbx_err_os(err, errno, "socket");
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
    int rc = sbx_err_os(err, errno, "pick a port");
    close(fd);
    return rc;
  }
  close(fd);
  *port = ntohs(sa.sin_port);
  return 0;
}

int qemu_write_state(sbx_instance *s, sbx_error *err) {
  char path[PATH_MAX], tmp[PATH_MAX], st[128];
  int rc = qemu_run_dir_path(s->qd, s->hdr.id, "state", path, sizeof path, err);
  if (rc < 0) return rc;
  if ((rc = sbxi_path_fmt(tmp, sizeof tmp, err, "%s.tmp", path)) < 0) return rc;
  int n = snprintf(st, sizeof st, "%d %llu %d %u %u %s\n", (int)s->qemu_pid, sbxi_proc_starttime(s->qemu_pid),
                   (int)s->agent, (unsigned)s->port, (unsigned)s->cid, s->size->name);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, st, (size_t)n) != n || rename(tmp, path) < 0) {
    rc = sbx_err_os(err, errno, "write %s", path);
    if (fd >= 0) close(fd);
    unlink(tmp);
    return rc;
  }
  close(fd);
  return 0;
}

typedef struct argv_b {
  char *v[ARGV_MAX + 1];
  size_t n;
} argv_b;

static void add(argv_b *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(argv_b *a, const char *fmt, ...) {
  if (a->n >= ARGV_MAX) return; /* caught by the caller: v[ARGV_MAX-1] set */
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0) abort();
  va_end(ap);
  a->v[a->n++] = sbx_strdup(s);
  free(s);
}

static void argv_free(argv_b *a) {
  for (size_t i = 0; i < a->n; i++) sbx_free(a->v[i]);
  a->n = 0;
}

static int build_argv(qemu_driver *qd, const char *dir, const qemu_vm_args *a, argv_b *av, sbx_error *err) {
  const sbx_size_tier *sz = a->size;
  add(av, "%s", qd->qemu_bin);
  add(av, "-M");
  /* The ISA serial port carries the console (console.log). */
  add(av, "microvm,x-option-roms=off,isa-serial=on%s", a->mem_path ? ",memory-backend=ram" : "");
  if (a->mem_path) {
    add(av, "-object");
    add(av, "memory-backend-file,id=ram,size=%lluM,mem-path=%s,share=%s", (unsigned long long)(sz->mem_bytes >> 20),
        a->mem_path, a->mem_share ? "on" : "off");
  }
  add(av, "-accel");
  add(av, "%s", a->accel == QEMU_ACCEL_KVM ? "kvm" : "tcg");
  add(av, "-cpu");
  add(av, "%s", a->accel == QEMU_ACCEL_KVM ? "host" : "max");
  add(av, "-smp");
  add(av, "%u", sz->vcpus);
  add(av, "-m");
  add(av, "%lluM", (unsigned long long)(sz->mem_bytes >> 20));
  add(av, "-nodefaults");
  add(av, "-no-user-config");
  add(av, "-nographic");
  add(av, "-no-reboot");
  add(av, "-serial");
  add(av, "file:%s/console.log", dir);
  add(av, "-kernel");
  add(av, "%s", qd->kernel);
  add(av, "-initrd");
  add(av, "%s", qd->initrd);
  add(av, "-append");
  char tsc[48] = "";
  if (qd->tsc_khz) snprintf(tsc, sizeof tsc, " tsc_early_khz=%lu", qd->tsc_khz);
  add(av, "console=ttyS0 quiet loglevel=3 panic=-1 reboot=t rcupdate.rcu_expedited=1 i8042.noaux nokaslr%s "
          "sbx.agent=%s%s",
      tsc, a->agent == QEMU_AGENT_VSOCK ? "vsock" : "tcp", a->disk ? " sbx.root=vda" : "");
  if (a->disk) {
    add(av, "-drive");
    add(av, "if=none,id=root,file=%s,format=raw,readonly=on,cache=unsafe", a->disk);
    add(av, "-device");
    add(av, "virtio-blk-device,drive=root");
  }
  if (a->agent == QEMU_AGENT_VSOCK) {
    add(av, "-device");
    add(av, "vhost-vsock-device,guest-cid=%u", a->cid);
  } else {
    /* restrict=on: the guest reaches nothing, not even the host; the one
     * path is the host-side forward to silkd. */
    add(av, "-netdev");
    add(av, "user,id=agent,restrict=on,ipv6=off,hostfwd=tcp:127.0.0.1:%u-10.0.2.15:%u", (unsigned)a->port,
        QEMU_AGENT_PORT);
    add(av, "-device");
    add(av, "virtio-net-device,netdev=agent");
  }
  add(av, "-qmp");
  add(av, "unix:%s/qmp.sock,server=on,wait=off", dir);
  if (a->incoming) {
    add(av, "-S");
    add(av, "-incoming");
    /* The saved state comes in on fd 3, opened by us: no helper process,
     * so a clone's QEMU may not spawn any. mmap: the capability must be set
     * before the stream is read, which only QMP can do; the clone then
     * starts it with migrate-incoming fd:3. */
    add(av, "%s", a->mem_path ? "defer" : "fd:" QEMU_INCOMING_FD_STR);
  }
  /* seccomp: a clone runs untrusted code from its first instruction. The
   * golden builder keeps spawn, for its exec: migration target. */
  add(av, "-sandbox");
  add(av, "on,obsolete=deny,elevateprivileges=deny,resourcecontrol=deny,spawn=%s", a->incoming ? "deny" : "allow");
  if (av->n >= ARGV_MAX) return sbx_err(err, SBX_E_INTERNAL, "qemu: command line too long");
  av->v[av->n] = NULL;
  return 0;
}

int qemu_vm_start(qemu_driver *qd, const char *id, const qemu_vm_args *a, sbx_instance **out, sbx_error *err) {
  *out = NULL;
  int rc = sbxi_check_id(id, err);
  if (rc < 0) return rc;
  if (a->mem_path && strchr(a->mem_path, ','))
    return sbx_err(err, SBX_E_INVAL, "qemu: a golden's path holds a comma");
  char dir[PATH_MAX], qmp_path[PATH_MAX];
  if ((rc = qemu_run_dir_path(qd, id, NULL, dir, sizeof dir, err)) < 0) return rc;
  if ((rc = qemu_run_dir_path(qd, id, "qmp.sock", qmp_path, sizeof qmp_path, err)) < 0) return rc;
  if (mkdirat(qd->run_dirfd, id, 0700) < 0) {
    if (errno == EEXIST) return sbx_err(err, SBX_E_EXISTS, "sandbox %s already exists", id);
    return sbx_err_os(err, errno, "mkdir %s", dir);
  }
  qemu_vm_args args = *a;
  if (args.agent == QEMU_AGENT_TCP && (rc = free_port(&args.port, err)) < 0) goto fail_dir;
  if (args.agent == QEMU_AGENT_VSOCK && args.cid == 0)
    args.cid = __atomic_fetch_add(&qd->next_cid, 1, __ATOMIC_RELAXED);

  argv_b av = {0};
  if ((rc = build_argv(qd, dir, &args, &av, err)) < 0) {
    argv_free(&av);
    goto fail_dir;
  }
  /* QEMU's stdio: nothing in, its own diagnostics into the run dir. */
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  char logp[PATH_MAX];
  if ((rc = sbxi_path_fmt(logp, sizeof logp, err, "%s/qemu.log", dir)) < 0) {
    posix_spawn_file_actions_destroy(&fa);
    argv_free(&av);
    goto fail_dir;
  }
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  if (a->incoming)
    posix_spawn_file_actions_addopen(&fa, QEMU_INCOMING_FD, a->incoming, O_RDONLY | O_NOFOLLOW, 0);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSID);
  pid_t pid;
  int e = posix_spawn(&pid, qd->qemu_bin, &fa, &at, av.v, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  argv_free(&av);
  if (e != 0) {
    rc = sbx_err_os(err, e, "spawn %s", qd->qemu_bin);
    goto fail_dir;
  }
  sbx_instance *s = sbx_calloc(1, sizeof *s);
  s->hdr.drv = &qd->base;
  snprintf(s->hdr.id, sizeof s->hdr.id, "%s", id);
  s->qd = qd;
  s->qemu_pid = pid;
  s->is_child = true;
  s->agent = args.agent;
  s->port = args.port;
  s->cid = args.cid;
  s->size = args.size;
  s->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (s->pidfd < 0) {
    rc = sbx_err_os(err, errno, "pidfd_open");
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
    s->exited = true;
    qemu_vm_destroy(s, NULL);
    return rc;
  }
  if ((rc = qmp_connect(qmp_path, 10000, &s->qmp, err)) < 0 || (rc = qemu_write_state(s, err)) < 0) {
    char log[512] = "";
    int lfd = open(logp, O_RDONLY | O_CLOEXEC);
    if (lfd >= 0) {
      ssize_t n = read(lfd, log, sizeof log - 1);
      if (n > 0) log[n] = '\0';
      close(lfd);
    }
    if (log[0]) sbx_err_wrap(err, "qemu: %s", log);
    qemu_vm_destroy(s, NULL);
    return rc;
  }
  *out = s;
  return 0;
fail_dir:
  sbxi_rm_rf_at(qd->run_dirfd, id, NULL);
  return rc;
}

int qemu_ignore_shared(sbx_instance *s, sbx_error *err) {
  return qmp_cmd(s->qmp, "migrate-set-capabilities",
                 "{\"capabilities\":[{\"capability\":\"x-ignore-shared\",\"state\":true}]}", NULL, err);
}

int qemu_vm_agent_dial(sbx_instance *s, sbx_error *err) {
  int fd;
  if (s->agent == QEMU_AGENT_VSOCK) {
    fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return sbx_err_os(err, errno, "vsock socket");
    struct sockaddr_vm sv = {.svm_family = AF_VSOCK, .svm_cid = s->cid, .svm_port = QEMU_AGENT_PORT};
    if (connect(fd, (struct sockaddr *)&sv, sizeof sv) < 0) {
      int rc = sbx_err_os(err, errno, "connect vsock %u:%u", s->cid, QEMU_AGENT_PORT);
      close(fd);
      return rc;
    }
    return fd;
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return sbx_err_os(err, errno, "socket");
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(s->port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    int rc = sbx_err_os(err, errno, "connect 127.0.0.1:%u", (unsigned)s->port);
    close(fd);
    return rc;
  }
  return fd;
}

static bool vm_alive(sbx_instance *s) {
  struct pollfd p = {s->pidfd, POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

/* The user-net forward accepts on the host before the guest listens (and
 * then drops the connection), so readiness is an answered info, retried. */
int qemu_vm_wait_ready(sbx_instance *s, int timeout_ms, sbx_error *err) {
  uint64_t deadline = sbx_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  int rc = 0;
  sbx_error last = {0};
  for (;;) {
    if (!vm_alive(s)) return sbx_err(err, SBX_E_REMOTE, "qemu for %s exited during boot", s->hdr.id);
    sbx_err_clear(&last);
    int fd = qemu_vm_agent_dial(s, &last);
    uint64_t now = sbx_now_ns();
    int left = now >= deadline ? 0 : (int)((deadline - now) / 1000000ull);
    if (fd >= 0) {
      rc = sbx_ready_probe(fd, left < 2000 ? (left > 0 ? left : 1) : 2000, &last);
      close(fd);
      if (rc == 0) return 0;
    }
    if (sbx_now_ns() >= deadline) {
      rc = sbx_err(err, SBX_E_TIMEOUT, "silkd in %s did not answer within %d ms (%s)", s->hdr.id, timeout_ms,
                   last.msg);
      return rc;
    }
    usleep(fd >= 0 ? 5000 : 20000);
  }
}

static int code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

int qemu_vm_wait(sbx_instance *s, int timeout_ms, int *code, sbx_error *err) {
  if (!s->exited) {
    int rc = sbxi_pidfd_wait(s->pidfd, timeout_ms, s->hdr.id, err);
    if (rc < 0) return rc;
    if (s->is_child) {
      int status;
      pid_t w;
      do w = waitpid(s->qemu_pid, &status, 0);
      while (w < 0 && errno == EINTR);
      if (w < 0) return sbx_err_os(err, errno, "waitpid");
      s->code = code_of(status);
    } else {
      s->code = -1;
    }
    s->exited = true;
  }
  if (code) *code = s->code;
  return 0;
}

int qemu_vm_destroy(sbx_instance *s, sbx_error *err) {
  qemu_driver *qd = s->qd;
  qmp_close(s->qmp);
  s->qmp = NULL;
  if (!s->exited && s->pidfd >= 0) {
    syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
    qemu_vm_wait(s, -1, NULL, NULL);
  }
  int rc = sbxi_rm_rf_at(qd->run_dirfd, s->hdr.id, err);
  if (s->pidfd >= 0) close(s->pidfd);
  sbx_free(s);
  return rc;
}
