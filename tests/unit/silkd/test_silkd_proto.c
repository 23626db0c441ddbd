/* test_silkd_proto.c - silkd's connection model (spec §2, §9.3) and the
 * process verbs (exec, ps, kill, attach, logs), against a real daemon. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/uio.h>


#include "proc_tree.h"
#include "core/path.h"
#include "silkd_client.h"

static silkd_srv srv;

static int setup(void **state) { return silkd_start(&srv); }
static int teardown(void **state) {
  int st = silkd_stop(&srv);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void expect_type(sc *c, sbx_wire_type t) {
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  if (r.type != t) fprintf(stderr, "got %s, want %s\n", sbx_wire_type_name(r.type), sbx_wire_type_name(t));
  assert_int_equal(r.type, t);
  sbx_wire_resp_free(&r);
}

static void expect_error(sc *c, sbx_wire_error_kind kind, const char *msg_prefix) {
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_ERROR);
  if (r.u.error.kind != kind) fprintf(stderr, "error %s\n", r.u.error.message);
  assert_int_equal(r.u.error.kind, kind);
  if (msg_prefix && strncmp(r.u.error.message, msg_prefix, strlen(msg_prefix)) != 0) {
    fprintf(stderr, "message %s, want prefix %s\n", r.u.error.message, msg_prefix);
    fail();
  }
  sbx_wire_resp_free(&r);
}

/* ---- handoff carriers (sandboxd's relay.c passes client sockets) ---- */

/* Send a carrier on a fresh connection: fd (SCM_RIGHTS) with the payload
 * mark + bytes; then SHUT_WR. Returns the carrier's fd. */
static int send_carrier(int fd, char mark, const char *bytes, size_t n) {
  int u = sc_try_connect(srv.sock);
  assert_true(u >= 0);
  char *payload = sbx_malloc(n + 1);
  payload[0] = mark;
  if (n) memcpy(payload + 1, bytes, n);
  struct iovec iov = {payload, n + 1};
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(sizeof(int))];
  } cm;
  memset(&cm, 0, sizeof cm);
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof cm.b};
  struct cmsghdr *h = CMSG_FIRSTHDR(&m);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(h), &fd, sizeof fd);
  size_t off = 0;
  ssize_t w = sendmsg(u, &m, MSG_NOSIGNAL);
  assert_true(w > 0);
  off = (size_t)w;
  while (off < n + 1) { /* a carrier over the cap may take more than one send */
    w = send(u, payload + off, n + 1 - off, MSG_NOSIGNAL);
    if (w <= 0) break; /* silkd dropped it */
    off += (size_t)w;
  }
  sbx_free(payload);
  shutdown(u, SHUT_WR);
  return u;
}

/* Whether fd reaches EOF within ms (nothing readable before). */
static bool eof_within(int fd, int ms) {
  struct pollfd pf = {fd, POLLIN, 0};
  if (poll(&pf, 1, ms) != 1) return false;
  char b[256];
  ssize_t r;
  while ((r = recv(fd, b, sizeof b, MSG_DONTWAIT)) > 0) {
  }
  return r == 0 || (r < 0 && errno == ECONNRESET);
}

static void set_nonblock_fd(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static sc *sc_wrap(int fd) {
  sc *c = sbx_calloc(1, sizeof *c);
  c->fd = fd;
  c->fr = sbx_frame_reader_new(0);
  c->buf = sbx_malloc(1 << 16);
  return c;
}

/* A carried socket is served with its pipelined bytes first, in order
 * with what comes on the socket later; the carrier stays open until the
 * connection ends. silkd ending it (a bad frame) reaches the client even
 * though another copy of the socket (sandboxd's) stays open. */
static void test_handoff_adopts(void **state) {
  int sp[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
  const char pipelined[] = "{\"v\":1,\"op\":\"info\"}\n{\"v\":1,\"op\":\"fs_st";
  int u = send_carrier(sp[1], 0, pipelined, sizeof pipelined - 1);
  sc *c = sc_wrap(sp[0]);
  assert_int_equal(sc_send_raw(c, "at\",\"path\":\"/\"}\n", 16), 0);
  expect_type(c, SBX_RESP_INFO);
  expect_type(c, SBX_RESP_STAT);
  assert_false(eof_within(u, 100));
  sc_sendf(c, "not json");
  expect_error(c, SBX_ERR_BAD_REQUEST, "parse: ");
  assert_true(sc_closed(c));
  assert_true(eof_within(u, 5000));
  close(u);
  close(sp[1]);
  sc_close(c);
  /* Over the frame cap: silkd breaks the connection, the client sees EOF. */
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
  u = send_carrier(sp[1], 0, NULL, 0);
  set_nonblock_fd(sp[0]);
  size_t chunk = 1 << 20, sent = 0;
  char *junk = sbx_malloc(chunk);
  memset(junk, 'x', chunk);
  bool eof = false;
  while (!eof && sent < (size_t)SBX_WIRE_FRAME_CAP * 4) {
    struct pollfd pf = {sp[0], POLLIN | POLLOUT, 0};
    assert_int_equal(poll(&pf, 1, 10000), 1);
    if (pf.revents & (POLLIN | POLLHUP)) {
      eof = eof_within(sp[0], 0);
      assert_true(eof);
    } else {
      ssize_t w = send(sp[0], junk, chunk, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) sent += (size_t)w;
    }
  }
  sbx_free(junk);
  assert_true(eof);
  assert_true(eof_within(u, 5000));
  close(u);
  close(sp[0]);
  close(sp[1]);
}

/* A descriptor that is not a stream socket, or a carrier without the
 * marker byte, is refused (the carrier closed); a carrier with more
 * pipelined bytes than the cap is dropped; silkd keeps serving. A 0x00
 * byte without a descriptor is just a bad frame. */
static void test_handoff_refused(void **state) {
  int pp[2];
  assert_int_equal(pipe(pp), 0);
  int u = send_carrier(pp[0], 0, "{\"v\":1,\"op\":\"info\"}\n", 20);
  assert_true(eof_within(u, 5000));
  close(u);
  close(pp[0]);
  close(pp[1]);
  int sp[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
  u = send_carrier(sp[1], '{', "\"v\":1,\"op\":\"info\"}\n", 19);
  assert_true(eof_within(u, 5000));
  close(u);
  close(sp[1]);
  assert_true(eof_within(sp[0], 5000)); /* silkd closed its copy: the last one */
  close(sp[0]);
  /* Over the cap. */
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
  size_t n = 64 * 1024 + 1;
  char *big = sbx_malloc(n);
  memset(big, ' ', n);
  u = send_carrier(sp[1], 0, big, n);
  sbx_free(big);
  assert_true(eof_within(u, 5000));
  close(u);
  close(sp[1]);
  assert_true(eof_within(sp[0], 5000));
  close(sp[0]);
  /* A NUL from a plain client. */
  sc *c = sc_open(&srv);
  assert_int_equal(sc_send_raw(c, "\0{\"v\":1,\"op\":\"info\"}\n", 21), 0);
  expect_error(c, SBX_ERR_BAD_REQUEST, "parse: ");
  assert_true(sc_closed(c));
  sc_close(c);
  c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  expect_type(c, SBX_RESP_INFO);
  sc_close(c);
}

static void test_back_to_back(void **state) {
  sc *c = sc_open(&srv);
  assert_non_null(c);
  /* Pipelined: all three before reading anything. */
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_stat\",\"path\":\"/\"}");
  sc_sendf(c, "{\"v\":1,\"op\":\"ps\"}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  assert_int_equal(r.u.info.proto, 2);
  sbx_wire_resp_free(&r);
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_STAT);
  assert_int_equal(r.u.stat.info.kind, SBX_FILE_DIR);
  sbx_wire_resp_free(&r);
  expect_type(c, SBX_RESP_PROCS);
  /* still open */
  sc_sendf(c, "{\"v\":1,\"op\":\"info\",\"future_field\":true,\"v\":1}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "parse: "); /* duplicate member */
  assert_true(sc_closed(c));
  sc_close(c);
  c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"info\",\"future_field\":{\"x\":[1,2]}}");
  expect_type(c, SBX_RESP_INFO);
  sc_close(c);
}

static void test_late_input_dropped(void **state) {
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"true\"]}");
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_EXIT), 1);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_int_equal(res.code, 0);
  sc_result_free(&res);
  sc_sendf(c, "{\"v\":1,\"op\":\"stdin\",\"data\":\"aGVsbG8K\"}");
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  expect_type(c, SBX_RESP_INFO);
  sc_close(c);
}

static void test_request_during_exec(void **state) {
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"cat\"]}");
  expect_type(c, SBX_RESP_STARTED);
  sc_sendf(c, "{\"v\":1,\"op\":\"stdin\",\"data\":\"aGVsbG8K\"}");
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_EXIT), 1);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_int_equal(res.code, 0);
  assert_int_equal(res.out.len, 6);
  assert_memory_equal(res.out.ptr, "hello\n", 6);
  sc_result_free(&res);
  expect_type(c, SBX_RESP_INFO);
  sc_close(c);
}

static void test_leading_continuation(void **state) {
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"stdin_close\"}");
  sc_sendf(c, "{\"v\":1,\"op\":\"data_end\"}"); /* dropped silently */
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "stray data/stdin frame");
  expect_type(c, SBX_RESP_INFO);
  sc_close(c);
}

static void test_parse_failure_closes(void **state) {
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"no_such_op\"}");
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "parse: ");
  assert_true(sc_closed(c));
  sc_close(c);
  c = sc_open(&srv);
  sc_sendf(c, "   ");
  expect_error(c, SBX_ERR_BAD_REQUEST, "parse: ");
  assert_true(sc_closed(c));
  sc_close(c);
}

static void test_oversize_closes(void **state) {
  sc *c = sc_open(&srv);
  size_t n = SBX_WIRE_FRAME_CAP + 1;
  char *line = sbx_malloc(n + 1);
  memset(line, ' ', n);
  memcpy(line, "{\"v\":1,\"op\":\"info\",\"x\":\"", 24);
  line[n - 2] = '"';
  line[n - 1] = '}';
  line[n] = '\n';
  sc_send_raw(c, line, n + 1); /* may fail with EPIPE once silkd closes */
  sbx_free(line);
  assert_true(sc_closed(c));
  sc_close(c);
  /* A line of exactly the cap is a frame. */
  c = sc_open(&srv);
  n = SBX_WIRE_FRAME_CAP;
  line = sbx_malloc(n + 1);
  memset(line, ' ', n);
  memcpy(line, "{\"v\":1,\"op\":\"info\"}", 19);
  line[n] = '\n';
  assert_int_equal(sc_send_raw(c, line, n + 1), 0);
  sbx_free(line);
  expect_type(c, SBX_RESP_INFO);
  sc_close(c);
}

static void test_exec_basics(void **state) {
  sc *c = sc_open(&srv);
  sc_result res;
  assert_int_equal(sc_exec_sh(c, "echo 42; echo oops >&2; exit 3", &res), 1);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_int_equal(res.code, 3);
  assert_true(res.pid > 0);
  assert_string_equal(res.out.ptr, "42\n");
  assert_string_equal(res.err.ptr, "oops\n");
  sc_result_free(&res);
  assert_int_equal(sc_exec_sh(c, "kill -TERM $$", &res), 1);
  assert_int_equal(res.code, 143);
  sc_result_free(&res);
  /* §7.1: a cleared environment, request env layered on top. */
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"env\"],\"env\":{\"FOO\":\"bar\",\"TERM\":\"dumb\"}}");
  assert_int_equal(sc_collect(c, &res, SC_FIN_EXIT), 1);
  assert_int_equal(res.code, 0);
  assert_non_null(strstr(res.out.ptr, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"));
  assert_non_null(strstr(res.out.ptr, "FOO=bar\n"));
  assert_non_null(strstr(res.out.ptr, "TERM=dumb\n"));
  assert_null(strstr(res.out.ptr, "HOME="));
  sc_result_free(&res);
  /* user switching (needs root, as silkd always has in a sandbox) */
  if (geteuid() == 0) {
    sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"id -u; id -G; echo $HOME $USER\"],"
                "\"user\":\"nobody\",\"env\":{\"USER\":\"x\"}}");
    assert_int_equal(sc_collect(c, &res, SC_FIN_EXIT), 1);
    assert_int_equal(res.code, 0);
    assert_string_equal(res.out.ptr, "65534\n65534\n/nonexistent nobody\n");
    sc_result_free(&res);
  }
  /* cwd */
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"pwd\"],\"cwd\":\"/tmp\"}");
  assert_int_equal(sc_collect(c, &res, SC_FIN_EXIT), 1);
  assert_string_equal(res.out.ptr, "/tmp\n");
  sc_result_free(&res);
  /* stdin frames then stdin_close */
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"wc\",\"-c\"]}");
  for (int i = 0; i < 100; i++) sc_send_bulk(c, SBX_BULK_REQ_STDIN, "0123456789", 10);
  sc_sendf(c, "{\"v\":1,\"op\":\"stdin_close\"}");
  assert_int_equal(sc_collect(c, &res, SC_FIN_EXIT), 1);
  assert_int_equal(res.code, 0);
  assert_string_equal(res.out.ptr, "1000\n");
  sc_result_free(&res);
  sc_close(c);
}

static void test_exec_errors(void **state) {
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[]}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "argv must not be empty");
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"true\"],\"detach\":true,\"session\":\"s\"}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "detach is not supported with session");
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"true\"],\"session\":\"nope\"}");
  expect_error(c, SBX_ERR_NOT_FOUND, "no such session");
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"true\"],\"user\":\"no-such-user\"}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "unknown user \"no-such-user\"");
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"/no/such/binary\"]}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "spawn: No such file or directory (os error 2)");
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"no-such-binary-on-path\"]}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "spawn: ");
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"true\"],\"cwd\":\"/no/such/dir\"}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "spawn: ");
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"/etc/passwd\"]}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "spawn: Permission denied");
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"true\"],\"env\":{\"A=B\":\"x\"}}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "invalid env name \"A=B\"");
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"true\"],\"env\":{\"\":\"x\"}}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "invalid env name");
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"tr\\u0000ue\"]}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "invalid argument: NUL byte in ");
  /* git outside a repository: git's failure (test_silkd_git has the rest) */
  sc_sendf(c, "{\"v\":1,\"op\":\"git_status\",\"path\":\"/\"}");
  expect_error(c, SBX_ERR_INTERNAL, "git status: fatal: not a git repository");
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  expect_type(c, SBX_RESP_INFO);
  sc_close(c);
}

static void test_kill_ps(void **state) {
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"kill\",\"pid\":0}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "invalid pid");
  sc_sendf(c, "{\"v\":1,\"op\":\"kill\",\"pid\":2147483648}");
  expect_error(c, SBX_ERR_BAD_REQUEST, "invalid pid");
  sc_sendf(c, "{\"v\":1,\"op\":\"kill\",\"pid\":2147483647}");
  expect_error(c, SBX_ERR_NOT_FOUND, "no such pid");
  sc_sendf(c, "{\"v\":1,\"op\":\"attach\",\"pid\":2147483647}");
  expect_error(c, SBX_ERR_NOT_FOUND, "no such pid");
  sc_sendf(c, "{\"v\":1,\"op\":\"logs\",\"pid\":2147483647}");
  expect_error(c, SBX_ERR_NOT_FOUND, "no such pid");

  /* kill while streaming gives 137 */
  sc *k = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"yes\"]}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_STARTED);
  uint32_t pid = r.u.started.pid;
  sbx_wire_resp_free(&r);
  assert_int_equal(sc_recv(c, &r), 1); /* streaming */
  assert_int_equal(r.type, SBX_RESP_STDOUT);
  sbx_wire_resp_free(&r);
  sc_sendf(k, "{\"v\":1,\"op\":\"ps\"}");
  assert_int_equal(sc_recv(k, &r), 1);
  assert_int_equal(r.type, SBX_RESP_PROCS);
  bool found = false;
  for (size_t i = 0; i < r.u.procs.len; i++)
    if (r.u.procs.items[i].pid == pid) {
      found = true;
      assert_false(r.u.procs.items[i].detached);
      assert_int_equal(r.u.procs.items[i].state, SBX_PROC_RUNNING);
      assert_false(r.u.procs.items[i].has_exit_code);
    }
  assert_true(found);
  sbx_wire_resp_free(&r);
  sc_sendf(k, "{\"v\":1,\"op\":\"kill\",\"pid\":%u}", pid);
  expect_type(k, SBX_RESP_DONE);
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_EXIT), 1);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_int_equal(res.code, 137);
  sc_result_free(&res);
  /* the entry left the table with its exit */
  sc_sendf(k, "{\"v\":1,\"op\":\"kill\",\"pid\":%u}", pid);
  expect_error(k, SBX_ERR_NOT_FOUND, "no such pid");
  sc_close(k);
  sc_close(c);
}

/* Start argv on c (foreground, or detached) and return the pid. */
static uint32_t start_tree(sc *c, const char *script, bool detach) {
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"%s\"],\"detach\":%s}", script,
           detach ? "true" : "false");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_STARTED);
  uint32_t pid = r.u.started.pid;
  sbx_wire_resp_free(&r);
  return pid;
}

static void test_kill_takes_the_tree(void **state) {
  /* kill ends the shell and the background child it started; the exit code
   * is the shell's own (137) */
  sc *c = sc_open(&srv), *k = sc_open(&srv);
  uint32_t pid = start_tree(c, "sleep 300 & sleep 300", false);
  assert_int_equal(pgrp_settle((pid_t)pid, "sleep", 2), 2);
  sc_sendf(k, "{\"v\":1,\"op\":\"kill\",\"pid\":%u}", pid);
  expect_type(k, SBX_RESP_DONE);
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_EXIT), 1);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_int_equal(res.code, 137);
  sc_result_free(&res);
  assert_int_equal(pgrp_settle((pid_t)pid, NULL, 0), 0);

  /* a detached one, with SIGTERM: the signal reaches every member too */
  pid = start_tree(c, "sleep 300 & sleep 300", true);
  assert_int_equal(pgrp_settle((pid_t)pid, "sleep", 2), 2);
  sc_sendf(k, "{\"v\":1,\"op\":\"kill\",\"pid\":%u,\"signal\":15}", pid);
  expect_type(k, SBX_RESP_DONE);
  assert_int_equal(pgrp_settle((pid_t)pid, NULL, 0), 0);

  sc_close(k);
  sc_close(c);
}

static void test_detached_logs_attach(void **state) {
  sc *c = sc_open(&srv);
  sc *a = sc_open(&srv);
  /* The child waits for a file we create, so attach surely sees it live. */
  char gate[400];
  snprintf(gate, sizeof gate, "%s/gate", srv.dir);
  sc_sendf(c,
           "{\"v\":1,\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"echo hello; echo warn >&2; "
           "while [ ! -e %s ]; do sleep 0.05; done; echo world; exit 7\"],\"detach\":true}",
           gate);
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_STARTED); /* the whole RPC */
  uint32_t pid = r.u.started.pid;
  sbx_wire_resp_free(&r);
  sc_sendf(c, "{\"v\":1,\"op\":\"stdin\",\"data\":\"aGVsbG8K\"}"); /* discarded */
  sc_sendf(a, "{\"v\":1,\"op\":\"attach\",\"pid\":%u}", pid);
  /* replay of hello arrives before the gate opens */
  sc_result res;
  memset(&res, 0, sizeof res);
  bool seen_hello = false;
  while (!seen_hello) {
    assert_int_equal(sc_recv(a, &r), 1);
    if (r.type == SBX_RESP_STDOUT) {
      assert_memory_equal(r.u.stdout_.data.ptr, "hello\n", 6);
      seen_hello = true;
    } else {
      assert_int_equal(r.type, SBX_RESP_STDERR);
    }
    sbx_wire_resp_free(&r);
  }
  int fd = open(gate, O_CREAT | O_WRONLY, 0644);
  close(fd);
  assert_int_equal(sc_collect(a, &res, SC_FIN_ATTACH), 1);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_int_equal(res.code, 7);
  assert_non_null(strstr(res.out.ptr ? res.out.ptr : "", "world\n"));
  sc_result_free(&res);
  /* logs: ring, exit, done */
  sc_sendf(c, "{\"v\":1,\"op\":\"logs\",\"pid\":%u}", pid);
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.final, SBX_RESP_DONE);
  assert_true(res.saw_exit);
  assert_int_equal(res.code, 7);
  assert_string_equal(res.out.ptr, "hello\nworld\n");
  assert_string_equal(res.err.ptr, "warn\n");
  sc_result_free(&res);
  /* attach after exit: replay then exit */
  sc_sendf(a, "{\"v\":1,\"op\":\"attach\",\"pid\":%u}", pid);
  assert_int_equal(sc_collect(a, &res, SC_FIN_ATTACH), 1);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_string_equal(res.out.ptr, "hello\nworld\n");
  sc_result_free(&res);
  /* ps shows it exited, with its code; kill of an exited entry is done */
  sc_sendf(c, "{\"v\":1,\"op\":\"ps\"}");
  assert_int_equal(sc_recv(c, &r), 1);
  bool found = false;
  for (size_t i = 0; i < r.u.procs.len; i++)
    if (r.u.procs.items[i].pid == pid) {
      found = true;
      assert_true(r.u.procs.items[i].detached);
      assert_int_equal(r.u.procs.items[i].state, SBX_PROC_EXITED);
      assert_true(r.u.procs.items[i].has_exit_code);
      assert_int_equal(r.u.procs.items[i].exit_code, 7);
    }
  assert_true(found);
  sbx_wire_resp_free(&r);
  sc_sendf(c, "{\"v\":1,\"op\":\"kill\",\"pid\":%u,\"signal\":15}", pid);
  expect_type(c, SBX_RESP_DONE);
  sc_close(a);
  sc_close(c);
}

static void test_client_gone_kills_child(void **state) {
  /* A streaming child whose client vanishes is killed at the next write. */
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"yes\"]}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  uint32_t pid = r.u.started.pid;
  sbx_wire_resp_free(&r);
  sc_close(c);
  sc *k = sc_open(&srv);
  for (;;) { /* poll until the entry is gone; no time limit asserted */
    sc_sendf(k, "{\"v\":1,\"op\":\"logs\",\"pid\":%u}", pid);
    sc_result res;
    assert_int_equal(sc_collect(k, &res, SC_FIN_DONE), 1);
    sbx_wire_type f = res.final;
    sc_result_free(&res);
    if (f == SBX_RESP_ERROR) break;
    usleep(10000);
  }
  /* Killed: gone, or a zombie that silkd's SIGCHLD loop reaps a moment
   * after the entry went away. The SIGKILL is sent when the entry goes, and
   * on a loaded machine the child can still be on its way out for a while:
   * wait for it to die (60 s is only a hang guard, not a timing check). */
  char st[64];
  snprintf(st, sizeof st, "/proc/%u/stat", pid);
  char pstate = '?';
  for (int i = 0; i < 6000; i++) {
    char buf[512] = {0};
    FILE *f = fopen(st, "r");
    if (!f) {
      pstate = 'X';
      break;
    }
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    if (n == 0) { /* reaped between the open and the read, so gone */
      pstate = 'X';
      break;
    }
    char *rp = strrchr(buf, ')');
    assert_non_null(rp);
    pstate = rp[2];
    if (pstate == 'Z' || pstate == 'X') break;
    usleep(10000);
  }
  if (pstate != 'Z' && pstate != 'X') fail_msg("pid %u still in state %c", pid, pstate);
  sc_close(k);
}

static void test_client_gone_kills_tree(void **state) {
  /* The vanished client is noticed at the next write (yes writes), and the
   * background sleep dies with the shell. */
  sc *c = sc_open(&srv);
  uint32_t pid = start_tree(c, "sleep 300 & yes", false);
  assert_int_equal(pgrp_settle((pid_t)pid, "sleep", 1), 1);
  sc_close(c);
  assert_int_equal(pgrp_settle((pid_t)pid, NULL, 0), 0);
}

/* Children of `parent` from /proc: zombies if `zombie`, else live ones. */
static int children_of(pid_t parent, bool zombie) {
  int n = 0;
  DIR *d = opendir("/proc");
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
    char p[300], buf[512] = {0};
    snprintf(p, sizeof p, "/proc/%s/stat", de->d_name);
    FILE *f = fopen(p, "r");
    if (!f) continue;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    char *rp = strrchr(buf, ')');
    if (!k || !rp) continue;
    char state;
    int ppid;
    if (sscanf(rp + 2, "%c %d", &state, &ppid) == 2 && ppid == parent && (state == 'Z') == zombie) n++;
  }
  closedir(d);
  return n;
}

static void test_orphans_reaped_and_drain(void **state) {
  sc *c = sc_open(&srv);
  /* The background child keeps stdout open: exit still comes (after the
   * drain), the output before it arrives, and the orphan is reaped. */
  sc_result res;
  assert_int_equal(sc_exec_sh(c, "sleep 0.3 & echo hi", &res), 1);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_int_equal(res.code, 0);
  assert_string_equal(res.out.ptr, "hi\n");
  sc_result_free(&res);
  assert_int_equal(sc_exec_sh(c, "for i in 1 2 3 4 5; do (sleep 0.1 &) ; done", &res), 1);
  assert_int_equal(res.code, 0);
  sc_result_free(&res);
  /* Wait (no deadline) until the orphans, now silkd's children, are gone. */
  while (children_of(srv.pid, false) > 0) usleep(20000);
  /* Reaping happens on the loop; a fresh RPC round trip orders us after it. */
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  sbx_wire_resp_free(&r);
  /* poll: the reap runs on SIGCHLD, asynchronously to us */
  for (int i = 0; i < 1000 && children_of(srv.pid, true) > 0; i++) usleep(10000);
  assert_int_equal(children_of(srv.pid, true), 0);
  sc_close(c);
}

static void test_sigterm_exits_zero(void **state) {
  silkd_srv s2;
  assert_int_equal(silkd_start(&s2), 0);
  sc *c = sc_open(&s2);
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"sleep\",\"1000\"],\"detach\":true}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  pid_t pid = (pid_t)r.u.started.pid;
  sbx_wire_resp_free(&r);
  int st = silkd_stop(&s2);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  /* the child was killed (it is reparented and reaped by init) */
  for (int i = 0; kill(pid, 0) == 0 && i < 100000; i++) {
    char p[64], buf[256] = {0};
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f) break;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    char *rp = strrchr(buf, ')');
    if (n && rp && rp[2] == 'Z') break; /* zombie of our test's init: dead */
    usleep(1000);
  }
  sc_close(c);
}

/* --listen stdio: one connection on stdin/stdout; the daemon exits with it. */
static void test_stdio_transport(void **state) {
  int in[2], out[2];
  assert_int_equal(pipe2(in, O_CLOEXEC), 0);
  assert_int_equal(pipe2(out, O_CLOEXEC), 0);
  pid_t pid = fork();
  if (pid == 0) {
    char bin[512];
    snprintf(bin, sizeof bin, "%s/silkd", SBX_BUILD_BIN_DIR);
    dup2(in[0], 0);
    dup2(out[1], 1);
    int nul = open("/dev/null", O_WRONLY);
    dup2(nul, 2);
    execl(bin, "silkd", "--listen", "stdio", (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  const char *req = "{\"v\":1,\"op\":\"info\"}\n{\"v\":1,\"op\":\"exec\",\"argv\":[\"echo\",\"hi\"]}\n";
  assert_int_equal(write(in[1], req, strlen(req)), (ssize_t)strlen(req));
  close(in[1]);
  sc c = {.fd = out[0], .fr = sbx_frame_reader_new(0), .buf = sbx_malloc(1 << 16)};
  sbx_wire_resp r;
  assert_int_equal(sc_recv(&c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
  sc_result res;
  assert_int_equal(sc_collect(&c, &res, SC_FIN_EXIT), 1);
  assert_int_equal(res.code, 0);
  assert_string_equal(res.out.ptr, "hi\n");
  sc_result_free(&res);
  assert_true(sc_closed(&c));
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  close(out[0]);
  sbx_frame_reader_free(c.fr);
  sbx_free(c.buf);
}

/* --listen fd:N: an inherited listening socket, as the jail driver does. */
static void test_fd_listener(void **state) {
  char path[400];
  snprintf(path, sizeof path, "%s/inherited.sock", srv.dir);
  int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  assert_int_equal(sbxi_path_fmt(sa.sun_path, sizeof sa.sun_path, NULL, "%s", path), 0);
  assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(lfd, 8), 0);
  pid_t pid = fork();
  if (pid == 0) {
    char bin[512], arg[32];
    snprintf(bin, sizeof bin, "%s/silkd", SBX_BUILD_BIN_DIR);
    snprintf(arg, sizeof arg, "fd:%d", lfd);
    int nul = open("/dev/null", O_RDWR);
    dup2(nul, 0);
    dup2(nul, 2);
    execl(bin, "silkd", "--listen", arg, (char *)NULL);
    _exit(127);
  }
  close(lfd);
  silkd_srv s2 = {.pid = pid};
  assert_int_equal(sbxi_path_fmt(s2.sock, sizeof s2.sock, NULL, "%s", path), 0);
  sc *c = sc_open(&s2); /* the backlog accepts before silkd runs */
  assert_non_null(c);
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
  sc_close(c);
  kill(pid, SIGTERM);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_back_to_back),
      cmocka_unit_test(test_late_input_dropped),
      cmocka_unit_test(test_request_during_exec),
      cmocka_unit_test(test_leading_continuation),
      cmocka_unit_test(test_parse_failure_closes),
      cmocka_unit_test(test_oversize_closes),
      cmocka_unit_test(test_exec_basics),
      cmocka_unit_test(test_exec_errors),
      cmocka_unit_test(test_kill_ps),
      cmocka_unit_test(test_detached_logs_attach),
      cmocka_unit_test(test_client_gone_kills_child),
      cmocka_unit_test(test_kill_takes_the_tree),
      cmocka_unit_test(test_client_gone_kills_tree),
      cmocka_unit_test(test_orphans_reaped_and_drain),
      cmocka_unit_test(test_sigterm_exits_zero),
      cmocka_unit_test(test_stdio_transport),
      cmocka_unit_test(test_fd_listener),
      cmocka_unit_test(test_handoff_adopts),
      cmocka_unit_test(test_handoff_refused),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, setup, teardown);
}
