/* The sandbox handle against a real silkd (a unix: address, so no sandboxd
 * in between): exec exit codes and stderr, stdin, 100 MiB streamed with
 * bounded memory, connection reuse and redial, files, processes, typed
 * errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <sys/resource.h>

#include <cmocka.h>

#include <sandbox/client.h>

#include "client_test.h"

static silkd_proc silkd;

typedef struct {
  sbx_client *c;
  sbx_sandbox *s;
} fixture;

static int setup(void **state) {
  static fixture f;
  sbx_error err;
  sbx_client_opts o = SBX_CLIENT_OPTS_INIT(.addr = silkd.addr);
  if (sbx_client_new(&o, &f.c, &err) < 0) return -1;
  if (sbx_client_attach(f.c, "sb_0000000000000001", "0123456789abcdef0123456789abcdef", NULL, &f.s, &err) < 0)
    return -1;
  *state = &f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  sbx_sandbox_free(f->s);
  sbx_client_free(f->c);
  return 0;
}

#define ARGV(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_exec_codes_and_stderr(void **state) {
  fixture *f = *state;
  sbx_buf out = SBX_BUF_INIT(1 << 20), errb = SBX_BUF_INIT(1 << 20);
  sbx_error err;
  int code = -5;
  sbx_exec_opts o = SBX_EXEC_OPTS_INIT(.argv = ARGV("sh", "-c", "echo out; echo err >&2; exit 3"));
  assert_int_equal(sbx_sandbox_run(f->s, &o, &out, &errb, &code, &err), 0);
  assert_int_equal(code, 3);
  assert_string_equal(out.ptr, "out\n");
  assert_string_equal(errb.ptr, "err\n");
  sbx_buf_reset(&out);
  sbx_exec_opts o2 = SBX_EXEC_OPTS_INIT(.argv = ARGV("sh", "-c", "kill -TERM $$"));
  assert_int_equal(sbx_sandbox_run(f->s, &o2, &out, NULL, &code, &err), 0);
  assert_int_equal(code, 143);
  /* env, cwd */
  sbx_exec_opts o3 =
      SBX_EXEC_OPTS_INIT(.argv = ARGV("sh", "-c", "echo $FOO; pwd"), .cwd = "/tmp", .env = ARGV("FOO=bar=baz"));
  assert_int_equal(sbx_sandbox_run(f->s, &o3, &out, NULL, &code, &err), 0);
  assert_string_equal(out.ptr, "bar=baz\n/tmp\n");
  /* run_check turns a non-zero exit into an exit error */
  sbx_exec_opts o4 = SBX_EXEC_OPTS_INIT(.argv = ARGV("false"));
  assert_int_equal(sbx_sandbox_run_check(f->s, &o4, NULL, NULL, &err), SBX_E_REMOTE);
  assert_int_equal(sbx_client_error_kind(&err), SBX_CLIENT_ERR_EXIT);
  assert_int_equal(sbx_client_error_exit_code(&err), 1);
  /* a missing binary is a silkd error (bad_request) */
  sbx_exec_opts o5 = SBX_EXEC_OPTS_INIT(.argv = ARGV("/nonexistent/binary"));
  assert_int_equal(sbx_sandbox_run(f->s, &o5, NULL, NULL, &code, &err), SBX_E_REMOTE);
  assert_int_equal(sbx_client_error_kind(&err), SBX_CLIENT_ERR_SILKD);
  assert_int_equal(err.detail, SBX_ERR_BAD_REQUEST);
  sbx_buf_free(&out);
  sbx_buf_free(&errb);
}

static int collect(void *ud, sbx_stream st, const void *p, size_t n) {
  sbx_error err;
  return st == SBX_STREAM_STDOUT ? sbx_buf_add(ud, p, n, &err) : 0;
}

static void test_exec_stdin(void **state) {
  fixture *f = *state;
  sbx_buf out = SBX_BUF_INIT(1 << 20);
  sbx_error err;
  int code = -5;
  sbx_exec_opts o = SBX_EXEC_OPTS_INIT(.argv = ARGV("cat"));
  sbx_agent_exec_io io = {.on_output = collect, .ud = &out, .stdin_data = "hi\n", .stdin_len = 3, .stdin_fd = -1};
  assert_int_equal(sbx_sandbox_exec(f->s, &o, &io, &code, &err), 0);
  assert_int_equal(code, 0);
  assert_string_equal(out.ptr, "hi\n");
  /* from an fd, until EOF */
  int pfd[2];
  assert_int_equal(pipe(pfd), 0);
  assert_int_equal(write(pfd[1], "one\ntwo\n", 8), 8);
  close(pfd[1]);
  sbx_buf_reset(&out);
  sbx_exec_opts o2 = SBX_EXEC_OPTS_INIT(.argv = ARGV("wc", "-l"));
  sbx_agent_exec_io io2 = {.on_output = collect, .ud = &out, .stdin_fd = pfd[0]};
  assert_int_equal(sbx_sandbox_exec(f->s, &o2, &io2, &code, &err), 0);
  close(pfd[0]);
  assert_int_equal(atoi(out.ptr), 2);
  sbx_buf_free(&out);
}

static int count(void *ud, sbx_stream st, const void *p, size_t n) {
  (void)st;
  (void)p;
  *(uint64_t *)ud += n;
  return 0;
}

static long maxrss_kib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

static void test_exec_100mib_bounded(void **state) {
  fixture *f = *state;
  uint64_t total = 0;
  int code = -5;
  sbx_error err;
  long before = maxrss_kib();
  sbx_exec_opts o = SBX_EXEC_OPTS_INIT(.argv = ARGV("head", "-c", "104857600", "/dev/zero"));
  sbx_agent_exec_io io = {.on_output = count, .ud = &total, .stdin_fd = -1};
  assert_int_equal(sbx_sandbox_exec(f->s, &o, &io, &code, &err), 0);
  assert_int_equal(code, 0);
  assert_int_equal(total, 104857600u);
  long grown = maxrss_kib() - before;
  /* The output streams through fixed buffers: the peak must stay far below
   * the 100 MiB that went through (64 MiB leaves room for sanitizers). */
  if (grown > 64 * 1024) fail_msg("peak RSS grew by %ld KiB while streaming 100 MiB", grown);
}

static void test_reuse_and_redial(void **state) {
  fixture *f = *state;
  sbx_error err;
  uint64_t d0 = sbx_sandbox_dials(f->s);
  for (int i = 0; i < 100; i++) {
    int code = -5;
    sbx_exec_opts o = SBX_EXEC_OPTS_INIT(.argv = ARGV("true"));
    assert_int_equal(sbx_sandbox_run(f->s, &o, NULL, NULL, &code, &err), 0);
    assert_int_equal(code, 0);
  }
  uint64_t used = sbx_sandbox_dials(f->s) - d0;
  /* all 100 on the parked connection (one dial at most, if none was parked) */
  if (used > 1) fail_msg("100 sequential execs took %llu dials", (unsigned long long)used);

  /* the parked connection dies with its daemon: the next call dials anew */
  silkd_stop(&silkd);
  silkd_start(&silkd);
  uint64_t d1 = sbx_sandbox_dials(f->s);
  int code = -5;
  sbx_exec_opts o = SBX_EXEC_OPTS_INIT(.argv = ARGV("true"));
  assert_int_equal(sbx_sandbox_run(f->s, &o, NULL, NULL, &code, &err), 0);
  assert_int_equal(sbx_sandbox_dials(f->s), d1 + 1);
}

static int on_entry(void *ud, const sbx_wire_dir_entry *e) {
  if (strcmp(e->name, "b.txt") == 0 && e->kind == SBX_FILE_FILE) ++*(int *)ud;
  if (strcmp(e->name, "sub") == 0 && e->kind == SBX_FILE_DIR) ++*(int *)ud;
  return 0;
}

static void test_files(void **state) {
  fixture *f = *state;
  sbx_error err;
  char base[160], p[256], q[256];
  snprintf(base, sizeof base, "%s/files", silkd.dir);
  snprintf(p, sizeof p, "%s/sub/deeper", base);
  assert_int_equal(sbx_sandbox_mkdir(f->s, p, true, &err), 0);
  snprintf(p, sizeof p, "%s/a.txt", base);
  assert_int_equal(sbx_sandbox_write_file(f->s, p, "hello", 5, 0640, &err), 0);
  sbx_wire_file_info fi;
  assert_int_equal(sbx_sandbox_stat(f->s, p, &fi, &err), 0);
  assert_int_equal(fi.kind, SBX_FILE_FILE);
  assert_int_equal(fi.size, 5);
  assert_int_equal(fi.mode, 0640);
  sbx_buf b = SBX_BUF_INIT(1 << 20);
  assert_int_equal(sbx_sandbox_read_file(f->s, p, &b, &err), 0);
  assert_string_equal(b.ptr, "hello");
  snprintf(q, sizeof q, "%s/b.txt", base);
  assert_int_equal(sbx_sandbox_rename(f->s, p, q, &err), 0);
  int seen = 0;
  assert_int_equal(sbx_sandbox_list_dir(f->s, base, on_entry, &seen, &err), 0);
  assert_int_equal(seen, 2);
  /* fd variants */
  int pfd[2];
  assert_int_equal(pipe(pfd), 0);
  assert_int_equal(write(pfd[1], "from fd", 7), 7);
  close(pfd[1]);
  assert_int_equal(sbx_sandbox_write_file_fd(f->s, q, pfd[0], -1, &err), 0);
  close(pfd[0]);
  char tmpf[256];
  snprintf(tmpf, sizeof tmpf, "%s/local-copy", silkd.dir);
  int fd = open(tmpf, O_RDWR | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(sbx_sandbox_read_file_fd(f->s, q, fd, &err), 0);
  char got[16] = {0};
  assert_int_equal(pread(fd, got, sizeof got - 1, 0), 7);
  assert_string_equal(got, "from fd");
  close(fd);
  /* typed silkd error, and the connection stays usable after it */
  uint64_t d = sbx_sandbox_dials(f->s);
  sbx_buf_reset(&b);
  assert_int_equal(sbx_sandbox_read_file(f->s, "/nonexistent/file", &b, &err), SBX_E_REMOTE);
  assert_int_equal(sbx_client_error_kind(&err), SBX_CLIENT_ERR_SILKD);
  assert_int_equal(err.detail, SBX_ERR_NOT_FOUND);
  assert_int_equal(sbx_sandbox_remove(f->s, base, true, &err), 0);
  assert_int_equal(sbx_sandbox_stat(f->s, base, &fi, &err), SBX_E_REMOTE);
  assert_int_equal(sbx_sandbox_dials(f->s), d);
  sbx_buf_free(&b);
}

static int to_buf(void *ud, sbx_stream st, const void *p, size_t n) {
  (void)st;
  sbx_error err;
  return sbx_buf_add(ud, p, n, &err);
}

static void test_processes(void **state) {
  fixture *f = *state;
  sbx_error err;
  uint32_t pid = 0;
  sbx_exec_opts o = SBX_EXEC_OPTS_INIT(.argv = ARGV("sh", "-c", "echo started; exec sleep 600"));
  assert_int_equal(sbx_sandbox_spawn(f->s, &o, &pid, &err), 0);
  assert_true(pid > 0);
  sbx_wire_resp ps;
  assert_int_equal(sbx_sandbox_ps(f->s, &ps, &err), 0);
  bool found = false;
  for (size_t i = 0; i < ps.u.procs.len; i++)
    if (ps.u.procs.items[i].pid == pid && ps.u.procs.items[i].state == SBX_PROC_RUNNING) found = true;
  sbx_wire_resp_free(&ps);
  assert_true(found);
  /* logs of a running process: what it printed so far, no exit code */
  sbx_buf out = SBX_BUF_INIT(1 << 20);
  sbx_agent_exec_io io = {.on_output = to_buf, .ud = &out, .stdin_fd = -1};
  int code = 0;
  while (out.len == 0) { /* until the child has written (ctest's timeout guards) */
    assert_int_equal(sbx_sandbox_logs(f->s, pid, &io, &code, &err), 0);
    assert_int_equal(code, INT32_MIN);
    if (out.len == 0) sleep_ms(10);
  }
  assert_string_equal(out.ptr ? out.ptr : "", "started\n");
  sbx_buf_reset(&out);
  assert_int_equal(sbx_sandbox_kill(f->s, pid, 0, &err), 0);
  /* attach follows it to its end: killed by SIGKILL */
  assert_int_equal(sbx_sandbox_attach(f->s, pid, &io, &code, &err), 0);
  assert_int_equal(code, 137);
  sbx_buf_reset(&out);
  assert_int_equal(sbx_sandbox_logs(f->s, pid, &io, &code, &err), 0);
  assert_string_equal(out.ptr ? out.ptr : "", "started\n");
  assert_int_equal(code, 137);
  assert_int_equal(sbx_sandbox_kill(f->s, 999999, 0, &err), SBX_E_REMOTE);
  assert_int_equal(err.detail, SBX_ERR_NOT_FOUND);
  sbx_buf_free(&out);
}

int main(void) {
  silkd_start(&silkd);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exec_codes_and_stderr), cmocka_unit_test(test_exec_stdin),
      cmocka_unit_test(test_exec_100mib_bounded),   cmocka_unit_test(test_reuse_and_redial),
      cmocka_unit_test(test_files),                 cmocka_unit_test(test_processes),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  silkd_cleanup(&silkd);
  return rc;
}
