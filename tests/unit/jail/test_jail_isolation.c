/* Isolation of real jails, seen from inside: each case runs a script as
 * pid 1 of a fresh jail over the host template and asserts the exact
 * outcome. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include "jail_test.h"

static jt T;
static char out[1 << 16];

static int setup(void **state) {
  (void)state;
  return jt_open(&T) < 0 ? -1 : 0;
}
static int teardown(void **state) {
  (void)state;
  jt_close(&T);
  return 0;
}

static void test_only_own_processes(void **state) {
  (void)state;
  /* The loop runs inside pid 1 itself (no fork), so pid 1 must be alone. */
  int code = jt_run(&T, "iso-pids", "for p in /proc/[0-9]*; do echo ${p#/proc/}; done", out, sizeof out);
  assert_int_equal(code, 0);
  assert_string_equal(out, "1\n");
}

static void test_hostname_is_id(void **state) {
  (void)state;
  assert_int_equal(jt_run(&T, "iso-host", "read h < /proc/sys/kernel/hostname; echo $h", out, sizeof out), 0);
  assert_string_equal(out, "iso-host\n");
}

static void test_net_none_only_lo(void **state) {
  (void)state;
  int code = jt_run(&T, "iso-net", "sed -n '3,$p' /proc/net/dev | cut -d: -f1 | tr -d ' '", out, sizeof out);
  assert_int_equal(code, 0);
  assert_string_equal(out, "lo\n");
}

static void test_net_cannot_reach_host_loopback(void **state) {
  (void)state;
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(l, 4), 0);
  socklen_t sl = sizeof sa;
  getsockname(l, (struct sockaddr *)&sa, &sl);
  char script[512];
  snprintf(script, sizeof script,
           "python3 -c 'import socket,errno\n"
           "s=socket.socket()\ns.settimeout(5)\n"
           "try:\n s.connect((\"127.0.0.1\",%d)); print(\"connected\")\n"
           "except OSError as e: print(errno.errorcode.get(e.errno, e))'",
           ntohs(sa.sin_port));
  int code = jt_run(&T, "iso-lo", script, out, sizeof out);
  close(l);
  assert_int_equal(code, 0);
  assert_string_equal(out, "ECONNREFUSED\n");
}

static void test_host_secrets_masked(void **state) {
  (void)state;
  int code = jt_run(&T, "iso-secrets",
                    "for f in /etc/shadow /etc/gshadow /etc/ssh/ssh_host_ed25519_key /etc/ssh/ssh_host_rsa_key; do "
                    "  if cat $f >/dev/null 2>&1; then echo readable $f; fi; done; "
                    "echo root: $(ls -A /root) home: $(ls -A /home); test -d /sys/kernel && echo sys",
                    out, sizeof out);
  assert_int_equal(code, 1); /* the last test fails: /sys is empty */
  assert_string_equal(out, "root: home:\n");
  /* and the host's own file is of course still there */
  assert_int_equal(access("/etc/shadow", R_OK), 0);
}

static void test_proc_sensitive_unusable(void **state) {
  (void)state;
  int code = jt_run(&T, "iso-proc",
                    "python3 -c '\n"
                    "import errno,os\n"
                    "def w(p):\n"
                    "  try:\n    open(p,\"w\").write(\"h\"); return \"written\"\n"
                    "  except OSError as e: return errno.errorcode[e.errno]\n"
                    "def r(p):\n"
                    "  try:\n    return str(len(open(p,\"rb\").read(4096)))\n"
                    "  except OSError as e: return errno.errorcode[e.errno]\n"
                    "print(\"sysrq\", w(\"/proc/sysrq-trigger\"))\n"
                    "print(\"sys\", w(\"/proc/sys/kernel/hostname\"))\n"
                    "print(\"kcore\", r(\"/proc/kcore\") if os.path.exists(\"/proc/kcore\") else \"0\")\n"
                    "print(\"keys\", r(\"/proc/keys\"))\n"
                    "print(\"timer_list\", r(\"/proc/timer_list\"))\n"
                    "'",
                    out, sizeof out);
  assert_int_equal(code, 0);
  /* a kernel built without magic SysRq has no such file at all */
  char want[128];
  snprintf(want, sizeof want, "sysrq %s\nsys EROFS\nkcore 0\nkeys 0\ntimer_list 0\n",
           access("/proc/sysrq-trigger", F_OK) == 0 ? "EROFS" : "ENOENT");
  assert_string_equal(out, want);
}

static void test_seccomp_denies(void **state) {
  (void)state;
  /* x86-64 numbers; each call would otherwise do something (unshare of a
   * user namespace and keyctl succeed for any user without the filter). */
  int code = jt_run(&T, "iso-seccomp",
                    "python3 -c '\n"
                    "import ctypes,errno\n"
                    "libc=ctypes.CDLL(None,use_errno=True)\n"
                    "calls=[(\"mount\",165,0),(\"kexec_load\",246,0),(\"bpf\",321,0),(\"init_module\",175,0),"
                    "(\"keyctl\",250,0),(\"unshare_user\",272,0x10000000),(\"setns\",308,0),"
                    "(\"perf_event_open\",298,0),(\"open_by_handle_at\",304,0),(\"userfaultfd\",323,0),"
                    "(\"reboot\",169,0),(\"umount2\",166,0),(\"pivot_root\",155,0),(\"io_uring_setup\",425,0)]\n"
                    "for n,nr,a in calls:\n"
                    "  rc=libc.syscall(nr,ctypes.c_long(a),0,0,0,0)\n"
                    "  print(n, errno.errorcode.get(ctypes.get_errno()) if rc<0 else \"ok\")\n"
                    "'",
                    out, sizeof out);
  assert_int_equal(code, 0);
  assert_string_equal(out,
                      "mount EPERM\nkexec_load EPERM\nbpf EPERM\ninit_module EPERM\nkeyctl EPERM\n"
                      "unshare_user EPERM\nsetns EPERM\nperf_event_open EPERM\nopen_by_handle_at EPERM\n"
                      "userfaultfd EPERM\nreboot EPERM\numount2 EPERM\npivot_root EPERM\nio_uring_setup EPERM\n");
}

static void test_setuid_does_not_raise(void **state) {
  (void)state;
  /* /var/tmp is on the overlay (no nosuid): only no_new_privs stops it. */
  int code = jt_run(&T, "iso-suid",
                    "cp /usr/bin/id /var/tmp/suid-id && chmod 4755 /var/tmp/suid-id && "
                    "setpriv --reuid=65534 --regid=65534 --clear-groups /var/tmp/suid-id -u",
                    out, sizeof out);
  assert_int_equal(code, 0);
  assert_string_equal(out, "65534\n");
}

static void test_writes_stay_in_own_layer(void **state) {
  (void)state;
  sbx_error err = {0};
  sbx_instance *a = NULL;
  int fd = -1;
  /* A writes into template files and stays alive while B and the host look. */
  assert_int_equal(jt_start(&T, "iso-wa", NULL,
                            "echo sbx-marker-A >> /etc/hosts && echo sbx-marker-A > /usr/sbx-marker && "
                            "grep -c sbx-marker-A /etc/hosts && exec sleep 1000",
                            &fd, &a, &err),
                   0);
  char line[64] = "";
  ssize_t n = read(fd, line, sizeof line - 1);
  assert_true(n > 0);
  line[n] = '\0';
  assert_string_equal(line, "1\n");
  int code = jt_run(&T, "iso-wb", "grep -c sbx-marker-A /etc/hosts; test -e /usr/sbx-marker; echo $?", out,
                    sizeof out);
  assert_int_equal(code, 0);
  assert_string_equal(out, "0\n1\n");
  assert_int_not_equal(access("/usr/sbx-marker", F_OK), 0);
  FILE *f = fopen("/etc/hosts", "r");
  char buf[4096];
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[len] = '\0';
  assert_null(strstr(buf, "sbx-marker-A"));
  close(fd);
  assert_int_equal(sbx_sandbox_destroy(a, &err), 0);
}

static void test_memory_limit_kills_allocator_only(void **state) {
  (void)state;
  /* small = 512 MiB; pid 1 (the shell) must survive its child's OOM. */
  int code = jt_run(&T, "iso-oom",
                    "exec 2>/dev/null; python3 -c 'b=[]\nwhile True: b.append(bytearray(32<<20))'; echo rc=$?; echo alive",
                    out, sizeof out);
  assert_int_equal(code, 0);
  assert_string_equal(out, "rc=137\nalive\n");
}

static void test_fork_bomb_stops_at_pids_limit(void **state) {
  (void)state;
  const sbx_size_tier *small = sbx_size_tier_get("small");
  int code = jt_run(&T, "iso-bomb",
                    "python3 -c '\n"
                    "import os,errno,signal\n"
                    "kids=[]\n"
                    "while True:\n"
                    "  try: pid=os.fork()\n"
                    "  except OSError as e: err=errno.errorcode[e.errno]; break\n"
                    "  if pid==0: os.execv(\"/bin/sleep\",[\"sleep\",\"1000\"])\n"
                    "  kids.append(pid)\n"
                    "for k in kids: os.kill(k,signal.SIGKILL)\n"
                    "for k in kids: os.waitpid(k,0)\n"
                    "print(\"forked\",len(kids),err)\n"
                    "'; echo alive",
                    out, sizeof out);
  assert_int_equal(code, 0);
  char want[64];
  /* pids.max counts every task: the shell and python are the other two */
  snprintf(want, sizeof want, "forked %u EAGAIN\nalive\n", small->pids_max - 2);
  assert_string_equal(out, want);
}

static void test_cannot_signal_or_ptrace_other(void **state) {
  (void)state;
  sbx_error err = {0};
  sbx_instance *a = NULL;
  assert_int_equal(jt_start(&T, "iso-sa", NULL, "exec sleep 1000", NULL, &a, &err), 0);
  pid_t hp = sbx_instance_pid(a);
  char script[512];
  snprintf(script, sizeof script,
           "python3 -c '\n"
           "import ctypes,errno,os\n"
           "try: os.kill(%d,9); print(\"killed\")\n"
           "except OSError as e: print(errno.errorcode[e.errno])\n"
           "libc=ctypes.CDLL(None,use_errno=True)\n"
           "rc=libc.ptrace(16,%d,0,0)\n"
           "print(errno.errorcode.get(ctypes.get_errno()) if rc<0 else \"attached\")\n"
           "'",
           (int)hp, (int)hp);
  int code = jt_run(&T, "iso-sb", script, out, sizeof out);
  assert_int_equal(code, 0);
  assert_string_equal(out, "ESRCH\nESRCH\n");
  assert_int_equal(kill(hp, 0), 0); /* A is untouched */
  assert_int_equal(sbx_sandbox_destroy(a, &err), 0);
}

static void ns_link(pid_t pid, const char *ns, char *buf, size_t cap) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/%s", (int)pid, ns);
  ssize_t n = readlink(path, buf, cap - 1);
  assert_true(n > 0);
  buf[n] = '\0';
}

/* The network and IPC namespaces may come from the driver's stock of fresh
 * ones: each must still be the sandbox's own, shared with neither the host
 * nor another live sandbox. */
static void test_namespaces_are_own(void **state) {
  (void)state;
  sbx_error err = {0};
  sbx_instance *a = NULL;
  assert_int_equal(jt_start(&T, "iso-nsa", NULL, "exec sleep 1000", NULL, &a, &err), 0);
  char host_net[64], host_ipc[64], a_net[64], a_ipc[64], want[256];
  ns_link(getpid(), "net", host_net, sizeof host_net);
  ns_link(getpid(), "ipc", host_ipc, sizeof host_ipc);
  ns_link(sbx_instance_pid(a), "net", a_net, sizeof a_net);
  ns_link(sbx_instance_pid(a), "ipc", a_ipc, sizeof a_ipc);
  assert_string_not_equal(a_net, host_net);
  assert_string_not_equal(a_ipc, host_ipc);
  int code = jt_run(&T, "iso-nsb", "readlink /proc/1/ns/net /proc/1/ns/ipc", out, sizeof out);
  assert_int_equal(code, 0);
  char b_net[64], b_ipc[64];
  assert_int_equal(sscanf(out, "%63s %63s", b_net, b_ipc), 2);
  assert_string_not_equal(b_net, host_net);
  assert_string_not_equal(b_net, a_net);
  assert_string_not_equal(b_ipc, host_ipc);
  assert_string_not_equal(b_ipc, a_ipc);
  snprintf(want, sizeof want, "%s\n%s\n", b_net, b_ipc);
  assert_string_equal(out, want);
  assert_int_equal(sbx_sandbox_destroy(a, &err), 0);
}

/* ---- pid 1 (the real silkd) out of the workloads' reach ----
 * These run twice: on jails from the zygote and, with SBX_JAIL_ZYGOTE=0,
 * on jails whose silkd was exec'd. */

static jt *silkd_jt(void **state) { return *state; }

/* A listener on 127.0.0.1 of the host, non-blocking; its port in *port. */
static int host_listener(int *port) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(l, 4), 0);
  socklen_t sl = sizeof sa;
  assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
  *port = ntohs(sa.sin_port);
  return l;
}

static int host_connect(int port) {
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(c, (struct sockaddr *)&sa, sizeof sa) < 0) {
    int e = errno;
    close(c);
    errno = e;
    return -1;
  }
  return c;
}

/* What sandboxd's relay_handoff does after the 101: the client's TCP
 * socket (host network namespace) goes to silkd over a carrier on the
 * agent socket, with the marker byte, and the carrier's EOF. The client
 * end is returned as an agent, already answered once through silkd. */
static sbx_agent *hand_off_client(sbx_instance *s, int *carrier) {
  int lport;
  int l = host_listener(&lport);
  int c = host_connect(lport);
  assert_true(c >= 0);
  int sv;
  while ((sv = accept4(l, NULL, NULL, SOCK_CLOEXEC)) < 0 && errno == EAGAIN) {}
  assert_true(sv >= 0);
  close(l);
  sbx_error err = {0};
  assert_int_equal(sbx_sandbox_connect(s, carrier, &err), 0);
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(sizeof(int))];
  } u = {0};
  struct iovec iov = {"", 1};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
  struct cmsghdr *h = CMSG_FIRSTHDR(&m);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(h), &sv, sizeof sv);
  assert_int_equal(sendmsg(*carrier, &m, MSG_NOSIGNAL), 1);
  assert_int_equal(shutdown(*carrier, SHUT_WR), 0);
  close(sv);
  sbx_agent *a = NULL;
  assert_int_equal(sbx_agent_open(c, &a, &err), 0);
  sbx_agent_set_timeout(a, 60000);
  sbx_resp_info info;
  char version[64];
  assert_int_equal(sbx_agent_info(a, &info, version, sizeof version, &err), 0);
  return a;
}

/* The attack of the hardening issue, step by step, while silkd holds a
 * handed-off client socket: take pid 1's descriptors (pidfd_open +
 * pidfd_getfd, through every thread, and /proc/1/fd), look for any socket
 * of the host inherited from silkd, and reach the host through it
 * (AF_UNSPEC connect, then connect to a host loopback listener). Then a
 * listener the workload opens must not be in the host's namespace. */
static void test_handed_off_socket_out_of_reach(void **state) {
  jt *t = silkd_jt(state);
  sbx_instance *s = jt_clone(t, "iso-steal");
  int carrier = -1;
  sbx_agent *client = hand_off_client(s, &carrier);
  int tport, lport;
  int target = host_listener(&tport);
  close(host_listener(&lport)); /* a port free on the host */
  sbx_agent *a = jt_agent(s);
  char script[4096];
  snprintf(script, sizeof script,
           "python3 -c '\n"
           "import ctypes,errno,os,select,socket\n"
           "libc=ctypes.CDLL(None,use_errno=True)\n"
           "L=ctypes.c_long\n"
           "def en(): return errno.errorcode.get(ctypes.get_errno())\n"
           "p=libc.syscall(434,L(1),L(0))\n"
           "print(\"pidfd_open\", en() if p<0 else \"ok\")\n"
           "p=libc.syscall(434,L((1<<32)|1),L(0))\n"
           "print(\"pidfd_open_hi\", en() if p<0 else \"ok\")\n"
           "taken=0\n"
           "for tid in os.listdir(\"/proc/1/task\"):\n"
           "  pf=libc.syscall(434,L(int(tid)),L(0 if tid==\"1\" else 0o200))\n"
           "  for fd in range(64 if pf>=0 else 0):\n"
           "    if libc.syscall(438,L(pf),L(fd),L(0))>=0: taken+=1\n"
           "print(\"taken\", taken)\n"
           "seen=set()\n"
           "for fd in os.listdir(\"/proc/1/fd\"):\n"
           "  for f in (os.readlink, lambda p: os.close(os.open(p, os.O_RDONLY))):\n"
           "    try: f(\"/proc/1/fd/\"+fd)\n"
           "    except OSError as e: seen.add(errno.errorcode[e.errno])\n"
           "print(\"proc fd\", \" \".join(sorted(seen)))\n"
           "reached=0; inet=0\n"
           "for fd in os.listdir(\"/proc/self/fd\"):\n"
           "  try: s=socket.socket(fileno=os.dup(int(fd)))\n"
           "  except OSError: continue\n"
           "  if s.family!=socket.AF_INET and s.family!=socket.AF_INET6: continue\n"
           "  inet+=1\n"
           "  libc.connect(L(s.fileno()),b\"\\0\"*16,L(16))\n"
           "  r=s.connect_ex((\"127.0.0.1\",%d))\n"
           "  if r==errno.EINPROGRESS:\n"
           "    select.select([],[s],[],10); r=s.getsockopt(socket.SOL_SOCKET,socket.SO_ERROR)\n"
           "  if r==0: reached+=1\n"
           "print(\"inet fds\", inet, \"reached\", reached)\n"
           "'\n"
           "python3 -c '\n"
           "import socket,os,time\n"
           "s=socket.socket()\n"
           "s.bind((\"127.0.0.1\",%d))\n"
           "s.listen(4)\n"
           "open(\"/tmp/listening\",\"w\").write(str(os.getpid()))\n"
           "time.sleep(300)\n"
           "' >/dev/null 2>&1 &\n"
           "while [ ! -s /tmp/listening ]; do sleep 0.05; done; echo listening",
           tport, lport);
  char out2[4096];
  assert_int_equal(jt_sh(a, script, out2, sizeof out2), 0);
  assert_string_equal(out2, "pidfd_open EPERM\npidfd_open_hi EPERM\ntaken 0\nproc fd EACCES\n"
                            "inet fds 0 reached 0\nlistening\n");
  /* Nothing reached the host's listener, and the workload's listener is
   * not on the host: connecting to its port is refused while it lives. */
  assert_int_equal(accept4(target, NULL, NULL, SOCK_CLOEXEC), -1);
  assert_int_equal(errno, EAGAIN);
  assert_int_equal(host_connect(lport), -1);
  assert_int_equal(errno, ECONNREFUSED);
  assert_int_equal(jt_sh(a, "kill -0 $(cat /tmp/listening) && echo alive", out2, sizeof out2), 0);
  assert_string_equal(out2, "alive\n");
  /* The handed-off connection is still silkd's and still served. */
  sbx_error err = {0};
  sbx_resp_info info;
  char version[64];
  assert_int_equal(sbx_agent_info(client, &info, version, sizeof version, &err), 0);
  sbx_agent_close(client);
  sbx_agent_close(a);
  close(carrier);
  close(target);
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

/* The state letter of /proc/<pid>/stat (after the comm in parentheses). */
static char proc_state(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  assert_non_null(p);
  return p[2];
}

/* ptrace (ATTACH, SEIZE, on every thread, with the pid's high bits set
 * to slip past a 64-bit compare), process_vm_readv, /proc/1/mem and
 * environ, and SIGSTOP, SIGTERM, SIGINT, SIGHUP to pid 1: silkd is
 * neither stopped, ended nor read, and serves the next exec. */
static void test_silkd_cannot_be_traced_or_stopped(void **state) {
  jt *t = silkd_jt(state);
  sbx_instance *s = jt_clone(t, "iso-trace");
  sbx_agent *a = jt_agent(s);
  char o[4096];
  int code = jt_sh(a,
                   "python3 -c '\n"
                   "import ctypes,errno,os,signal\n"
                   "libc=ctypes.CDLL(None,use_errno=True)\n"
                   "L=ctypes.c_long\n"
                   "def r(n,rc): print(n, errno.errorcode.get(ctypes.get_errno()) if rc<0 else \"ok\")\n"
                   "r(\"attach\",libc.syscall(101,L(16),L(1),L(0),L(0)))\n"
                   "r(\"seize\",libc.syscall(101,L(0x4206),L(1),L(0),L(0)))\n"
                   "r(\"attach_hi\",libc.syscall(101,L(16),L((1<<32)|1),L(0),L(0)))\n"
                   "buf=ctypes.create_string_buffer(64)\n"
                   "iov=(ctypes.c_void_p*2)(ctypes.cast(buf,ctypes.c_void_p).value,64)\n"
                   "r(\"vm_readv\",libc.syscall(310,L(1),iov,L(1),iov,L(1),L(0)))\n"
                   "r(\"vm_writev\",libc.syscall(311,L(1),iov,L(1),iov,L(1),L(0)))\n"
                   "n=0\n"
                   "for tid in os.listdir(\"/proc/1/task\"):\n"
                   "  if libc.syscall(101,L(16),L(int(tid)),L(0),L(0))>=0: n+=1\n"
                   "  if libc.syscall(310,L(int(tid)),iov,L(1),iov,L(1),L(0))>=0: n+=1\n"
                   "print(\"threads reached\", n)\n"
                   "for f in (\"mem\",\"environ\"):\n"
                   "  try: open(\"/proc/1/\"+f,\"rb\").read(1); print(f,\"ok\")\n"
                   "  except OSError as e: print(f,errno.errorcode[e.errno])\n"
                   "for sig in (signal.SIGSTOP,signal.SIGTERM,signal.SIGINT,signal.SIGHUP): os.kill(1,sig)\n"
                   "print(\"signals sent\")\n"
                   "'",
                   o, sizeof o);
  assert_int_equal(code, 0);
  assert_string_equal(o, "attach EPERM\nseize EPERM\nattach_hi EPERM\nvm_readv EPERM\nvm_writev EPERM\n"
                         "threads reached 0\nmem EACCES\nenviron EACCES\nsignals sent\n");
  char st = proc_state(sbx_instance_pid(s));
  assert_true(st != 'T' && st != 't');
  assert_int_equal(jt_sh(a, "echo alive", o, sizeof o), 0);
  assert_string_equal(o, "alive\n");
  sbx_agent_close(a);
  sbx_error err = {0};
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

static int silkd_setup(void **state) {
  jt *t = calloc(1, sizeof *t);
  if (!t || jt_open(t) < 0) return -1;
  *state = t;
  return 0;
}
static int silkd_teardown(void **state) {
  jt_close(*state);
  free(*state);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_only_own_processes),
      cmocka_unit_test(test_hostname_is_id),
      cmocka_unit_test(test_net_none_only_lo),
      cmocka_unit_test(test_net_cannot_reach_host_loopback),
      cmocka_unit_test(test_host_secrets_masked),
      cmocka_unit_test(test_proc_sensitive_unusable),
      cmocka_unit_test(test_seccomp_denies),
      cmocka_unit_test(test_setuid_does_not_raise),
      cmocka_unit_test(test_writes_stay_in_own_layer),
      cmocka_unit_test(test_memory_limit_kills_allocator_only),
      cmocka_unit_test(test_fork_bomb_stops_at_pids_limit),
      cmocka_unit_test(test_cannot_signal_or_ptrace_other),
      cmocka_unit_test(test_namespaces_are_own),
  };
  int failed = cmocka_run_group_tests_name("jail_isolation", tests, setup, teardown);
  const struct CMUnitTest pid1[] = {
      cmocka_unit_test(test_handed_off_socket_out_of_reach),
      cmocka_unit_test(test_silkd_cannot_be_traced_or_stopped),
  };
  failed += cmocka_run_group_tests_name("jail_pid1_zygote", pid1, silkd_setup, silkd_teardown);
  setenv("SBX_JAIL_ZYGOTE", "0", 1);
  failed += cmocka_run_group_tests_name("jail_pid1_exec", pid1, silkd_setup, silkd_teardown);
  return failed;
}
