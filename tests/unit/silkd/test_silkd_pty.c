/* test_silkd_pty.c - pty_open / pty_resize (§5.9) and port_forward (§5.10). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>

#include "proc_tree.h"
#include "silkd_client.h"

static silkd_srv srv;

static int setup(void **state) { return silkd_start(&srv); }
static int teardown(void **state) {
  int st = silkd_stop(&srv);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Read pty output until `want` shows up (echo of the command excluded by
 * the caller's choice of marker). */
static void read_until(sc *c, sbx_buf *acc, const char *want) {
  while (!acc->ptr || !strstr(acc->ptr, want)) {
    sbx_wire_resp r;
    assert_int_equal(sc_recv(c, &r), 1);
    if (r.type != SBX_RESP_STDOUT) fprintf(stderr, "unexpected %s\n", sbx_wire_type_name(r.type));
    assert_int_equal(r.type, SBX_RESP_STDOUT);
    sbx_buf_add(acc, r.u.stdout_.data.ptr, r.u.stdout_.data.len, NULL);
    sbx_wire_resp_free(&r);
  }
}

static void send_stdin(sc *c, const char *s) { sc_send_bulk(c, SBX_BULK_REQ_STDIN, s, strlen(s)); }

static void test_pty_size_and_resize(void **state) {
  sc *c = sc_open(&srv), *k = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"pty_open\",\"cols\":80,\"rows\":24,\"cwd\":\"/tmp\",\"env\":{\"PS1\":\"$ \"}}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_STARTED);
  uint32_t pid = r.u.started.pid;
  sbx_wire_resp_free(&r);
  sbx_buf acc = SBX_BUF_INIT(1 << 24);
  /* the arithmetic keeps the echoed command line from matching */
  send_stdin(c, "echo size=$(stty size)=$((40+2))\n");
  read_until(c, &acc, "size=24 80=42");
  sc_sendf(k, "{\"v\":1,\"op\":\"pty_resize\",\"pid\":%u,\"cols\":100,\"rows\":30}", pid);
  sc_result res;
  assert_int_equal(sc_collect(k, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.final, SBX_RESP_DONE);
  sc_result_free(&res);
  send_stdin(c, "echo size=$(stty size)=$((40+3)) $(pwd)\n");
  read_until(c, &acc, "size=30 100=43 /tmp");
  /* ps lists the pty, not detached */
  sc_sendf(k, "{\"v\":1,\"op\":\"ps\"}");
  assert_int_equal(sc_recv(k, &r), 1);
  bool found = false;
  for (size_t i = 0; i < r.u.procs.len; i++)
    if (r.u.procs.items[i].pid == pid) {
      found = true;
      assert_false(r.u.procs.items[i].detached);
      assert_string_equal(r.u.procs.items[i].argv.items[1], "-i");
    }
  assert_true(found);
  sbx_wire_resp_free(&r);
  /* stdin_close is ignored; exit code arrives */
  sc_sendf(c, "{\"v\":1,\"op\":\"stdin_close\"}");
  send_stdin(c, "exit 5\n");
  assert_int_equal(sc_collect(c, &res, SC_FIN_EXIT), 1);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_int_equal(res.code, 5);
  sc_result_free(&res);
  sbx_buf_free(&acc);
  /* resize errors */
  sc_sendf(k, "{\"v\":1,\"op\":\"pty_resize\",\"pid\":%u,\"cols\":1,\"rows\":1}", pid);
  assert_int_equal(sc_collect(k, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_NOT_FOUND);
  assert_string_equal(res.msg, "no such pid");
  sc_result_free(&res);
  sc_sendf(k, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"sleep\",\"1000\"],\"detach\":true}");
  assert_int_equal(sc_recv(k, &r), 1);
  uint32_t spid = r.u.started.pid;
  sbx_wire_resp_free(&r);
  sc_sendf(k, "{\"v\":1,\"op\":\"pty_resize\",\"pid\":%u,\"cols\":1,\"rows\":1}", spid);
  assert_int_equal(sc_collect(k, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_BAD_REQUEST);
  assert_string_equal(res.msg, "not a pty");
  sc_result_free(&res);
  sc_sendf(k, "{\"v\":1,\"op\":\"kill\",\"pid\":%u}", spid);
  assert_int_equal(sc_collect(k, &res, SC_FIN_DONE), 1);
  sc_result_free(&res);
  sc_close(k);
  sc_close(c);
}

static void test_pty_request_kills_shell(void **state) {
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"pty_open\",\"cols\":80,\"rows\":24}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_STARTED);
  sbx_wire_resp_free(&r);
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_EXIT), 1);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_int_equal(res.code, 137);
  sc_result_free(&res);
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
  sc_close(c);
}

static void test_pty_end_kills_jobs(void **state) {
  /* A background job of the interactive shell sits in a process group of
   * its own: ending the pty kills it all the same. */
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"pty_open\",\"cols\":80,\"rows\":24}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_STARTED);
  sbx_wire_resp_free(&r);
  sbx_buf acc = SBX_BUF_INIT(1 << 24);
  send_stdin(c, "sleep 300 & echo job=$!=$((40+2))\n");
  read_until(c, &acc, "=42");
  const char *at = strstr(acc.ptr, "job=");
  while (at && !(at[4] >= '0' && at[4] <= '9')) at = strstr(at + 4, "job=");
  assert_non_null(at);
  pid_t job = (pid_t)atol(at + 4);
  assert_true(job > 1);
  assert_int_equal(pgrp_settle(job, "sleep", 1), 1);
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}"); /* a request frame ends the pty */
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_EXIT), 1);
  assert_int_equal(res.code, 137);
  sc_result_free(&res);
  assert_int_equal(pgrp_settle(job, NULL, 0), 0);
  assert_int_equal(sc_recv(c, &r), 1);
  sbx_wire_resp_free(&r);
  sbx_buf_free(&acc);
  sc_close(c);
}

/* ---- port_forward ---- */

static int echo_listen(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, (struct sockaddr *)&sa, sizeof sa);
  socklen_t l = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &l);
  listen(fd, 4);
  *port = ntohs(sa.sin_port);
  return fd;
}

/* Echo until the peer half-closes, then half-close back. */
static void *echo_server(void *arg) {
  int lfd = *(int *)arg;
  int fd = accept(lfd, NULL, NULL);
  char *buf = malloc(1 << 16);
  for (;;) {
    ssize_t n = read(fd, buf, 1 << 16);
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(fd, buf + off, (size_t)(n - off));
      if (w <= 0) goto out;
      off += w;
    }
  }
  shutdown(fd, SHUT_WR);
out:
  free(buf);
  close(fd);
  return NULL;
}

struct sender {
  sc *c;
  size_t total;
};

static uint8_t pattern(size_t i) { return (uint8_t)((i * 2654435761u) >> 13); }

static void *sender(void *arg) {
  struct sender *s = arg;
  uint8_t *chunk = malloc(262144);
  for (size_t off = 0; off < s->total; off += 262144) {
    size_t n = s->total - off < 262144 ? s->total - off : 262144;
    for (size_t i = 0; i < n; i++) chunk[i] = pattern(off + i);
    sc_send_bulk(s->c, SBX_BULK_REQ_DATA, chunk, n);
  }
  sc_sendf(s->c, "{\"v\":1,\"op\":\"data_end\"}");
  free(chunk);
  return NULL;
}

static void test_port_forward_echo(void **state) {
  uint16_t port;
  int lfd = echo_listen(&port);
  pthread_t echo, send;
  pthread_create(&echo, NULL, echo_server, &lfd);
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"port_forward\",\"port\":%u}", port);
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_READY);
  sbx_wire_resp_free(&r);
  struct sender s = {c, 64u << 20};
  pthread_create(&send, NULL, sender, &s);
  size_t got = 0;
  bool ok = true;
  for (;;) {
    assert_int_equal(sc_recv(c, &r), 1);
    if (r.type == SBX_RESP_DONE) {
      sbx_wire_resp_free(&r);
      break;
    }
    assert_int_equal(r.type, SBX_RESP_DATA);
    for (size_t i = 0; i < r.u.data.data.len; i++) ok &= r.u.data.data.ptr[i] == pattern(got + i);
    got += r.u.data.data.len;
    sbx_wire_resp_free(&r);
  }
  pthread_join(send, NULL);
  pthread_join(echo, NULL);
  close(lfd);
  assert_true(ok);
  assert_int_equal(got, 64u << 20);
  /* both directions closed: the connection serves the next request */
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
  sc_close(c);
}

static void test_port_forward_errors(void **state) {
  uint16_t port;
  int lfd = echo_listen(&port);
  close(lfd); /* nothing listens there now */
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"port_forward\",\"port\":%u}", port);
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_NOT_FOUND);
  char want[64];
  snprintf(want, sizeof want, "connect %u: ", port);
  assert_int_equal(strncmp(res.msg, want, strlen(want)), 0);
  sc_result_free(&res);
  /* stdin during a forward */
  pthread_t echo;
  lfd = echo_listen(&port);
  pthread_create(&echo, NULL, echo_server, &lfd);
  sc_sendf(c, "{\"v\":1,\"op\":\"port_forward\",\"port\":%u}", port);
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_READY);
  sbx_wire_resp_free(&r);
  sc_sendf(c, "{\"v\":1,\"op\":\"stdin_close\"}");
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_BAD_REQUEST);
  assert_string_equal(res.msg, "unexpected frame during port_forward");
  sc_result_free(&res);
  pthread_join(echo, NULL);
  close(lfd);
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
  sc_close(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pty_size_and_resize),
      cmocka_unit_test(test_pty_request_kills_shell),
      cmocka_unit_test(test_pty_end_kills_jobs),
      cmocka_unit_test(test_port_forward_echo),
      cmocka_unit_test(test_port_forward_errors),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, setup, teardown);
}
