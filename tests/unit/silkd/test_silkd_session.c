/* test_silkd_session.c - persistent bash sessions (§5.4, §9.3 check 10). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "silkd_client.h"

static silkd_srv srv;

static int setup(void **state) { return silkd_start(&srv); }
static int teardown(void **state) {
  int st = silkd_stop(&srv);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void sess_exec(sc *c, const char *id, const char *argv_json, sc_result *res) {
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":%s,\"session\":\"%s\"}", argv_json, id);
  assert_int_equal(sc_collect(c, res, SC_FIN_EXIT), 1);
}

static void test_session_persistence(void **state) {
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"session_create\",\"id\":\"s1\",\"cwd\":\"/\",\"env\":{\"GREETING\":\"it's me\"}}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_SESSION_CREATED);
  assert_string_equal(r.u.session_created.id, "s1");
  sbx_wire_resp_free(&r);
  sc_result res;
  sess_exec(c, "s1", "[\"cd\",\"/tmp\"]", &res);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_int_equal(res.code, 0);
  assert_int_equal(res.frames, 1); /* no started in a session */
  sc_result_free(&res);
  sess_exec(c, "s1", "[\"pwd\"]", &res);
  assert_string_equal(res.out.ptr, "/tmp\n");
  sc_result_free(&res);
  sess_exec(c, "s1", "[\"export\",\"FOO=a b'c\"]", &res);
  sc_result_free(&res);
  sess_exec(c, "s1", "[\"eval\",\"echo \\\"$FOO|$GREETING\\\"; echo err >&2\"]", &res);
  assert_string_equal(res.out.ptr, "a b'c|it's me\nerr\n");
  sc_result_free(&res);
  sess_exec(c, "s1", "[\"sh\",\"-c\",\"exit 3\"]", &res);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_int_equal(res.code, 3);
  sc_result_free(&res);
  /* a fake sentinel in the output does not end the command */
  sess_exec(c, "s1", "[\"eval\",\"printf '__SILK_00000000000000000000000000000000__ 5\\\\n'; echo after; exit_code=4; (exit 4)\"]", &res);
  assert_int_equal(res.code, 4);
  assert_string_equal(res.out.ptr, "__SILK_00000000000000000000000000000000__ 5\nafter\n");
  sc_result_free(&res);
  /* a command reading stdin does not swallow the sentinel */
  sess_exec(c, "s1", "[\"cat\"]", &res);
  assert_int_equal(res.code, 0);
  sc_result_free(&res);
  /* output bigger than one piece, unsplit around the marker */
  sess_exec(c, "s1", "[\"eval\",\"head -c 1000000 /dev/zero | tr '\\\\0' x\"]", &res);
  assert_int_equal(res.code, 0);
  assert_int_equal(res.out.len, 1000000);
  sc_result_free(&res);
  sc_sendf(c, "{\"v\":1,\"op\":\"session_list\"}");
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_SESSIONS);
  assert_int_equal(r.u.sessions.sessions.len, 1);
  sbx_wire_resp_free(&r);
  /* exit ends the session */
  sess_exec(c, "s1", "[\"exit\"]", &res);
  assert_int_equal(res.final, SBX_RESP_ERROR);
  assert_int_equal(res.kind, SBX_ERR_INTERNAL);
  assert_string_equal(res.msg, "session: shell exited");
  sc_result_free(&res);
  sess_exec(c, "s1", "[\"true\"]", &res);
  assert_int_equal(res.kind, SBX_ERR_NOT_FOUND);
  sc_result_free(&res);
  sc_close(c);
}

static void test_session_errors(void **state) {
  sc *c = sc_open(&srv);
  sc_result res;
  sc_sendf(c, "{\"v\":1,\"op\":\"session_create\",\"env\":{\"A-B\":\"x\"}}");
  assert_int_equal(sc_collect(c, &res, SC_FIN_NONE_OR_CREATED), 1);
  assert_int_equal(res.kind, SBX_ERR_BAD_REQUEST);
  assert_string_equal(res.msg, "session create: invalid env name \"A-B\"");
  sc_result_free(&res);
  sc_sendf(c, "{\"v\":1,\"op\":\"session_create\",\"cwd\":\"/no/such/dir\"}");
  assert_int_equal(sc_collect(c, &res, SC_FIN_NONE_OR_CREATED), 1);
  assert_int_equal(res.kind, SBX_ERR_INTERNAL);
  assert_string_equal(res.msg, "session create: shell exited");
  sc_result_free(&res);
  sc_sendf(c, "{\"v\":1,\"op\":\"session_create\"}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_SESSION_CREATED);
  char id[128];
  snprintf(id, sizeof id, "%s", r.u.session_created.id);
  assert_int_equal(strncmp(id, "sess-", 5), 0);
  sbx_wire_resp_free(&r);
  sc_sendf(c, "{\"v\":1,\"op\":\"session_create\",\"id\":\"%s\"}", id);
  assert_int_equal(sc_collect(c, &res, SC_FIN_NONE_OR_CREATED), 1);
  assert_int_equal(res.final, SBX_RESP_ERROR);
  assert_int_equal(res.kind, SBX_ERR_BAD_REQUEST);
  sc_result_free(&res);
  /* session_rm kills a running command */
  sc *d = sc_open(&srv);
  sc_sendf(d, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"eval\",\"echo running; sleep 1000\"],\"session\":\"%s\"}", id);
  sc_sendf(d, "{\"v\":1,\"op\":\"info\"}"); /* queued behind it (mode none) */
  assert_int_equal(sc_recv(d, &r), 1); /* the command runs before we remove the session */
  assert_int_equal(r.type, SBX_RESP_STDOUT);
  sbx_wire_resp_free(&r);
  sc_sendf(c, "{\"v\":1,\"op\":\"session_rm\",\"id\":\"%s\"}", id);
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.final, SBX_RESP_DONE);
  sc_result_free(&res);
  assert_int_equal(sc_collect(d, &res, SC_FIN_EXIT), 1);
  assert_int_equal(res.final, SBX_RESP_ERROR);
  assert_string_equal(res.msg, "session: shell exited");
  sc_result_free(&res);
  assert_int_equal(sc_recv(d, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
  sc_sendf(c, "{\"v\":1,\"op\":\"session_rm\",\"id\":\"%s\"}", id);
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_NOT_FOUND);
  assert_string_equal(res.msg, "no such session");
  sc_result_free(&res);
  sc_close(d);
  sc_close(c);
}

static void test_session_concurrent(void **state) {
  /* two connections on one session: commands run one at a time */
  sc *a = sc_open(&srv), *b = sc_open(&srv);
  sc_sendf(a, "{\"v\":1,\"op\":\"session_create\",\"id\":\"conc\"}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(a, &r), 1);
  sbx_wire_resp_free(&r);
  sc_sendf(a, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"eval\",\"X=1; sleep 0.2; echo a$X\"],\"session\":\"conc\"}");
  sc_sendf(b, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"eval\",\"echo b$X\"],\"session\":\"conc\"}");
  sc_result ra, rb;
  assert_int_equal(sc_collect(a, &ra, SC_FIN_EXIT), 1);
  assert_int_equal(sc_collect(b, &rb, SC_FIN_EXIT), 1);
  assert_string_equal(ra.out.ptr, "a1\n");
  assert_string_equal(rb.out.ptr, "b1\n");
  sc_result_free(&ra);
  sc_result_free(&rb);
  /* client vanishes mid-command: the next command still works */
  sc_sendf(b, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"eval\",\"sleep 0.2; seq 1 100000\"],\"session\":\"conc\"}");
  sc_close(b);
  sc_sendf(a, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"echo\",\"clean\"],\"session\":\"conc\"}");
  assert_int_equal(sc_collect(a, &ra, SC_FIN_EXIT), 1);
  assert_string_equal(ra.out.ptr, "clean\n");
  sc_result_free(&ra);
  sc_sendf(a, "{\"v\":1,\"op\":\"session_rm\",\"id\":\"conc\"}");
  assert_int_equal(sc_collect(a, &ra, SC_FIN_DONE), 1);
  sc_result_free(&ra);
  sc_close(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_session_persistence),
      cmocka_unit_test(test_session_errors),
      cmocka_unit_test(test_session_concurrent),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, setup, teardown);
}
