/* `sbxctl local run` end to end: a real jail, the real silkd, stdout and
 * stderr passed through, ARGV's exit code returned, nothing left behind. */
#include <dirent.h>
#include <sys/wait.h>

#include "jail_test.h"

static int run_sbxctl(const char *const *args, char *out, size_t cap, char *errout, size_t ecap) {
  int o[2], e[2];
  if (pipe(o) < 0 || pipe(e) < 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(o[1], 1);
    dup2(e[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    setenv("SBX_STATE_DIR", JT_STATE, 1);
    char run[128];
    snprintf(run, sizeof run, JT_STATE "/run-cli-%d", (int)getppid());
    setenv("SBX_RUN_DIR", run, 1);
    execv(SBX_BUILD_BIN_DIR "/sbxctl", (char *const *)args);
    _exit(127);
  }
  close(o[1]);
  close(e[1]);
  jt_slurp(o[0], out, cap);
  jt_slurp(e[0], errout, ecap);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_local_run_passes_output_and_code(void **state) {
  (void)state;
  char out[4096], err[4096];
  const char *args[] = {"sbxctl", "local", "run", "--size", "medium", "--",
                        "sh", "-c", "echo out; echo err >&2; hostname | cut -c1-6; exit 42", NULL};
  assert_int_equal(run_sbxctl(args, out, sizeof out, err, sizeof err), 42);
  assert_string_equal(out, "out\nlocal-\n");
  assert_string_equal(err, "err\n");
  char run[128];
  snprintf(run, sizeof run, JT_STATE "/run-cli-%d", (int)getpid());
  /* the sandbox's run directory is gone; only the (empty) base is left */
  char ls[256];
  snprintf(ls, sizeof ls, "%s/local-", run);
  int n = 0;
  DIR *d = opendir(run);
  assert_non_null(d);
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (de->d_name[0] != '.') n++;
  closedir(d);
  assert_int_equal(n, 0);
  rmdir(run);
}

static void test_local_run_usage_errors(void **state) {
  (void)state;
  char out[4096], err[4096];
  const char *no_cmd[] = {"sbxctl", "local", "run", NULL};
  assert_int_equal(run_sbxctl(no_cmd, out, sizeof out, err, sizeof err), 2);
  const char *bad_size[] = {"sbxctl", "local", "run", "--size", "huge", "--", "true", NULL};
  assert_int_equal(run_sbxctl(bad_size, out, sizeof out, err, sizeof err), 2);
  const char *bad_driver[] = {"sbxctl", "local", "run", "--driver", "firecracker", "--", "true", NULL};
  assert_int_equal(run_sbxctl(bad_driver, out, sizeof out, err, sizeof err), 125);
  assert_non_null(strstr(err, "firecracker"));
  const char *version[] = {"sbxctl", "--version", NULL};
  assert_int_equal(run_sbxctl(version, out, sizeof out, err, sizeof err), 0);
  assert_non_null(strstr(out, "sbxctl "));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_local_run_passes_output_and_code),
      cmocka_unit_test(test_local_run_usage_errors),
  };
  return cmocka_run_group_tests_name("jail_sbxctl", tests, NULL, NULL);
}
