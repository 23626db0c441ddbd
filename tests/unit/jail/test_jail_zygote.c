/* The jail zygote (libsandbox/driver/jail/zygote*.c, silkd --zygote): a
 * silkd cloned from it must be the same pid 1 as an exec'd one (status,
 * capabilities, seccomp, fds, cmdline), must carry nothing of the other
 * jails' requests, and a dead zygote must cost nothing but speed: clones
 * fall back to exec and the next destroy starts a new zygote. */
#include <dirent.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/user.h>
#include <sys/wait.h>

#include <sandbox/agent.h>

#include "jail_test.h"
#include "zygote_probe.h"
#include "driver/jail/jail.h"

#define CYCLES 200

static jt T;

static int setup(void **state) {
  (void)state;
  if (access(SBX_BUILD_BIN_DIR "/silkd", X_OK) != 0) {
    fprintf(stderr, "silkd not built at %s\n", SBX_BUILD_BIN_DIR "/silkd");
    return -1;
  }
  unsetenv("SBX_JAIL_ZYGOTE");
  return jt_open(&T) < 0 ? -1 : 0;
}
static int teardown(void **state) {
  (void)state;
  jt_close(&T);
  return 0;
}



static void destroy(sbx_instance *s) {
  sbx_error err = {0};
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

/* Runs script through the jail's silkd; its stdout, and its code. */
static int run_in(sbx_instance *s, const char *script, char *out, size_t cap) {
  sbx_agent *a = jt_agent(s);
  int code = jt_sh(a, script, out, cap);
  sbx_agent_close(a);
  return code;
}

/* What pid 1 is, with the numbers that differ from run to run (socket
 * inodes, pids of the probe) left out. It first reads its stdin to the end:
 * until silkd has handled the client's stdin_close it holds the write end
 * of the probe's stdin pipe, which would show in pid 1's fds or not. */
static const char probe[] =
    "cat >/dev/null; "
    "tr '\\0' ' ' </proc/1/cmdline; echo; cat /proc/1/comm; "
    "grep -E '^(Uid|Gid|Groups|NoNewPrivs|Seccomp|Seccomp_filters|Cap[A-Za-z]+|NSpid|PPid|Nice)' /proc/1/status; "
    /* How many descriptors pid 1 holds, not which numbers: a workload
     * cannot read what they are (pid 1 is not dumpable), and the numbers
     * depend on when silkd closed the driver's readiness connection. */
    "echo fds $(ls /proc/1/fd | wc -l); "
    "cat /proc/1/environ | tr '\\0' '\\n'; readlink /proc/1/root /proc/1/cwd; hostname; ls /";

static void test_zygote_pid1_same_as_exec(void **state) {
  (void)state;
  assert_true(zygote_pid() > 0);
  char a[8192], b[8192];
  sbx_instance *s = jt_clone(&T, "zy-same");
  assert_int_equal(run_in(s, probe, a, sizeof a), 0);
  destroy(s);
  assert_non_null(strstr(a, "silkd --listen fd:3 \nsilkd\n"));
  assert_non_null(strstr(a, "NoNewPrivs:\t1"));
  assert_non_null(strstr(a, "Seccomp:\t2"));

  /* the same driver with the zygote off */
  jt_close(&T);
  setenv("SBX_JAIL_ZYGOTE", "0", 1);
  assert_int_equal(jt_open(&T), 0);
  unsetenv("SBX_JAIL_ZYGOTE");
  assert_true(zygote_pid() < 0);
  s = jt_clone(&T, "zy-same");
  assert_int_equal(run_in(s, probe, b, sizeof b), 0);
  destroy(s);
  jt_close(&T);
  assert_int_equal(jt_open(&T), 0);
  if (strcmp(a, b) != 0) fail_msg("zygote:\n%s\nexec:\n%s", a, b);
}

/* silkd's own threads (fs_pull's tar worker) work in a child of the
 * zygote: glibc there runs on the zygote's thread state, fixed up after a
 * raw clone (tid, robust list). */
static void test_zygote_silkd_threads(void **state) {
  (void)state;
  sbx_instance *s = jt_clone(&T, "zy-threads");
  sbx_error err = {0};
  sbx_agent *a = jt_agent(s);
  for (int round = 0; round < 3; round++) {
    sbx_wire_req req;
    memset(&req, 0, sizeof req);
    req.op = SBX_OP_FS_PULL;
    req.u.fs_pull.path = "/etc/hostname";
    assert_int_equal(sbx_agent_send(a, &req, &err), 0);
    size_t total = 0;
    const void *data;
    size_t n;
    int rc;
    while ((rc = sbx_agent_next_data(a, &data, &n, &err)) == 1) total += n;
    if (rc != 0) fail_msg("fs_pull: %s", err.msg);
    assert_true(total >= 1024); /* a tar: header, the file, end blocks */
  }
  sbx_agent_close(a);
  char out[256];
  assert_int_equal(run_in(s, "echo still", out, sizeof out), 0);
  assert_string_equal(out, "still\n");
  destroy(s);
}

/* Occurrences of each of two needles in the readable memory of pid
 * (from the host: a workload can no longer read its pid 1, which is
 * non-dumpable). */
static void count_in_memory(pid_t pid, const char *const needles[2], int hits[2]) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *maps = fopen(path, "r");
  assert_non_null(maps);
  snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
  int mem = open(path, O_RDONLY | O_CLOEXEC);
  assert_true(mem >= 0);
  static char buf[(1 << 20) + 128];
  hits[0] = hits[1] = 0;
  while (fgets(line, sizeof line, maps)) {
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r') continue;
    if (strstr(line, "[vvar") || strstr(line, "[vsyscall")) continue;
    if (hi - lo > 1ul << 32) continue; /* a sanitizer's shadow: reserved, never the heap */
    size_t tail = 0;
    for (unsigned long off = lo; off < hi; off += 1 << 20) {
      size_t want = hi - off < (1ul << 20) ? hi - off : 1ul << 20;
      ssize_t n = pread(mem, buf + tail, want, (off_t)off);
      if (n <= 0) break;
      size_t len = tail + (size_t)n;
      for (int i = 0; i < 2; i++) {
        size_t nl = strlen(needles[i]);
        for (char *p = buf; (p = memmem(p, len - (size_t)(p - buf), needles[i], nl)) != NULL; p++) hits[i]++;
      }
      /* The last bytes again in front of the next piece, shorter than
       * either needle, so a match across pieces counts exactly once. */
      tail = len < 127 ? len : 127;
      memmove(buf, buf + len - tail, tail);
    }
  }
  close(mem);
  fclose(maps);
}

/* A jail's pid 1 holds no trace of the requests the zygote served, its
 * own or other jails': no host path of the driver's (the run directory)
 * and no other jail's id, anywhere in its readable memory. */
static void test_zygote_child_holds_no_request(void **state) {
  (void)state;
  sbx_instance *first = jt_clone(&T, "zy-marker-7f3a");
  sbx_instance *s = jt_clone(&T, "zy-look");
  char out[256];
  assert_int_equal(run_in(s, "echo served", out, sizeof out), 0);
  const char *const needles[2] = {"zy-marker-7f3a", T.run_dir};
  int hits[2];
  count_in_memory(sbx_instance_pid(s), needles, hits);
  assert_int_equal(hits[0], 0);
  assert_int_equal(hits[1], 0);
  /* The scan finds what is there: this process holds both. */
  count_in_memory(getpid(), needles, hits);
  assert_true(hits[0] > 0 && hits[1] > 0);
  destroy(s);
  destroy(first);
}

#if defined(__x86_64__)
/* The stack protector value of a process (at %fs:0x28), read from the
 * host with ptrace. */
static uint64_t canary_of(pid_t pid) {
  assert_int_equal(ptrace(PTRACE_ATTACH, pid, NULL, NULL), 0);
  int st;
  assert_int_equal(waitpid(pid, &st, __WALL), pid);
  struct user_regs_struct regs;
  assert_int_equal(ptrace(PTRACE_GETREGS, pid, NULL, &regs), 0);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  uint64_t v = 0;
  assert_int_equal(pread(fd, &v, sizeof v, (off_t)(regs.fs_base + 0x28)), (ssize_t)sizeof v);
  close(fd);
  assert_int_equal(ptrace(PTRACE_DETACH, pid, NULL, NULL), 0);
  return v;
}

/* Each jail's silkd has a stack protector value of its own, not the
 * zygote's (which every fork would otherwise share). */
static void test_zygote_children_have_own_canary(void **state) {
  (void)state;
  pid_t z = zygote_pid();
  assert_true(z > 0);
  sbx_instance *a = jt_clone(&T, "zy-canary-a"), *b = jt_clone(&T, "zy-canary-b");
  uint64_t cz = canary_of(z), ca = canary_of(sbx_instance_pid(a)), cb = canary_of(sbx_instance_pid(b));
  assert_true(cz != 0 && ca != 0 && cb != 0);
  assert_true(ca != cz && cb != cz && ca != cb);
  char out[64];
  assert_int_equal(run_in(a, "echo ok", out, sizeof out), 0); /* still serving after the stop */
  destroy(b);
  destroy(a);
}
#endif

/* A killed zygote: the sandboxes it made live on (they are the driver's
 * children), the next clone execs silkd instead, its destroy starts a new
 * zygote, and the clone after that uses it. */
static void test_dead_zygote_falls_back_and_restarts(void **state) {
  (void)state;
  pid_t z = zygote_pid();
  assert_true(z > 0);
  sbx_instance *before = jt_clone(&T, "zy-before");
  kill(z, SIGKILL);
  /* the driver reaps it when it finds it dead; wait only for its death */
  for (int i = 0; i < 200; i++) {
    char p[64], st[256] = "";
    snprintf(p, sizeof p, "/proc/%d/stat", (int)z);
    FILE *f = fopen(p, "r");
    if (!f) break;
    size_t n = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[n] = '\0';
    char *rp = strrchr(st, ')');
    if (rp && rp[2] == 'Z') break;
    usleep(10000);
  }
  char out[4096];
  assert_int_equal(run_in(before, "echo alive", out, sizeof out), 0);
  assert_string_equal(out, "alive\n");
  destroy(before);
  /* The session of pid 1 tells the paths apart: exec'd, it leads its own
   * (1); from the zygote, it is in the zygote's, which has no pid inside (0). */
  sbx_instance *s = jt_clone(&T, "zy-fallback");
  assert_int_equal(run_in(s, "tr '\\0' ' ' </proc/1/cmdline; cut -d' ' -f6 /proc/1/stat", out, sizeof out), 0);
  assert_string_equal(out, "silkd --listen fd:3 1\n");
  destroy(s);
  pid_t z2 = zygote_pid();
  assert_true(z2 > 0);
  assert_int_not_equal(z2, z);
  s = jt_clone(&T, "zy-again");
  assert_int_equal(run_in(s, "cut -d' ' -f6 /proc/1/stat", out, sizeof out), 0);
  assert_string_equal(out, "0\n");
  destroy(s);
  assert_int_equal(zygote_pid(), z2);
}

/* Many clones through the zygote leave nothing behind, in the driver's
 * process or in the zygote: fds, children, mounts, run directories. */
static void test_zygote_cycles_leave_nothing(void **state) {
  (void)state;
  pid_t z = zygote_pid();
  assert_true(z > 0);
  char zfd[64];
  snprintf(zfd, sizeof zfd, "/proc/%d/fd", (int)z);
  sbx_instance *warm = jt_clone(&T, "zy-warm");
  destroy(warm);
  int fds0 = jt_count_dir("/proc/self/fd"), zfds0 = jt_count_dir(zfd), scratch0 = jt_count_dir(T.run_dir);
  int mounts0 = 0;
  char line[4096];
  FILE *f = fopen("/proc/self/mountinfo", "r");
  while (fgets(line, sizeof line, f)) mounts0++;
  fclose(f);
  for (int i = 0; i < CYCLES; i++) {
    char id[32];
    snprintf(id, sizeof id, "zy-cycle-%d", i);
    sbx_instance *s = jt_clone(&T, id);
    destroy(s);
  }
  int mounts1 = 0;
  f = fopen("/proc/self/mountinfo", "r");
  while (fgets(line, sizeof line, f)) mounts1++;
  fclose(f);
  assert_int_equal(zygote_pid(), z);
  assert_int_equal(jt_count_dir("/proc/self/fd"), fds0);
  assert_int_equal(jt_count_dir(zfd), zfds0);
  assert_int_equal(jt_count_dir(T.run_dir), scratch0);
  assert_int_equal(mounts1, mounts0);
}

/* The zygote checks every request before it clones: a short one, a wrong
 * magic, one without the fds a jail needs, sizes that do not add up, an
 * op string out of the arena, an unterminated hostname and a well-formed
 * one that asks for no new namespaces are each answered EPROTO with no
 * child, and it goes on serving; the end of its socket ends it with 0. */
static void test_zygote_refuses_malformed(void **state) {
  (void)state;
  int sp[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(sp[1], 3);
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0), dup2(null, 1);
    execl(SBX_BUILD_BIN_DIR "/silkd", "silkd", "--zygote", "fd:3", (char *)NULL);
    _exit(127);
  }
  close(sp[1]);
  jail_zyg_hello hello;
  assert_int_equal(read(sp[0], &hello, sizeof hello), (ssize_t)sizeof hello);
  assert_int_equal(hello.magic, JAIL_ZYG_MAGIC);
  assert_int_equal(hello.req_size, sizeof(jail_zyg_req));

  static jail_zyg_req bad[6];
  memset(bad, 0, sizeof bad);
  for (int i = 0; i < 6; i++) bad[i].magic = JAIL_ZYG_MAGIC;
  bad[0].magic = 0xdeadbeef;                      /* another build's request */
  bad[1].nops = JAIL_OPS_MAX + 1;                 /* more ops than a plan has */
  bad[2].arena_len = 100;                         /* the arena is not there */
  bad[3].nops = 1;                                /* an op string past the arena */
  bad[3].ops[0].src = 7;
  memset(bad[4].hostname, 'x', sizeof bad[4].hostname); /* no terminator */
  /* Well formed but in the host's namespaces (clone_flags 0): refused. Its
   * hostname is the host's own, so even a regression that ran it would
   * change nothing there. */
  assert_int_equal(gethostname(bad[5].hostname, sizeof bad[5].hostname - 1), 0);
  for (int i = 3; i < 6; i++) bad[i].fdmask = 1u << ZFD_GO | 1u << ZFD_REPORT | 1u << ZFD_DEVNULL;
  const size_t sizes[] = {4, sizeof bad[0], sizeof bad[1], sizeof bad[2], sizeof bad[3], sizeof bad[4], sizeof bad[5]};
  const void *msgs[] = {&bad[0], &bad[0], &bad[1], &bad[2], &bad[3], &bad[4], &bad[5]};
  for (size_t i = 0; i < 7; i++) {
    /* The first four come without fds, itself a refusal; the last three
     * carry the three a jail needs, so the plan is checked. */
    int fds[3];
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int k = 0; k < 3; k++) fds[k] = devnull;
    union {
      struct cmsghdr h;
      char b[CMSG_SPACE(sizeof fds)];
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {(void *)msgs[i], sizes[i]};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (i >= 4) {
      m.msg_control = u.b;
      m.msg_controllen = sizeof u.b;
      struct cmsghdr *h = CMSG_FIRSTHDR(&m);
      h->cmsg_level = SOL_SOCKET;
      h->cmsg_type = SCM_RIGHTS;
      h->cmsg_len = CMSG_LEN(sizeof fds);
      memcpy(CMSG_DATA(h), fds, sizeof fds);
    }
    assert_int_equal(sendmsg(sp[0], &m, 0), (ssize_t)sizes[i]);
    close(devnull);
    jail_zyg_reply r = {-1, 0};
    assert_int_equal(read(sp[0], &r, sizeof r), (ssize_t)sizeof r);
    if (r.errnum != EPROTO) fprintf(stderr, "case %zu: pid %d errnum %d\n", i, r.pid, r.errnum);
    assert_int_equal(r.pid, 0);
    assert_int_equal(r.errnum, EPROTO);
  }
  close(sp[0]);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_zygote_pid1_same_as_exec),
      cmocka_unit_test(test_zygote_child_holds_no_request),
      cmocka_unit_test(test_zygote_silkd_threads),
#if defined(__x86_64__)
      cmocka_unit_test(test_zygote_children_have_own_canary),
#endif
      cmocka_unit_test(test_dead_zygote_falls_back_and_restarts),
      cmocka_unit_test(test_zygote_cycles_leave_nothing),
      cmocka_unit_test(test_zygote_refuses_malformed),
  };
  return cmocka_run_group_tests_name("jail_zygote", tests, setup, teardown);
}
