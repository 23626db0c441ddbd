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

/* Readiness is an answered info, and a probe sent too early is never
 * answered: the user-net forward accepts on the host before the guest
 * listens and then holds the connection without delivering it. One probe
 * at a time with a long bound made every cold boot read as that bound
 * (2 s, or 4 s, whatever the boot took). So probes overlap: a new one
 * every PROBE_GAP (10 ms, growing to 100 ms), each kept up to PROBE_LIFE
 * so a slow answer on a loaded host still counts, at most PROBES of them;
 * the first answer is readiness. Boot to ready then reads as it is, to
 * within one gap. */
#define PROBES 16
#define PROBE_LIFE_MS 2000
#define PROBE_GAP_MIN_MS 10
#define PROBE_GAP_MAX_MS 100

struct probe {
  int fd;
  uint64_t born_ns;
  struct sbxi_ready_buf b;
};

static void probe_drop(struct probe *p, size_t *n, size_t i) {
  close(p[i].fd);
  p[i] = p[--*n]; /* order does not matter but for the oldest, found by age */
}

/* A new probe in flight, the oldest dropped when all slots are taken. */
static void probe_add(sbx_instance *s, struct probe *p, size_t *n, uint64_t now, sbx_error *last) {
  if (*n == PROBES) {
    size_t old = 0;
    for (size_t i = 1; i < *n; i++)
      if (p[i].born_ns < p[old].born_ns) old = i;
    probe_drop(p, n, old);
  }
  sbx_err_clear(last);
  int fd = qemu_vm_agent_dial(s, last);
  if (fd < 0) return;
  if (sbxi_ready_send(fd, last) < 0) {
    close(fd);
    return;
  }
  p[*n].fd = fd;
  p[*n].born_ns = now;
  p[*n].b.len = 0;
  (*n)++;
}

/* Read every probe that poll found readable: 1 when one was answered. */
static int probes_read(struct probe *p, size_t *n, const struct pollfd *pf, size_t npf, sbx_error *last) {
  for (size_t k = npf; k-- > 0;) { /* from the end: a drop moves the last probe into slot k */
    if (!pf[k].revents) continue;
    sbx_error e = {0};
    int rc = sbxi_ready_recv(p[k].fd, &p[k].b, &e);
    if (rc == 1) return 1;
    if (rc < 0) {
      *last = e;
      probe_drop(p, n, k);
    }
  }
  return 0;
}

int qemu_vm_wait_ready(sbx_instance *s, int timeout_ms, sbx_error *err) {
  uint64_t deadline = sbx_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  struct probe *p = sbx_calloc(PROBES, sizeof *p);
  size_t n = 0;
  uint64_t gap_ms = PROBE_GAP_MIN_MS, next_ns = 0;
  sbx_error last = {0};
  int rc;
  for (;;) {
    if (!vm_alive(s)) {
      rc = sbx_err(err, SBX_E_REMOTE, "qemu for %s exited during boot", s->hdr.id);
      break;
    }
    uint64_t now = sbx_now_ns();
    if (now >= deadline) {
      rc = sbx_err(err, SBX_E_TIMEOUT, "silkd in %s did not answer within %d ms (%s)", s->hdr.id, timeout_ms,
                   last.msg[0] ? last.msg : "no answer to the info probe");
      break;
    }
    if (now >= next_ns) {
      probe_add(s, p, &n, now, &last);
      next_ns = now + gap_ms * 1000000ull;
      gap_ms = gap_ms * 2 > PROBE_GAP_MAX_MS ? PROBE_GAP_MAX_MS : gap_ms * 2;
    }
    for (size_t i = n; i-- > 0;)
      if (now - p[i].born_ns >= PROBE_LIFE_MS * 1000000ull) probe_drop(p, &n, i);
    struct pollfd pf[PROBES];
    for (size_t i = 0; i < n; i++) pf[i] = (struct pollfd){p[i].fd, POLLIN, 0};
    uint64_t until = next_ns < deadline ? next_ns : deadline;
    int wait_ms = until > now ? (int)((until - now + 999999) / 1000000) : 0;
    int pr = poll(pf, n, wait_ms);
    if (pr < 0 && errno != EINTR) {
      rc = sbx_err_os(err, errno, "poll");
      break;
    }
    if (pr > 0 && probes_read(p, &n, pf, n, &last) == 1) {
      rc = 0;
      break;
    }
  }
  while (n) probe_drop(p, &n, n - 1);
  sbx_free(p);
  return rc;
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
