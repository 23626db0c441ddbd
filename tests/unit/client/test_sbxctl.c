/* sbxctl remote commands against a real silkd (a unix: address): exit
 * codes and stderr of exec, stdin piped through, SIGINT killing the remote
 * process, one-line errors, and every command's usage errors (exit 2) and
 * --help (exit 0). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "client_test.h"
#include "sbxctl_run.h"
#include "../silkd/proc_tree.h"

static silkd_proc silkd;
static char state_dir[128];

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define SBX "sb_00000000000000aa"

/* rfail_err's line, as a failed command prints it. */
static int run_fail_err_capture(const char *what, const sbx_error *e, run_result *r) {
  int p[2];
  if (pipe(p)) return -1;
  sbx_buf_init(&r->out, 1 << 10);
  sbx_buf_init(&r->err, 1 << 10);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 2);
    _exit(rfail_err(what, e));
  }
  close(p[1]);
  char buf[4096];
  ssize_t k;
  sbx_error err;
  while ((k = read(p[0], buf, sizeof buf)) > 0) sbx_buf_add(&r->err, buf, (size_t)k, &err);
  close(p[0]);
  int st;
  waitpid(pid, &st, 0);
  r->status = WEXITSTATUS(st);
  return 0;
}

static void test_usage_errors(void **state) {
  (void)state;
  /* every command, called wrongly: usage on stderr, exit 2, before any I/O */
  const char *const *bad[] = {
      ARGS("claim", "a", "b"),        ARGS("claim", "--ttl", "x"),     ARGS("claim", "--bogus"),
      ARGS("exec"),                   ARGS("exec", SBX),               ARGS("exec", SBX, "--env", "NOEQ", "--", "x"),
      ARGS("shell"),                  ARGS("shell", SBX, "extra"),     ARGS("release"),
      ARGS("renew"),                  ARGS("renew", SBX, "--ttl", "-1"), ARGS("ls", "extra"),
      ARGS("info", "a", "b"),         ARGS("cp"),                      ARGS("cp", "a", "b"),
      ARGS("cp", SBX ":/a", SBX ":/b"), ARGS("cat"),                   ARGS("cat", "/local"),
      ARGS("put"),                    ARGS("put", SBX ":/x", "--mode", "9"), ARGS("ps"),
      ARGS("ps", SBX, "x"),           ARGS("kill", SBX),               ARGS("kill", SBX, "abc"),
      ARGS("kill", SBX, "1", "--signal", "0"), ARGS("logs", SBX),      ARGS("logs", SBX, "0"),
      ARGS("session", SBX),           ARGS("session", SBX, "rm"),      ARGS("session", SBX, "bogus"),
      ARGS("pools", "bogus"),         ARGS("pools", "set"),            ARGS("drain", "x"),
      ARGS("uncordon", "x"),          ARGS("no-such-command"),         ARGS("--addr"),
      NULL};
  for (int i = 0; bad[i]; i++) {
    run_result r;
    assert_int_equal(run_sbxctl(bad[i], NULL, &r, NULL, NULL), 0);
    if (r.status != 2) fail_msg("sbxctl %s %s: exit %d, want 2", bad[i][0], bad[i][1] ? bad[i][1] : "", r.status);
    if (!r.err.ptr || !strstr(r.err.ptr, "usage")) fail_msg("sbxctl %s: no usage on stderr", bad[i][0]);
    run_result_free(&r);
  }
  for (const rcmd *c = sbxctl_cmds; c->name; c++) {
    run_result r;
    assert_int_equal(run_sbxctl(ARGS(c->name, "--help"), NULL, &r, NULL, NULL), 0);
    if (r.status != 0 || !r.out.ptr || !strstr(r.out.ptr, c->name)) fail_msg("sbxctl %s --help failed", c->name);
    run_result_free(&r);
  }
}

static void test_exec_code_and_stderr(void **state) {
  (void)state;
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "--", "sh", "-c", "echo out; echo err >&2; exit 7"), NULL, &r, NULL,
                              NULL),
                   0);
  assert_int_equal(r.status, 7);
  assert_string_equal(r.out.ptr, "out\n");
  assert_string_equal(r.err.ptr, "err\n");
  run_result_free(&r);
  /* options after the id, env and cwd */
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "--cwd", "/tmp", "--env", "A=1", "--", "sh", "-c", "echo $A; pwd"),
                              NULL, &r, NULL, NULL),
                   0);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out.ptr, "1\n/tmp\n");
  run_result_free(&r);
  /* a program that cannot start: one line on stderr, a shell's exit code */
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "--", "/nonexistent"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 127);
  assert_string_equal(r.err.ptr, "sbxctl: exec: /nonexistent: command not found\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "--", "no-such-program-anywhere"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 127);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "--", "/etc/passwd"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 126);
  assert_string_equal(r.err.ptr, "sbxctl: exec: /etc/passwd: permission denied (not executable)\n");
  run_result_free(&r);
  /* a bad --cwd is named, and is a failed operation (exit 1) */
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "--cwd", "/no/such/dir", "--", "true"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_string_equal(r.err.ptr, "sbxctl: exec: cwd /no/such/dir: No such file or directory (os error 2)\n");
  run_result_free(&r);
}

/* One argument with shell syntax is a command line run by sh -c; with
 * --session it runs in the session's shell, so cd and variables last. */
static void test_exec_command_string(void **state) {
  (void)state;
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "cd /tmp && pwd; echo $((6*7)) | cat"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out.ptr, "/tmp\n42\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "exit 3"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 3);
  run_result_free(&r);
  /* a single word is a program, as before */
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "pwd"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "session", SBX, "create", "--id", "agent1"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out.ptr, "{\"id\":\"agent1\"}\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "--session", "agent1", "cd /tmp && X=kept"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "--session", "agent1", "echo $PWD $X"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out.ptr, "/tmp kept\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "session", SBX, "list"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out.ptr, "{\"sessions\":[\"agent1\"]}\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("session", SBX, "rm", "agent1"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
}

/* ls ID:/path, stat ID:/path, file errors naming the file, exec -d. */
static void test_files_and_detach(void **state) {
  (void)state;
  run_result r;
  char dir[256], arg[300], script[600];
  snprintf(dir, sizeof dir, "%s/lsd", silkd.dir);
  snprintf(script, sizeof script, "mkdir -p %s/sub && printf hi > %s/f", dir, dir);
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, script), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  snprintf(arg, sizeof arg, SBX ":%s", dir);
  assert_int_equal(run_sbxctl(ARGS("--json", "ls", arg), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  json_t *j = json_loads(r.out.ptr, 0, NULL);
  assert_non_null(j);
  assert_string_equal(json_string_value(json_object_get(j, "path")), dir);
  json_t *ents = json_object_get(j, "entries");
  assert_int_equal(json_array_size(ents), 2);
  json_decref(j);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("ls", arg), NULL, &r, NULL, NULL), 0);
  assert_non_null(strstr(r.out.ptr, "file               2  f\n"));
  assert_non_null(strstr(r.out.ptr, "sub/\n"));
  run_result_free(&r);
  snprintf(arg, sizeof arg, SBX ":%s/f", dir);
  assert_int_equal(run_sbxctl(ARGS("--json", "stat", arg), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out.ptr, "\"type\":\"file\",\"size\":2"));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("cat", SBX ":/no/such/file"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_int_equal(strncmp(r.err.ptr, "sbxctl: " SBX ":/no/such/file: ", strlen("sbxctl: " SBX ":/no/such/file: ")), 0);
  run_result_free(&r);
  /* exec -d: a pid at once, for logs, ps and kill */
  assert_int_equal(run_sbxctl(ARGS("exec", "-d", SBX, "echo bg; exit 5"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  char pid[32];
  snprintf(pid, sizeof pid, "%ld", atol(r.out.ptr));
  assert_true(atol(pid) > 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("logs", SBX, pid, "--follow"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out.ptr, "bg\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "exec", "--detach", SBX, "--", "/nonexistent"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 127);
  assert_string_equal(r.err.ptr, "{\"error\":\"exec: /nonexistent: command not found\"}\n");
  run_result_free(&r);
}

/* What a docker or kubectl user expects of the messages. */
static void test_cli_habits(void **state) {
  (void)state;
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("clam"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 2);
  assert_non_null(r.err.ptr);
  assert_int_equal(strncmp(r.err.ptr, "sbxctl: unknown command \"clam\"; did you mean \"claim\"?\n", 54), 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("mpc"), NULL, &r, NULL, NULL), 0);
  assert_non_null(strstr(r.err.ptr, "did you mean \"mcp\"?"));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("zzzzzzzz"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(strncmp(r.err.ptr, "sbxctl: unknown command \"zzzzzzzz\"\n", 35), 0);
  run_result_free(&r);
  /* a bad option value names the option and what it takes */
  assert_int_equal(run_sbxctl(ARGS("claim", "--ttl", "abc"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 2);
  assert_int_equal(strncmp(r.err.ptr, "sbxctl: --ttl: expected seconds, got \"abc\"\nusage: sbxctl claim ", 62), 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("fork", SBX, "-n", "0"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 2);
  assert_int_equal(strncmp(r.err.ptr, "sbxctl: --count: expected a number from 1 to 1000, got \"0\"\n", 58), 0);
  run_result_free(&r);
  /* the top-level help: every command with its one-line description */
  assert_int_equal(run_sbxctl(ARGS("--help"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  for (const rcmd *c = sbxctl_cmds; c->name; c++) {
    char line[128];
    snprintf(line, sizeof line, "\n  %-13s %.10s", c->name, c->help);
    if (!strstr(r.out.ptr, line)) fail_msg("--help lacks %s", line);
  }
  assert_non_null(strstr(r.out.ptr, "\n  local         Run a command"));
  assert_non_null(strstr(r.out.ptr, "\n  mcp           Serve the sandbox tools"));
  run_result_free(&r);
  /* the daemon down: a hint; in JSON mode the error is JSON on stderr */
  assert_int_equal(run_sbxctl(ARGS("--addr", "127.0.0.1:1", "ls"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err.ptr, "(is sandboxd running at 127.0.0.1:1?)\n"));
  assert_int_equal(strncmp(r.err.ptr, "sbxctl: ls: ", 12), 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "--addr", "127.0.0.1:1", "ls"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_null(r.out.ptr);
  json_t *j = json_loads(r.err.ptr, 0, NULL);
  assert_non_null(j);
  assert_int_equal(json_object_size(j), 1);
  assert_non_null(strstr(json_string_value(json_object_get(j, "error")), "is sandboxd running at 127.0.0.1:1?"));
  json_decref(j);
  run_result_free(&r);
  /* no repeated prefix when the library named the verb already */
  sbx_error e = {.code = SBX_E_REMOTE};
  snprintf(e.msg, sizeof e.msg, "claim: no template \"nope\"");
  assert_int_equal(run_fail_err_capture("claim", &e, &r), 0);
  assert_string_equal(r.err.ptr, "sbxctl: claim: no template \"nope\"\n");
  run_result_free(&r);
}

static void test_exec_stdin(void **state) {
  (void)state;
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "--", "cat"), "hi\n", &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out.ptr, "hi\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "--no-stdin", "--", "cat"), "ignored\n", &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_null(r.out.ptr);
  run_result_free(&r);
}

/* Once the remote shell printed its pid, interrupt sbxctl. */
static void interrupt_when_started(pid_t pid, const sbx_buf *out, void *ud) {
  long *remote = ud;
  if (*remote == 0 && out->ptr && strchr(out->ptr, '\n')) {
    *remote = atol(out->ptr);
    kill(pid, SIGINT);
  }
}

static void test_sigint_kills_remote(void **state) {
  (void)state;
  run_result r;
  long remote = 0;
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "--", "sh", "-c", "echo $$; exec sleep 600"), NULL, &r,
                              interrupt_when_started, &remote),
                   0);
  assert_true(remote > 0);
  assert_int_equal(r.status, 130);
  /* silkd runs on this host in the test, so its pids are ours to check */
  /* sbxctl exits only after the exec ended, so the process is gone or a
   * zombie about to be reaped: wait for that, without a deadline */
  for (;;) {
    char sp[64], stt[512] = {0};
    snprintf(sp, sizeof sp, "/proc/%ld/stat", remote);
    FILE *sf = fopen(sp, "r");
    if (!sf) break;
    if (!fgets(stt, sizeof stt, sf)) stt[0] = 0;
    fclose(sf);
    char *q = strrchr(stt, ')');
    if (!q || (q[1] == ' ' && q[2] == 'Z')) break;
    sleep_ms(10);
  }
  char path[64], st[512] = {0};
  snprintf(path, sizeof path, "/proc/%ld/stat", remote);
  FILE *f = fopen(path, "r");
  if (f) { /* a zombie not yet reaped counts as dead */
    if (!fgets(st, sizeof st, f)) st[0] = 0;
    fclose(f);
    char *p = strrchr(st, ')');
    if (p && p[1] == ' ' && p[2] != 'Z') fail_msg("remote pid %ld still running: %s", remote, st);
  }
  run_result_free(&r);
}

/* Once the remote shell printed its pid (its process group) and both
 * sleeps run, interrupt sbxctl. */
static void interrupt_when_tree_runs(pid_t pid, const sbx_buf *out, void *ud) {
  long *remote = ud;
  if (*remote == 0 && out->ptr && strchr(out->ptr, '\n')) {
    *remote = atol(out->ptr);
    if (pgrp_settle((pid_t)*remote, "sleep", 2) != 2) fprintf(stderr, "the two sleeps did not start\n");
    kill(pid, SIGINT);
  }
}

static void test_sigint_kills_remote_tree(void **state) {
  (void)state;
  run_result r;
  long remote = 0;
  assert_int_equal(run_sbxctl(ARGS("exec", SBX, "--", "sh", "-c", "echo $$; sleep 300 & sleep 300"), NULL, &r,
                              interrupt_when_tree_runs, &remote),
                   0);
  assert_true(remote > 0);
  assert_int_equal(r.status, 130);
  /* the shell and both sleeps are gone (silkd runs on this host here) */
  assert_int_equal(pgrp_settle((pid_t)remote, NULL, 0), 0);
  run_result_free(&r);
}

static void test_files_and_tokens(void **state) {
  (void)state;
  run_result r;
  char target[256];
  snprintf(target, sizeof target, SBX ":%s/put.txt", silkd.dir);
  assert_int_equal(run_sbxctl(ARGS("put", target, "--mode", "640"), "payload\n", &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("cat", target), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out.ptr, "payload\n");
  run_result_free(&r);
  /* single file both ways through cp */
  char local[256], back[256];
  snprintf(local, sizeof local, "%s/local.txt", silkd.dir);
  snprintf(back, sizeof back, SBX ":%s/copied.txt", silkd.dir);
  FILE *f = fopen(local, "w");
  fputs("abc", f);
  fclose(f);
  chmod(local, 0751);
  assert_int_equal(run_sbxctl(ARGS("cp", local, back), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  struct stat sb;
  snprintf(local, sizeof local, "%s/copied.txt", silkd.dir);
  assert_int_equal(stat(local, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0751);
  /* without any token the command fails in one line, exit 1 */
  unsetenv("SANDBOXD_TOKEN");
  assert_int_equal(run_sbxctl(ARGS("cat", target), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err.ptr, "no token"));
  run_result_free(&r);
  /* a remembered token is enough */
  assert_int_equal(state_save(SBX, "0123456789abcdef0123456789abcdef", ""), 0);
  char path[256];
  snprintf(path, sizeof path, "%s/sbxctl/tokens.json", state_dir);
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  assert_int_equal(run_sbxctl(ARGS("cat", target), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  assert_int_equal(state_forget(SBX), 0);
  setenv("SANDBOXD_TOKEN", "0123456789abcdef0123456789abcdef", 1);
}

static void test_ps_kill_logs(void **state) {
  (void)state;
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("--json", "ps", SBX), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_true(r.out.ptr && strncmp(r.out.ptr, "{\"processes\":[", 14) == 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("kill", SBX, "999999"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("logs", SBX, "999999"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  run_result_free(&r);
}

int main(void) {
  silkd_start(&silkd);
  snprintf(state_dir, sizeof state_dir, "%s/state", silkd.dir);
  setenv("XDG_STATE_HOME", state_dir, 1);
  setenv("SANDBOXD_ADDR", silkd.addr, 1);
  setenv("SANDBOXD_TOKEN", "0123456789abcdef0123456789abcdef", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_usage_errors),   cmocka_unit_test(test_exec_code_and_stderr),
      cmocka_unit_test(test_exec_stdin),     cmocka_unit_test(test_sigint_kills_remote),
      cmocka_unit_test(test_sigint_kills_remote_tree),
      cmocka_unit_test(test_files_and_tokens), cmocka_unit_test(test_ps_kill_logs),
      cmocka_unit_test(test_exec_command_string), cmocka_unit_test(test_cli_habits),
      cmocka_unit_test(test_files_and_detach),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  silkd_cleanup(&silkd);
  return rc;
}
