/* jail_test.h - shared setup for the jail tests: a driver over private
 * directories and cgroup parent, and a helper that runs a shell script as a
 * jail's pid 1 and collects its output. Real jails: these tests need root,
 * which CI has. */
#ifndef SBX_JAIL_TEST_H
#define SBX_JAIL_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <sandbox/agent.h>
#include <sandbox/core.h>
#include <sandbox/driver.h>

#include "core/env.h"
#include "driver/driver_internal.h"

#define JT_STATE "/tmp/sbx-jail-tests"

typedef struct jt {
  char run_dir[128];
  char cgroup[64];
  sbx_driver *drv;
  sbx_template *tpl;
  sbx_golden *golden;
} jt;

/* Entries of a directory, dot files aside; -1 when it cannot be opened.
 * The leak checks count fds, run dirs and cgroups with it. */
static inline int jt_count_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (de->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* A connection to the jail's silkd, with a hang guard of a minute. */
static inline sbx_agent *jt_agent(sbx_instance *s) {
  sbx_error err = {0};
  int fd = -1;
  assert_int_equal(sbx_sandbox_connect(s, &fd, &err), 0);
  sbx_agent *a = NULL;
  assert_int_equal(sbx_agent_open(fd, &a, &err), 0);
  sbx_agent_set_timeout(a, 60000);
  return a;
}

/* Runs script with /bin/sh through a; its stdout in out, and its code. */
static inline int jt_sh(sbx_agent *a, const char *script, char *out, size_t cap) {
  sbx_error err = {0};
  sbx_buf o = SBX_BUF_INIT(1 << 20), e = SBX_BUF_INIT(1 << 20);
  const char *argv[] = {"/bin/sh", "-c", script, NULL};
  int code = -1000;
  if (sbx_agent_run(a, argv, &o, &e, &code, &err) < 0) fail_msg("exec: %s", err.msg);
  snprintf(out, cap, "%s", o.ptr ? o.ptr : "");
  sbx_buf_free(&o);
  sbx_buf_free(&e);
  return code;
}

/* A clone of the golden running the real silkd, named id; fails the test
 * with the driver's message when it cannot be made. */
static inline sbx_instance *jt_clone(jt *t, const char *id) {
  sbx_error err = {0};
  sbx_clone_spec spec;
  sbx_clone_spec_init(&spec);
  spec.id = id;
  sbx_instance *s = NULL;
  if (sbx_sandbox_clone(t->drv, t->golden, &spec, &s, &err) < 0) fail_msg("clone %s: %s", id, err.msg);
  return s;
}

static inline int jt_open(jt *t) {
  memset(t, 0, sizeof *t);
  snprintf(t->run_dir, sizeof t->run_dir, JT_STATE "/run-%d", (int)getpid());
  snprintf(t->cgroup, sizeof t->cgroup, "sandbox-test-%d", (int)getpid());
  sbx_driver_config cfg = SBX_DRIVER_CONFIG_INIT(
      .templates_dir = JT_STATE "/templates",
      .goldens_dir = JT_STATE "/goldens",
      .run_dir = t->run_dir,
      .silkd_path = SBX_BUILD_BIN_DIR "/silkd",
      .cgroup_name = t->cgroup);
  if (access(cfg.silkd_path, X_OK) != 0) cfg.silkd_path = NULL;
  sbxi_env_apply(&cfg); /* as the programs do: SBX_JAIL_ZYGOTE=0 and the rest */
  sbx_error err = {0};
  int rc = sbx_driver_open("jail", &cfg, &t->drv, &err);
  if (rc < 0) {
    fprintf(stderr, "driver open: %s\n", err.msg);
    return rc;
  }
  sbx_template_spec ts = SBX_TEMPLATE_SPEC_INIT(.name = "host");
  if ((rc = sbx_template_prepare(t->drv, &ts, &t->tpl, &err)) < 0) {
    fprintf(stderr, "template: %s\n", err.msg);
    return rc;
  }
  if ((rc = sbx_golden_build(t->drv, t->tpl, NULL, &t->golden, &err)) < 0) {
    fprintf(stderr, "golden: %s\n", err.msg);
    return rc;
  }
  return 0;
}

static inline void jt_close(jt *t) {
  /* A failed assertion skips a test's own destroy: whatever is left under
   * this run_dir is destroyed here, so a failing run leaks no jail. */
  sbx_driver_reconcile(t->drv, NULL, NULL, NULL);
  sbx_golden_release(t->drv, t->golden);
  sbx_template_release(t->drv, t->tpl);
  sbx_driver_close(t->drv);
  rmdir(t->run_dir);
  static const char *const ctls[] = {"memory", "pids", "cpu", "cpuacct", "freezer", "devices"};
  for (size_t i = 0; i < 6; i++) {
    char p[256];
    snprintf(p, sizeof p, "/sys/fs/cgroup/%s/%s", ctls[i], t->cgroup);
    rmdir(p);
  }
  char p[256];
  snprintf(p, sizeof p, "/sys/fs/cgroup/%s", t->cgroup);
  rmdir(p);
}

/* Start script as pid 1 (sh -c) in sandbox id; its stdout and stderr go to
 * *out_fd (the read end of a pipe) when out_fd is given. */
static inline int jt_start(jt *t, const char *id, const char *size, const char *script, int *out_fd,
                           sbx_instance **s, sbx_error *err) {
  int p[2] = {-1, -1};
  if (out_fd && pipe2(p, O_CLOEXEC) < 0) return -1;
  const char *argv[] = {"/bin/sh", "-c", script, NULL};
  sbx_clone_spec spec;
  sbx_clone_spec_init(&spec);
  spec.id = id;
  spec.size = size ? sbx_size_tier_get(size) : NULL;
  spec.stdio[1] = spec.stdio[2] = p[1];
  int rc = sbxi_sandbox_clone_init(t->drv, t->golden, &spec, argv, NULL, s, err);
  if (p[1] >= 0) close(p[1]);
  if (out_fd) *out_fd = rc < 0 ? (close(p[0]), -1) : p[0];
  return rc;
}

/* Read fd to EOF into buf (NUL-terminated, truncated at cap). */
static inline size_t jt_slurp(int fd, char *buf, size_t cap) {
  size_t len = 0;
  for (;;) {
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size_t take = (size_t)n;
    if (take > cap - 1 - len) take = cap - 1 - len;
    memcpy(buf + len, tmp, take);
    len += take;
  }
  buf[len] = '\0';
  close(fd);
  return len;
}

/* Run script to completion; returns its exit code (or -1000 on a driver
 * error, printed) and its combined output in out. */
static inline int jt_run(jt *t, const char *id, const char *script, char *out, size_t cap) {
  sbx_error err = {0};
  sbx_instance *s = NULL;
  int fd = -1;
  if (jt_start(t, id, NULL, script, &fd, &s, &err) < 0) {
    fprintf(stderr, "clone %s: %s\n", id, err.msg);
    return -1000;
  }
  jt_slurp(fd, out, cap);
  int code = -1;
  if (sbx_sandbox_wait(s, -1, &code, &err) < 0) fprintf(stderr, "wait: %s\n", err.msg);
  if (sbx_sandbox_destroy(s, &err) < 0) {
    fprintf(stderr, "destroy %s: %s\n", id, err.msg);
    return -1000;
  }
  return code;
}

#endif

#include <sys/socket.h>

/* A stand-in for silkd with the same contract (--listen fd:3, answers
 * info), so clone -> ready is tested without depending on the daemon's own
 * progress. A test program calls this first thing in main and is then
 * given as silkd_path (/proc/self/exe). */
static inline int jt_fake_agent_main(int argc, char **argv) {
  /* The stand-in has no zygote mode: the driver sees it exit without a
   * greeting and execs it per clone, which the stand-in tests then cover. */
  if (argc >= 2 && strcmp(argv[1], "--zygote") == 0) _exit(2);
  if (argc < 3 || strcmp(argv[1], "--listen") != 0 || strcmp(argv[2], "fd:3") != 0) return -1;
  static const char info[] = "{\"type\":\"info\",\"version\":\"fake\",\"proto\":2,\"uptime_secs\":0,\"procs\":0,\"sessions\":0}\n";
  for (;;) {
    int c = accept4(3, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue;
    char buf[4096];
    size_t len = 0;
    for (;;) {
      ssize_t n = read(c, buf + len, sizeof buf - 1 - len);
      if (n <= 0) break;
      len += (size_t)n;
      buf[len] = '\0';
      char *nl;
      while ((nl = strchr(buf, '\n')) != NULL) {
        if (strstr(buf, "\"op\":\"info\"") && write(c, info, sizeof info - 1) < 0) break;
        len -= (size_t)(nl + 1 - buf);
        memmove(buf, nl + 1, len + 1);
      }
      if (len >= sizeof buf - 1) break;
    }
    close(c);
  }
}

static inline int jt_open_with_agent(jt *t) {
  int rc = jt_open(t);
  if (rc < 0) return rc;
  /* reopen with this very program as the agent */
  sbx_driver_close(t->drv);
  sbx_driver_config cfg = SBX_DRIVER_CONFIG_INIT(
      .templates_dir = JT_STATE "/templates",
      .goldens_dir = JT_STATE "/goldens",
      .run_dir = t->run_dir,
      .silkd_path = "/proc/self/exe",
      .cgroup_name = t->cgroup);
  sbx_error err = {0};
  rc = sbx_driver_open("jail", &cfg, &t->drv, &err);
  if (rc < 0) fprintf(stderr, "driver open: %s\n", err.msg);
  return rc;
}
