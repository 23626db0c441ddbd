/* The qemu driver end to end, with real VMs (TCG here and in CI): build the
 * guest image, a golden, two clones; check each clone is its own machine
 * running the guest kernel with the tier's vCPUs, with a fresh identity, no
 * route out and no trace left after destroy.
 *
 * QEMU, the cloud kernel and busybox-static must be installed (scripts/setup
 * does it): their absence fails the test, it never skips. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <sandbox/agent.h>
#include <sandbox/core.h>
#include <sandbox/driver.h>

#include "core/env.h"
#include "driver/kvm.h"
#include "driver/qemu/qemu.h"

static char base[64];
static char run_dir[128], guest_dir[128], tpl_dir[128], gold_dir[128];
static sbx_driver *drv;
static sbx_template *tpl;
static sbx_golden *golden;
static char kernel_release[128];
static char accel[16];

static int sh(const char *cmd) {
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int setup(void **state) {
  (void)state;
  snprintf(base, sizeof base, "/tmp/sbx-qemu-test-%d", (int)getpid());
  snprintf(run_dir, sizeof run_dir, "%s/run", base);
  snprintf(guest_dir, sizeof guest_dir, "%s/guest", base);
  snprintf(tpl_dir, sizeof tpl_dir, "%s/templates", base);
  snprintf(gold_dir, sizeof gold_dir, "%s/goldens", base);
  mkdir(base, 0700);
  /* The image build is part of what is tested: fresh, into our own dir. */
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s/scripts/build-guest-image --out %s --silkd %s/silkd >&2", SBX_SOURCE_DIR, guest_dir,
           SBX_BUILD_BIN_DIR);
  if (sh(cmd) != 0) {
    fprintf(stderr, "build-guest-image failed\n");
    return -1;
  }
  char p[256];
  snprintf(p, sizeof p, "%s/kernel.release", guest_dir);
  FILE *f = fopen(p, "r");
  if (!f || !fgets(kernel_release, sizeof kernel_release, f)) return -1;
  fclose(f);
  kernel_release[strcspn(kernel_release, "\n")] = '\0';
  /* A host whose /dev/kvm never boots a kernel (as here) is told apart by
   * the probe, but CI pins TCG anyway; a KVM runner sets
   * SBX_TEST_QEMU_ACCEL=kvm (or auto) to test KVM instead. */
  snprintf(accel, sizeof accel, "%s", getenv("SBX_TEST_QEMU_ACCEL") ? getenv("SBX_TEST_QEMU_ACCEL") : "tcg");
  /* the config decides here, not a stray environment */
  static const char *const envs[] = {"SBX_QEMU", "SBX_GUEST_DIR", "SBX_GUEST_BUILDER", "SBX_QEMU_ACCEL",
                                     "SBX_QEMU_RESTORE", "SBX_QEMU_AGENT"};
  for (size_t i = 0; i < sizeof envs / sizeof *envs; i++) unsetenv(envs[i]);
  sbx_driver_config cfg = SBX_DRIVER_CONFIG_INIT(.templates_dir = tpl_dir, .goldens_dir = gold_dir,
                                                 .run_dir = run_dir, .silkd_path = SBX_BUILD_BIN_DIR "/silkd",
                                                 .qemu_guest_dir = guest_dir, .qemu_accel = accel);
  sbx_error err = {0};
  if (sbx_driver_open("qemu", &cfg, &drv, &err) < 0) {
    fprintf(stderr, "driver open: %s\n", err.msg);
    return -1;
  }
  sbx_template_spec ts = SBX_TEMPLATE_SPEC_INIT(.name = "host");
  if (sbx_template_prepare(drv, &ts, &tpl, &err) < 0) {
    fprintf(stderr, "template: %s\n", err.msg);
    return -1;
  }
  uint64_t t0 = sbx_now_ns();
  if (sbx_golden_build(drv, tpl, NULL, &golden, &err) < 0) {
    fprintf(stderr, "golden: %s\n", err.msg);
    return -1;
  }
  fprintf(stderr, "golden built in %.0f ms\n", (double)(sbx_now_ns() - t0) / 1e6);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  sbx_golden_release(drv, golden);
  sbx_template_release(drv, tpl);
  sbx_driver_close(drv);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", base);
  sh(cmd);
  return 0;
}

/* Run argv in s; stdout (trimmed) into out; returns the exit code. */
static int run(sbx_instance *s, char *out, size_t len, const char *const *argv) {
  int fd = -1;
  sbx_error err = {0};
  if (sbx_sandbox_connect(s, &fd, &err) < 0) fail_msg("connect: %s", err.msg);
  sbx_agent *a = NULL;
  assert_int_equal(sbx_agent_open(fd, &a, &err), 0);
  sbx_agent_set_timeout(a, 60000);
  sbx_buf o = SBX_BUF_INIT(1 << 20), e = SBX_BUF_INIT(1 << 20);
  int code = -1;
  if (sbx_agent_run(a, argv, &o, &e, &code, &err) < 0) fail_msg("run %s: %s", argv[0], err.msg);
  sbx_agent_close(a);
  snprintf(out, len, "%s", o.ptr ? o.ptr : "");
  size_t n = strlen(out);
  while (n && (out[n - 1] == '\n' || out[n - 1] == ' ')) out[--n] = '\0';
  sbx_buf_free(&o);
  sbx_buf_free(&e);
  return code;
}

static int sh_in(sbx_instance *s, char *out, size_t len, const char *script) {
  const char *argv[] = {"/bin/sh", "-c", script, NULL};
  return run(s, out, len, argv);
}

static sbx_instance *clone_one(const char *id) {
  sbx_clone_spec cs;
  sbx_clone_spec_init(&cs);
  cs.id = id;
  sbx_instance *s = NULL;
  sbx_error err = {0};
  uint64_t t0 = sbx_now_ns();
  if (sbx_sandbox_clone(drv, golden, &cs, &s, &err) < 0) fail_msg("clone %s: %s", id, err.msg);
  fprintf(stderr, "clone %s ready in %.0f ms\n", id, (double)(sbx_now_ns() - t0) / 1e6);
  return s;
}

static bool pid_alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

static void test_two_clones(void **state) {
  (void)state;
  sbx_instance *a = clone_one("qa");
  sbx_instance *b = clone_one("qb");
  sbx_instance *both[2] = {a, b};
  char out[2][4096], tmp[4096];

  struct utsname un;
  uname(&un);
  for (int i = 0; i < 2; i++) {
    const char *argv[] = {"uname", "-r", NULL};
    assert_int_equal(run(both[i], tmp, sizeof tmp, argv), 0);
    assert_string_equal(tmp, kernel_release);
    assert_string_not_equal(tmp, un.release);
    /* small = 1 vCPU */
    assert_int_equal(sh_in(both[i], tmp, sizeof tmp, "grep -c ^processor /proc/cpuinfo"), 0);
    assert_string_equal(tmp, "1");
  }

  /* identity: hostname (= id), machine-id, RNG all differ */
  for (int i = 0; i < 2; i++) assert_int_equal(sh_in(both[i], out[i], sizeof out[i], "hostname"), 0);
  assert_string_equal(out[0], "qa");
  assert_string_equal(out[1], "qb");
  for (int i = 0; i < 2; i++) {
    assert_int_equal(sh_in(both[i], out[i], sizeof out[i], "cat /etc/machine-id"), 0);
    assert_int_equal(strlen(out[i]), 32);
  }
  assert_string_not_equal(out[0], out[1]);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(sh_in(both[i], out[i], sizeof out[i], "head -c 16 /dev/urandom | od -An -tx1"), 0);
    assert_true(strlen(out[i]) >= 32);
  }
  assert_string_not_equal(out[0], out[1]);
  /* the wall clock was set: within a minute of the host's */
  assert_int_equal(sh_in(a, tmp, sizeof tmp, "date +%s"), 0);
  long long guest_now = atoll(tmp), host_now = (long long)time(NULL);
  assert_true(guest_now > host_now - 60 && guest_now < host_now + 60);

  /* a write in one clone is seen in neither the other nor a later clone */
  assert_int_equal(sh_in(a, tmp, sizeof tmp, "echo hello > /root/marker && cat /root/marker"), 0);
  assert_string_equal(tmp, "hello");
  assert_int_not_equal(sh_in(b, tmp, sizeof tmp, "test -e /root/marker"), 0);

  /* net=none: no default route, nothing routable, nothing reachable */
  for (int i = 0; i < 2; i++) {
    assert_int_equal(sh_in(both[i], tmp, sizeof tmp, "ip route"), 0);
    assert_null(strstr(tmp, "default"));
    assert_int_not_equal(sh_in(both[i], tmp, sizeof tmp, "ip route get 1.1.1.1 2>&1"), 0);
    assert_int_not_equal(sh_in(both[i], tmp, sizeof tmp, "wget -q -T 3 -O - http://10.0.2.2/ 2>&1"), 0);
  }

  /* many concurrent agent connections, as vsock gives */
  int fds[8];
  sbx_error err = {0};
  for (int i = 0; i < 8; i++) {
    assert_int_equal(sbx_sandbox_connect(a, &fds[i], &err), 0);
  }
  for (int i = 0; i < 8; i++) assert_int_equal(sbx_ready_probe(fds[i], 30000, &err), 0);
  for (int i = 0; i < 8; i++) close(fds[i]);

  /* pause / resume / stats */
  sbx_stats st;
  assert_int_equal(sbx_sandbox_stats(a, &st, &err), 0);
  assert_true(st.cpu_ns > 0);
  assert_true(st.mem_bytes > 0);
  assert_int_equal(st.mem_limit, sbx_size_tier_get("small")->mem_bytes);
  assert_int_equal(sbx_sandbox_pause(a, &err), 0);
  assert_int_equal(sbx_sandbox_resume(a, &err), 0);
  assert_int_equal(sh_in(a, tmp, sizeof tmp, "echo alive"), 0);
  assert_string_equal(tmp, "alive");

  /* the golden never saw the write: a third clone lacks it too */
  sbx_instance *c = clone_one("qc");
  assert_int_not_equal(sh_in(c, tmp, sizeof tmp, "test -e /root/marker"), 0);

  /* destroy leaves no QEMU, socket or directory behind */
  sbx_instance *all[3] = {a, b, c};
  for (int i = 0; i < 3; i++) {
    pid_t pid = all[i]->qemu_pid;
    char dir[256];
    snprintf(dir, sizeof dir, "%s/%s", run_dir, sbx_instance_id(all[i]));
    assert_int_equal(access(dir, F_OK), 0);
    assert_int_equal(sbx_sandbox_destroy(all[i], &err), 0);
    assert_false(pid_alive(pid));
    assert_int_not_equal(access(dir, F_OK), 0);
  }
  /* only the keyless golden's directory remains, until its release */
  DIR *d = opendir(run_dir);
  assert_non_null(d);
  struct dirent *de;
  int left = 0;
  while ((de = readdir(d)) != NULL)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strncmp(de->d_name, ".golden-", 8)) left++;
  closedir(d);
  assert_int_equal(left, 0);
}

static int collect_out(void *ud, sbx_stream stream, const void *data, size_t n) {
  if (stream == SBX_STREAM_STDOUT) sbx_buf_add(ud, data, n, NULL);
  return 0;
}

/* The host template is busybox: a shell session (what `sbxctl exec
 * --session` and `sbxctl shell` need) runs on its /bin/sh, state kept
 * between commands. */
static void test_host_shell_session(void **state) {
  (void)state;
  sbx_instance *s = clone_one("qsh");
  int fd = -1;
  sbx_error err = {0};
  assert_int_equal(sbx_sandbox_connect(s, &fd, &err), 0);
  sbx_agent *a = NULL;
  assert_int_equal(sbx_agent_open(fd, &a, &err), 0);
  sbx_agent_set_timeout(a, 60000);
  char id[128];
  sbx_req_session_create sc = {.id = "ops"};
  if (sbx_agent_session_create(a, &sc, id, sizeof id, &err) < 0) fail_msg("session_create: %s", err.msg);
  /* argv words are quoted by silkd; eval runs a string in the session. */
  static const char *const cmds[][4] = {{"sh", "-c", "echo ok", "ok\n"},
                                        {"eval", "cd /tmp && X=kept", NULL, ""},
                                        {"eval", "echo $X $PWD", NULL, "kept /tmp\n"}};
  for (size_t i = 0; i < 3; i++) {
    const char *argv[] = {cmds[i][0], cmds[i][1], cmds[i][2]};
    const char *want = cmds[i][3];
    sbx_req_exec ex = {.argv = {.items = argv, .len = cmds[i][2] ? 3 : 2}, .session = id};
    sbx_buf o = SBX_BUF_INIT(1 << 16);
    sbx_agent_exec_io io = {.on_output = collect_out, .ud = &o, .stdin_fd = -1};
    int code = -1;
    if (sbx_agent_exec(a, &ex, &io, &code, &err) < 0) fail_msg("exec in session: %s", err.msg);
    assert_int_equal(code, 0);
    if (o.len != strlen(want) || (o.len && memcmp(o.ptr, want, o.len))) fail_msg("%s: got \"%.*s\"", argv[1], (int)o.len, o.ptr ? o.ptr : "");
    sbx_buf_free(&o);
  }
  assert_int_equal(sbx_agent_session_rm(a, id, &err), 0);
  sbx_agent_close(a);
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

/* A QEMU that dies is reported by wait and cleaned up by destroy; no
 * zombie stays behind. */
static void test_crash_reported(void **state) {
  (void)state;
  sbx_instance *s = clone_one("qcrash");
  pid_t pid = s->qemu_pid;
  kill(pid, SIGKILL);
  sbx_error err = {0};
  int code = 0;
  assert_int_equal(sbx_sandbox_wait(s, 30000, &code, &err), 0);
  assert_int_equal(code, 128 + SIGKILL);
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
  assert_int_equal(waitpid(pid, NULL, WNOHANG), -1); /* reaped already */
  assert_int_equal(errno, ECHILD);
}

/* reconcile adopts a live VM (its agent still answers) and removes a dead
 * one's leftovers. */
static bool keep_first(void *ud, const sbx_found *f, sbx_instance *adopted) {
  sbx_instance **out = ud;
  if (adopted && !*out) {
    *out = adopted;
    return true;
  }
  return false;
}

static void test_reconcile(void **state) {
  (void)state;
  sbx_instance *s = clone_one("qrec");
  pid_t pid = s->qemu_pid;
  /* forget the handle without killing the VM, as a crashed host would */
  qmp_close(s->qmp);
  close(s->pidfd);
  sbx_free(s);
  mkdir(run_dir, 0700);
  char dead[256];
  snprintf(dead, sizeof dead, "%s/qdead", run_dir);
  mkdir(dead, 0700);
  sbx_instance *adopted = NULL;
  sbx_error err = {0};
  assert_int_equal(sbx_driver_reconcile(drv, keep_first, &adopted, &err), 1);
  assert_non_null(adopted);
  assert_string_equal(sbx_instance_id(adopted), "qrec");
  assert_int_not_equal(access(dead, F_OK), 0);
  int fd = -1;
  assert_int_equal(sbx_sandbox_connect(adopted, &fd, &err), 0);
  assert_int_equal(sbx_ready_probe(fd, 30000, &err), 0);
  close(fd);
  assert_int_equal(sbx_sandbox_destroy(adopted, &err), 0);
  /* not our child any more (adopted): it was killed; reap it ourselves */
  waitpid(pid, NULL, 0);
  assert_false(pid_alive(pid));
}

/* A directory template: imaged once to ext4 (cached), mounted read-only as
 * the guest's root under a tmpfs overlay; a keyed golden is kept and
 * adopted by the next build. */
static void test_dir_template(void **state) {
  (void)state;
  char root[256], cmd[1024];
  snprintf(root, sizeof root, "%s/rootfs", base);
  snprintf(cmd, sizeof cmd,
           "set -e; r=%s; mkdir -p $r/bin $r/etc $r/root $r/tmp $r/proc $r/sys $r/dev $r/sbin; "
           "cp /bin/busybox $r/bin/busybox; for a in sh cat uname echo hostname ls head od grep; do "
           "ln -sf busybox $r/bin/$a; done; echo root:x:0:0:root:/root:/bin/sh > $r/etc/passwd; "
           "echo from-template > $r/etc/tplmark",
           root);
  assert_int_equal(sh(cmd), 0);
  sbx_error err = {0};
  sbx_template *t = NULL;
  sbx_template_spec ts = SBX_TEMPLATE_SPEC_INIT(.name = "tiny", .path = root);
  if (sbx_template_prepare(drv, &ts, &t, &err) < 0) fail_msg("template: %s", err.msg);
  char img[256];
  snprintf(img, sizeof img, "%s/tiny/root.ext4", tpl_dir);
  struct stat st1, st2;
  assert_int_equal(stat(img, &st1), 0);
  sbx_template_release(drv, t);
  /* prepared again: the cached image is reused, not rebuilt */
  assert_int_equal(sbx_template_prepare(drv, &ts, &t, &err), 0);
  assert_int_equal(stat(img, &st2), 0);
  assert_int_equal(st1.st_ino, st2.st_ino);

  sbx_golden *g = NULL;
  static const char *const warm[] = {"/bin/sh", "-c", "echo warm > /root/warm", NULL};
  sbx_golden_spec gs = SBX_GOLDEN_SPEC_INIT(.key = "tiny-small", .warmup = warm);
  if (sbx_golden_build(drv, t, &gs, &g, &err) < 0) fail_msg("golden: %s", err.msg);
  sbx_clone_spec cs;
  sbx_clone_spec_init(&cs);
  cs.id = "qtiny";
  sbx_instance *s = NULL;
  if (sbx_sandbox_clone(drv, g, &cs, &s, &err) < 0) fail_msg("clone: %s", err.msg);
  char tmp[4096];
  assert_int_equal(sh_in(s, tmp, sizeof tmp, "cat /etc/tplmark"), 0);
  assert_string_equal(tmp, "from-template");
  assert_int_equal(sh_in(s, tmp, sizeof tmp, "cat /root/warm"), 0); /* what warmup wrote is in the golden */
  assert_string_equal(tmp, "warm");
  assert_int_equal(sh_in(s, tmp, sizeof tmp, "echo changed > /etc/tplmark && cat /etc/tplmark"), 0);
  assert_string_equal(tmp, "changed");
  const char *argv[] = {"uname", "-r", NULL};
  assert_int_equal(run(s, tmp, sizeof tmp, argv), 0);
  assert_string_equal(tmp, kernel_release);
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
  sbx_golden_release(drv, g);
  /* the keyed golden stays, and is adopted without a boot */
  char state_path[256];
  snprintf(state_path, sizeof state_path, "%s/tiny-small/state", gold_dir);
  assert_int_equal(access(state_path, R_OK), 0);
  assert_int_equal(stat(state_path, &st1), 0);
  assert_int_equal(sbx_golden_build(drv, t, &gs, &g, &err), 0);
  assert_int_equal(stat(state_path, &st2), 0);
  assert_int_equal(st1.st_ino, st2.st_ino);
  sbx_golden_release(drv, g);
  sbx_template_release(drv, t);
}

/* restore_mode copy (the default is mmap): the golden has no RAM file, the
 * clones read all of it from the stream and are still distinct machines;
 * releasing a keyless golden removes its state and RAM files. */
static void test_restore_modes(void **state) {
  (void)state;
  char ram[300];
  snprintf(ram, sizeof ram, "%s/ram", golden->dir);
  assert_int_equal(access(ram, R_OK), 0); /* the group's golden is mmap */
  sbx_driver_config cfg =
      SBX_DRIVER_CONFIG_INIT(.templates_dir = tpl_dir, .goldens_dir = gold_dir, .run_dir = run_dir,
                             .silkd_path = SBX_BUILD_BIN_DIR "/silkd", .qemu_guest_dir = guest_dir,
                             .qemu_accel = accel, .qemu_restore_mode = "copy");
  sbx_error err = {0};
  sbx_driver *d = NULL;
  int rc = sbx_driver_open("qemu", &cfg, &d, &err);
  if (rc < 0) fail_msg("open: %s", err.msg);
  sbx_golden *g = NULL;
  if (sbx_golden_build(d, tpl, NULL, &g, &err) < 0) fail_msg("golden: %s", err.msg);
  char gdir[300];
  snprintf(gdir, sizeof gdir, "%s", g->dir);
  assert_int_equal(sbxi_path_fmt(ram, sizeof ram, NULL, "%s/ram", gdir), 0);
  assert_int_not_equal(access(ram, F_OK), 0);
  sbx_instance *s[2] = {NULL, NULL};
  char out[2][256];
  for (int i = 0; i < 2; i++) {
    sbx_clone_spec cs;
    sbx_clone_spec_init(&cs);
    cs.id = i ? "qcopy1" : "qcopy0";
    if (sbx_sandbox_clone(d, g, &cs, &s[i], &err) < 0) fail_msg("clone: %s", err.msg);
    assert_int_equal(sh_in(s[i], out[i], sizeof out[i], "cat /etc/machine-id; head -c 16 /dev/urandom | od -An -tx1"), 0);
  }
  assert_string_not_equal(out[0], out[1]);
  for (int i = 0; i < 2; i++) assert_int_equal(sbx_sandbox_destroy(s[i], &err), 0);
  sbx_golden_release(d, g);
  assert_int_not_equal(access(gdir, F_OK), 0);
  sbx_driver_close(d);
}

/* sbxctl local run --driver qemu goes through driver.h like the jail: its
 * output is the guest kernel's release. sbxctl has no qemu settings of its
 * own, so the environment overrides carry them. */
static void test_sbxctl_local_run(void **state) {
  (void)state;
  char cmd[1024], out[256] = "";
  snprintf(cmd, sizeof cmd,
           "SBX_GUEST_DIR=%s SBX_QEMU_ACCEL=%s SBX_STATE_DIR=%s/sbxctl SBX_RUN_DIR=%s/sbxctl-run %s/sbxctl local run "
           "--driver qemu -- uname -r </dev/null",
           guest_dir, accel, base, base, SBX_BUILD_BIN_DIR);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  out[strcspn(out, "\n")] = '\0';
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_string_equal(out, kernel_release);
  /* nothing left in its run dir but what a keyless golden never leaves */
  snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s/sbxctl-run)\"", base);
  assert_int_equal(sh(cmd), 0);
}

/* The driver's settings come from sbx_driver_config (sandboxd's "qemu"
 * object); bad values are refused at open, the programs let each
 * environment variable override its field (the library reads none), and "auto" follows the KVM probe. A configured
 * kernel and initrd are taken as built (no builder), so these opens boot
 * nothing. */
static void test_options(void **state) {
  (void)state;
  char kernel[256], initrd[256];
  snprintf(kernel, sizeof kernel, "%s/vmlinuz", guest_dir);
  snprintf(initrd, sizeof initrd, "%s/initramfs.cpio.gz", guest_dir);
  sbx_driver_config base_cfg =
      SBX_DRIVER_CONFIG_INIT(.templates_dir = tpl_dir, .goldens_dir = gold_dir, .run_dir = run_dir,
                             .silkd_path = SBX_BUILD_BIN_DIR "/silkd", .qemu_kernel = kernel, .qemu_initrd = initrd);
  static const struct {
    const char *accel, *restore, *agent, *guest, *binary;
    int code;
    const char *needle;
  } bad[] = {
      {"xen", NULL, NULL, NULL, NULL, SBX_E_INVAL, "accel"},
      {NULL, "share", NULL, NULL, NULL, SBX_E_INVAL, "restore_mode"},
      {NULL, NULL, "virtio", NULL, NULL, SBX_E_INVAL, "agent"},
      {NULL, NULL, NULL, "guest", NULL, SBX_E_INVAL, "guest_dir"},
      {NULL, NULL, NULL, NULL, "/nonexistent/qemu-system-x86_64", SBX_E_UNSUPPORTED, "/nonexistent"},
  };
  sbx_error err = {0};
  sbx_driver *d = NULL;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    sbx_driver_config cfg = base_cfg;
    cfg.qemu_accel = bad[i].accel;
    cfg.qemu_restore_mode = bad[i].restore;
    cfg.qemu_agent = bad[i].agent;
    cfg.qemu_guest_dir = bad[i].guest;
    cfg.qemu_binary = bad[i].binary;
    assert_int_equal(sbx_driver_open("qemu", &cfg, &d, &err), bad[i].code);
    assert_null(d);
    assert_non_null(strstr(err.msg, bad[i].needle));
  }
  /* a missing kernel is named */
  sbx_driver_config cfg = base_cfg;
  cfg.qemu_kernel = "/nonexistent/vmlinuz";
  assert_int_equal(sbx_driver_open("qemu", &cfg, &d, &err), SBX_E_NOTFOUND);
  assert_non_null(strstr(err.msg, "/nonexistent/vmlinuz"));

  /* the fields are used: a bare binary name is found in PATH */
  cfg = base_cfg;
  cfg.qemu_binary = "qemu-system-x86_64";
  cfg.qemu_accel = "tcg";
  cfg.qemu_restore_mode = "copy";
  cfg.qemu_agent = "tcp";
  if (sbx_driver_open("qemu", &cfg, &d, &err) < 0) fail_msg("open: %s", err.msg);
  qemu_driver *qd = (qemu_driver *)d;
  assert_true(qd->qemu_bin[0] == '/');
  assert_non_null(strstr(qd->qemu_bin, "/qemu-system-x86_64"));
  assert_string_equal(qd->kernel, kernel);
  assert_string_equal(qd->initrd, initrd);
  assert_int_equal(qd->accel, QEMU_ACCEL_TCG);
  assert_true(qd->accel_pinned);
  assert_int_equal(qd->restore, QEMU_RESTORE_COPY);
  assert_int_equal(qd->agent, QEMU_AGENT_TCP);
  sbx_driver_close(d);

  /* the library reads no environment: a set variable changes nothing */
  setenv("SBX_QEMU_ACCEL", "tcg", 1);
  setenv("SBX_QEMU_RESTORE", "mmap", 1);
  cfg = base_cfg;
  cfg.qemu_restore_mode = "copy";
  if (sbx_driver_open("qemu", &cfg, &d, &err) < 0) fail_msg("open: %s", err.msg);
  assert_int_equal(((qemu_driver *)d)->restore, QEMU_RESTORE_COPY);
  sbx_driver_close(d);

  /* the programs' helper lets each variable override its field */
  cfg = base_cfg;
  cfg.qemu_accel = "kvm";
  cfg.qemu_restore_mode = "copy";
  sbxi_env_apply(&cfg);
  int rc = sbx_driver_open("qemu", &cfg, &d, &err);
  unsetenv("SBX_QEMU_ACCEL");
  unsetenv("SBX_QEMU_RESTORE");
  if (rc < 0) fail_msg("open: %s", err.msg);
  qd = (qemu_driver *)d;
  assert_int_equal(qd->accel, QEMU_ACCEL_TCG);
  assert_int_equal(qd->restore, QEMU_RESTORE_MMAP);
  sbx_driver_close(d);

  /* auto (the default) is the probe's answer, unpinned so a golden that
   * hangs under KVM may still fall back */
  cfg = base_cfg;
  if (sbx_driver_open("qemu", &cfg, &d, &err) < 0) fail_msg("open: %s", err.msg);
  qd = (qemu_driver *)d;
  char why[160];
  assert_int_equal(qd->accel, sbxi_kvm_usable(why, sizeof why) ? QEMU_ACCEL_KVM : QEMU_ACCEL_TCG);
  assert_false(qd->accel_pinned);
  sbx_driver_close(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_sbxctl_local_run),
      cmocka_unit_test(test_restore_modes),
      cmocka_unit_test(test_dir_template),
      cmocka_unit_test(test_two_clones),
      cmocka_unit_test(test_host_shell_session),
      cmocka_unit_test(test_crash_reported),
      cmocka_unit_test(test_reconcile),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
