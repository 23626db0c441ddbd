/* sbxctl local run: clone a sandbox, run ARGV in it through silkd with
 * stdout/stderr passed through, destroy it, exit with ARGV's code. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sandbox/agent.h>
#include <sandbox/driver.h>

#include "../libsandbox/core/env.h"
#include "util/util.h"
#include "local.h"
#include "core/path.h"

#define EXIT_USAGE 2
#define EXIT_SETUP 125 /* as env(1) and container runtimes: not ARGV's code */
/* sandboxd's default data_dir: one place for templates on a node, whichever
 * of the two runs a sandbox. */
#define LOCAL_STATE_DIR "/var/lib/sandboxd"

static void local_usage(FILE *f) {
  fprintf(f,
          "usage: sbxctl local run [--template T] [--size S] [--driver D] [--stdin] -- ARGV...\n\n"
          "Runs ARGV in a fresh sandbox on this machine and exits with its code.\n"
          "  --template T  host (default) or a directory template under the state dir\n"
          "  --size S      small (default), medium, large, xlarge, 2xlarge\n"
          "  --driver D    auto (default), jail, qemu\n"
          "  --stdin       forward this process's stdin to ARGV (default: none)\n"
          "Templates are read from $SBX_STATE_DIR/templates, the same directory as sandboxd's\n"
          "default templates_dir.\n"
          "Environment: SBX_STATE_DIR (default " LOCAL_STATE_DIR "), SBX_RUN_DIR (default\n"
          "/run/sandbox-local), SBX_SILKD (default: silkd next to sbxctl, else /usr/lib/sandbox/silkd).\n");
}

static volatile sig_atomic_t jail_pid;

/* Ctrl-C kills the sandbox's pid 1; the exec then ends and the normal
 * teardown runs, so an interrupted run leaves nothing behind. */
static void on_signal(int sig) {
  (void)sig;
  if (jail_pid > 0) kill((pid_t)jail_pid, SIGKILL);
}

static int on_output(void *ud, sbx_stream stream, const void *data, size_t n) {
  (void)ud;
  sbxi_write_all(stream == SBX_STREAM_STDERR ? 2 : 1, data, n);
  return 0; /* a closed stdout must not stop ARGV: its output is dropped */
}

static const char *default_silkd(char *buf, size_t cap) {
  const char *env = getenv("SBX_SILKD");
  if (env && *env) return env;
  ssize_t n = readlink("/proc/self/exe", buf, cap - 8);
  if (n > 0) {
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash) {
      strcpy(slash + 1, "silkd");
      if (access(buf, X_OK) == 0) return buf;
    }
  }
  return "/usr/lib/sandbox/silkd";
}

static int fail(const char *what, const sbx_error *err) {
  fprintf(stderr, "sbxctl: %s: %s\n", what, err->msg);
  return EXIT_SETUP;
}

static int local_run(int argc, char **argv) {
  static const struct option opts[] = {{"template", required_argument, NULL, 't'},
                                       {"size", required_argument, NULL, 's'},
                                       {"driver", required_argument, NULL, 'd'},
                                       {"stdin", no_argument, NULL, 'i'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  const char *tname = "host", *size = "small", *driver = "auto";
  bool fwd_stdin = false;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "+t:s:d:ih", opts, NULL)) != -1) {
    switch (c) {
    case 't': tname = optarg; break;
    case 's': size = optarg; break;
    case 'd': driver = optarg; break;
    case 'i': fwd_stdin = true; break;
    case 'h': local_usage(stdout); return 0;
    default: local_usage(stderr); return EXIT_USAGE;
    }
  }
  if (optind >= argc) {
    fprintf(stderr, "sbxctl: local run: no command given\n");
    local_usage(stderr);
    return EXIT_USAGE;
  }
  const sbx_size_tier *tier = sbx_size_tier_get(size);
  if (!tier) {
    fprintf(stderr, "sbxctl: unknown size \"%s\" (small, medium, large, xlarge, 2xlarge)\n", size);
    return EXIT_USAGE;
  }
  char **cmd = argv + optind;

  const char *state = getenv("SBX_STATE_DIR");
  if (!state || !*state) state = LOCAL_STATE_DIR;
  char tdir[PATH_MAX], gdir[PATH_MAX], silkd[PATH_MAX];
  sbx_error perr;
  /* Not sandboxd's goldens/: its reconcile owns what is in there. */
  if (sbxi_path_fmt(tdir, sizeof tdir, &perr, "%s/templates", state) < 0 ||
      sbxi_path_fmt(gdir, sizeof gdir, &perr, "%s/goldens-local", state) < 0)
    return fail("SBX_STATE_DIR", &perr);
  sbx_driver_config cfg = SBX_DRIVER_CONFIG_INIT(
      .templates_dir = tdir,
      .goldens_dir = gdir,
      .run_dir = getenv("SBX_RUN_DIR") ? getenv("SBX_RUN_DIR") : "/run/sandbox-local",
      /* apart from sandboxd's: its reconcile removes every jail it does not own */
      .cgroup_name = "sandbox-local",
      .silkd_path = default_silkd(silkd, sizeof silkd));
  sbxi_env_apply(&cfg);
  sbx_error err = {0};
  sbx_driver *drv = NULL;
  sbx_template *tpl = NULL;
  sbx_golden *g = NULL;
  sbx_instance *s = NULL;
  sbx_agent *agent = NULL;
  int code = EXIT_SETUP;
  if (sbx_driver_open(driver, &cfg, &drv, &err) < 0) return fail("driver", &err);
  sbx_template_spec ts = SBX_TEMPLATE_SPEC_INIT(.name = tname);
  if (sbx_template_prepare(drv, &ts, &tpl, &err) < 0) {
    fprintf(stderr, "sbxctl: template %s: %s (templates dir %s)\n", tname, err.msg, tdir);
    code = EXIT_SETUP;
    goto out;
  }
  if (sbx_golden_build(drv, tpl, NULL, &g, &err) < 0) {
    code = fail("golden", &err);
    goto out;
  }
  char id[64];
  snprintf(id, sizeof id, "local-%d", (int)getpid());
  sbx_clone_spec spec;
  sbx_clone_spec_init(&spec);
  spec.id = id;
  spec.size = tier;
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  if (sbx_sandbox_clone(drv, g, &spec, &s, &err) < 0) {
    code = fail("clone", &err);
    goto out;
  }
  jail_pid = sbx_instance_pid(s);
  int fd = -1;
  if (sbx_sandbox_connect(s, &fd, &err) < 0 || sbx_agent_open(fd, &agent, &err) < 0) {
    code = fail("agent", &err);
    goto out;
  }
  sbx_req_exec req = {0};
  size_t n = 0;
  while (cmd[n]) n++;
  req.argv.items = (const char **)cmd;
  req.argv.len = n;
  req.has_detach = true;
  sbx_agent_exec_io io = {.on_output = on_output, .stdin_fd = fwd_stdin ? 0 : -1};
  int rc = sbx_agent_exec(agent, &req, &io, &code, &err);
  if (rc < 0) code = fail("exec", &err);
out:
  if (agent) sbx_agent_close(agent);
  jail_pid = 0;
  if (s && sbx_sandbox_destroy(s, &err) < 0) fprintf(stderr, "sbxctl: destroy: %s\n", err.msg);
  sbx_golden_release(drv, g);
  sbx_template_release(drv, tpl);
  sbx_driver_close(drv);
  return code;
}

int sbxctl_local_main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    local_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : 0;
  }
  if (strcmp(argv[1], "run") == 0) return local_run(argc - 1, argv + 1);
  fprintf(stderr, "sbxctl: unknown local command \"%s\"\n", argv[1]);
  local_usage(stderr);
  return EXIT_USAGE;
}
