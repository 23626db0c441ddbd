/* silkd: the daemon inside every sandbox (spec silkd-wire.md).
 *
 * main.c parses the command line, opens the listeners and runs the loop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sandbox/sandbox.h>

#include "../libsandbox/core/env.h"
#include "silkd.h"
#include "zygote.h"

struct silkd_state silkd;

uint64_t silkd_next_id(void) { return ++silkd.counter; }

struct listener {
  int fd;
  struct event *ev, *backoff;
  struct listener *next;
};
static struct listener *listeners;

static void usage(FILE *f) {
  fprintf(f,
          "usage: silkd [--listen ADDR]... [--log-level error|warn|info|debug] [--lsp-ttl SECONDS] [--version]\n"
          "       silkd --zygote fd:N   (the jail driver's: see docs/drivers.md)\n"
          "  ADDR: vsock:PORT (default vsock:2048, or $SILKD_PORT), unix:PATH, fd:N,\n"
          "        tcp:HOST:PORT, stdio\n"
          "  --lsp-ttl: kill a language server no lsp_request attached to (default 300)\n");
}

static void on_backoff(evutil_socket_t fd, short what, void *arg) {
  struct listener *l = arg;
  event_add(l->ev, NULL);
}

static void on_accept(evutil_socket_t fd, short what, void *arg) {
  struct listener *l = arg;
  for (int i = 0; i < 64; i++) {
    int c = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c >= 0) {
      conn_start(c, c);
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return;
    /* Out of descriptors and the like: back off instead of spinning (§1.1). */
    sbx_warn("accept: %s", strerror(errno));
    event_del(l->ev);
    struct timeval tv = {0, 50000};
    event_add(l->backoff, &tv);
    return;
  }
}

static int listen_fd(const char *spec, sbx_error *err) {
  int fd = -1;
  if (strncmp(spec, "fd:", 3) == 0) {
    char *end;
    long n = strtol(spec + 3, &end, 10);
    if (*end || n < 0 || n > 65535) return sbx_err(err, SBX_E_INVAL, "bad listen address %s", spec);
    fd = (int)n;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) return sbx_err_os(err, errno, "listen %s", spec);
    return fd;
  }
  if (strncmp(spec, "unix:", 5) == 0) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(spec + 5) >= sizeof sa.sun_path) return sbx_err(err, SBX_E_INVAL, "unix path too long: %s", spec);
    strcpy(sa.sun_path, spec + 5);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return sbx_err_os(err, errno, "socket");
    unlink(sa.sun_path); /* a stale socket from an earlier run */
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) goto os_fail;
  } else if (strncmp(spec, "vsock:", 6) == 0) {
    struct sockaddr_vm sa = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY};
    sa.svm_port = (unsigned)strtoul(spec + 6, NULL, 10);
    fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return sbx_err_os(err, errno, "socket %s", spec);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) goto os_fail;
  } else if (strncmp(spec, "tcp:", 4) == 0) {
    const char *hp = spec + 4, *colon = strrchr(hp, ':');
    if (!colon) return sbx_err(err, SBX_E_INVAL, "bad listen address %s", spec);
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)(colon - hp), hp);
    if (host[0] == '[') { /* [::1] */
      memmove(host, host + 1, strlen(host));
      host[strcspn(host, "]")] = 0;
    }
    if (!strcmp(host, "localhost") || !host[0]) strcpy(host, "127.0.0.1");
    int port = atoi(colon + 1);
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct sockaddr *sa;
    socklen_t len;
    if (inet_pton(AF_INET, host, &s4.sin_addr) == 1) {
      sa = (struct sockaddr *)&s4;
      len = sizeof s4;
    } else if (inet_pton(AF_INET6, host, &s6.sin6_addr) == 1) {
      sa = (struct sockaddr *)&s6;
      len = sizeof s6;
    } else {
      return sbx_err(err, SBX_E_INVAL, "tcp host must be a numeric address: %s", spec);
    }
    fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return sbx_err_os(err, errno, "socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, sa, len) < 0) goto os_fail;
  } else {
    return sbx_err(err, SBX_E_INVAL, "unknown listen address %s", spec);
  }
  if (listen(fd, 1024) < 0) goto os_fail;
  return fd;
os_fail:;
  int e = errno;
  close(fd);
  return sbx_err_os(err, e, "listen %s", spec);
}

static void add_listener(int fd) {
  struct listener *l = sbx_calloc(1, sizeof *l);
  l->fd = fd;
  set_nonblock(fd);
  l->ev = event_new(silkd.base, fd, EV_READ | EV_PERSIST, on_accept, l);
  l->backoff = evtimer_new(silkd.base, on_backoff, l);
  event_add(l->ev, NULL);
  l->next = listeners;
  listeners = l;
}

static void on_sigchld(evutil_socket_t fd, short what, void *arg) { child_reap_all(); }

static void on_sigterm(evutil_socket_t fd, short what, void *arg) {
  sbx_info("signal %d: shutting down", (int)fd);
  silkd.shutting_down = true;
  for (struct listener *l = listeners; l; l = l->next) {
    event_del(l->ev);
    close(l->fd);
  }
  proc_kill_all();
  session_kill_all();
  lsp_kill_all();
  /* Nothing is persisted, so there is nothing to tidy: the children are
   * gone and the kernel closes every socket. */
  _exit(0);
}

int silkd_run(int argc, char **argv) {
  const char *addrs[64];
  size_t naddrs = 0;
  sbx_log_level level = SBX_LOG_INFO;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--version")) {
      printf("silkd %s (proto %d)\n", sbx_version(), SBX_WIRE_PROTO);
      return 0;
    }
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    }
    if (!strcmp(argv[i], "--listen") && i + 1 < argc && naddrs < 64) {
      addrs[naddrs++] = argv[++i];
      continue;
    }
    if (!strcmp(argv[i], "--lsp-ttl") && i + 1 < argc) {
      char *end;
      unsigned long v = strtoul(argv[++i], &end, 10);
      if (*end || v == 0 || v > 86400) {
        usage(stderr);
        return 2;
      }
      silkd_lsp_ttl_secs = (unsigned)v;
      continue;
    }
    if (!strcmp(argv[i], "--log-level") && i + 1 < argc) {
      int l = sbx_log_level_parse(argv[++i]);
      if (l < 0) {
        usage(stderr);
        return 2;
      }
      level = (sbx_log_level)l;
      continue;
    }
    usage(stderr);
    return 2;
  }
  sbx_log_setup("silkd", level, SBX_LOG_PLAIN);
  char defaddr[32];
  if (naddrs == 0) {
    const char *port = getenv("SILKD_PORT");
    snprintf(defaddr, sizeof defaddr, "vsock:%s", port && *port ? port : "2048");
    addrs[naddrs++] = defaddr;
  }

  /* Non-dumpable before the first connection: then no workload, root
   * like us and with our capabilities, can ptrace us (PTRACE_ATTACH or
   * SEIZE would stop pid 1), read or write our memory (process_vm_*,
   * /proc/1/mem) or take our descriptors (pidfd_getfd, /proc/1/fd), which
   * include the host-side sockets: all of these need CAP_SYS_PTRACE on a
   * non-dumpable target, and workloads do not have it. It covers every
   * thread (the flag is the address space's). Children get it back from
   * execve; between vfork and execve they share our memory anyway. */
  prctl(PR_SET_DUMPABLE, 0);
  signal(SIGPIPE, SIG_IGN);
  /* Orphans of our children come to us even when we are not PID 1 (a VM
   * guest's early daemon, tests), and the SIGCHLD loop reaps them. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  silkd.start_ns = sbx_now_ns();
  silkd.pid = getpid();
  env_init();
  silkd.base = event_base_new();
  if (!silkd.base) {
    sbx_error_log("event_base_new failed");
    return 1;
  }
  /* As pid 1, SIGTERM and SIGINT keep their default action: the kernel
   * then drops them when they come from inside our pid namespace (a
   * workload would otherwise shut the sandbox's silkd down) and lets one
   * from the host end us. A graceful stop adds nothing there: all our
   * processes die with pid 1. */
  bool init = getpid() == 1;
  struct event *sigs[3] = {
      evsignal_new(silkd.base, SIGCHLD, on_sigchld, NULL),
      init ? NULL : evsignal_new(silkd.base, SIGTERM, on_sigterm, NULL),
      init ? NULL : evsignal_new(silkd.base, SIGINT, on_sigterm, NULL),
  };
  for (int i = 0; i < 3; i++)
    if (sigs[i]) event_add(sigs[i], NULL);
  session_init();

  bool have_stdio = false;
  for (size_t i = 0; i < naddrs; i++) {
    if (!strcmp(addrs[i], "stdio")) {
      have_stdio = true;
      continue;
    }
    sbx_error e;
    int fd = listen_fd(addrs[i], &e);
    if (fd < 0) {
      sbx_error_log("%s", e.msg);
      return 1;
    }
    add_listener(fd);
    sbx_info("listening on %s", addrs[i]);
  }
  if (have_stdio) conn_start(0, 1);
  /* Children forked before the handler existed would go unreaped. */
  child_reap_all();
  event_base_dispatch(silkd.base);
  proc_kill_all();
  session_kill_all();
  lsp_kill_all();
  return 0;
}

int main(int argc, char **argv) {
  sbxi_env_apply(NULL); /* SBX_B64_SCALAR */
  /* Before anything else, so the zygote's children inherit no state of
   * ours beyond what the C library and the constructors made. */
  if (argc >= 2 && !strcmp(argv[1], "--zygote")) return silkd_zygote_main(argc, argv);
  return silkd_run(argc, argv);
}
