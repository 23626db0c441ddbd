/* test_sandboxd_notify: readiness for a Type=notify service. The test plays
 * systemd: it binds a Unix datagram socket, starts a real sandboxd with
 * NOTIFY_SOCKET naming it, and must receive READY=1 once the daemon listens
 * with its pools set, and STOPPING=1 on SIGTERM; the same with an abstract
 * socket ("@name"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <sys/un.h>

#include "sbxd_test.h"

/* Bind a datagram socket at path (or the abstract name after '@'). */
static int notify_listen(const char *name) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(name);
  assert_true(n < sizeof sa.sun_path);
  memcpy(sa.sun_path, name, n);
  if (name[0] == '@') sa.sun_path[0] = '\0';
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)), 0);
  return fd;
}

/* The next datagram (up to 60 s), NUL-terminated in buf; false on timeout. */
static bool notify_recv(int fd, char *buf, size_t cap) {
  struct pollfd pf = {fd, POLLIN, 0};
  if (poll(&pf, 1, 60000) <= 0) return false;
  ssize_t r = recv(fd, buf, cap - 1, 0);
  if (r < 0) return false;
  buf[r] = '\0';
  return true;
}

/* True when the datagram holds the assignment as one of its lines. */
static bool has_line(const char *msg, const char *line) {
  size_t n = strlen(line);
  for (const char *p = msg; p; p = strchr(p, '\n')) {
    if (*p == '\n') p++;
    if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0')) return true;
  }
  return false;
}

static void run_notify(const char *config, const char *sock_name, bool expect_pool) {
  struct sbxd_proc P;
  sbxd_prepare(&P, config);
  char name[300];
  if (sock_name) snprintf(name, sizeof name, "%s", sock_name);
  else snprintf(name, sizeof name, "%s/notify.sock", P.dir);
  int fd = notify_listen(name);
  setenv("NOTIFY_SOCKET", name, 1);
  int rc = sbxd_start(&P);
  unsetenv("NOTIFY_SOCKET");
  assert_int_equal(rc, 0);

  char msg[1024];
  assert_true(notify_recv(fd, msg, sizeof msg));
  assert_true(has_line(msg, "READY=1"));
  assert_non_null(strstr(msg, "STATUS=listening on port"));
  /* Ready means serving, with the configured pools in place. */
  struct http_resp r = {0};
  assert_int_equal(sbxd_http(P.port, "GET", "/v1/info", NULL, NULL, &r), 0);
  assert_int_equal(r.status, 200);
  if (expect_pool) assert_non_null(strstr(r.body, "\"host\""));
  http_resp_free(&r);

  kill(P.pid, SIGTERM);
  assert_true(notify_recv(fd, msg, sizeof msg));
  assert_true(has_line(msg, "STOPPING=1"));
  assert_int_equal(sbxd_stop(&P, SIGTERM), 0);
  close(fd);
  if (!sock_name) unlink(name);
  sbxd_jail_cleanup(&P);
}

static void test_ready_and_stopping_path(void **state) {
  (void)state;
  run_notify("{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
             "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},"
             "\"pools\":[{\"template\":\"host\",\"net\":\"none\",\"size\":\"small\",\"warm\":1}]}",
             NULL, true);
}

static void test_ready_and_stopping_abstract(void **state) {
  (void)state;
  char name[64];
  snprintf(name, sizeof name, "@sbxd-notify-test-%d", (int)getpid());
  run_notify("{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
             "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"pools\":[]}",
             name, false);
}

/* A NOTIFY_SOCKET that is neither a path nor an abstract name is warned
 * about and ignored: the daemon starts and stops as without one. */
static void test_bad_notify_socket(void **state) {
  (void)state;
  struct sbxd_proc P;
  sbxd_prepare(&P, "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                   "\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"pools\":[]}");
  setenv("NOTIFY_SOCKET", "relative/path", 1);
  int rc = sbxd_start(&P);
  unsetenv("NOTIFY_SOCKET");
  assert_int_equal(rc, 0);
  assert_int_equal(sbxd_stop(&P, SIGTERM), 0);
  sbxd_jail_cleanup(&P);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ready_and_stopping_path),
      cmocka_unit_test(test_ready_and_stopping_abstract),
      cmocka_unit_test(test_bad_notify_socket),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
