/* The error helpers: sbx_err_wrap adds context and keeps the code and the
 * errno it wraps; sbx_err_os fills os_errno with the errno and nothing
 * else; the cleanup attributes keep errno across their close/free, and the
 * steal helpers hand a resource on so that its cleanup does nothing. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <sandbox/core.h>

#include "core/cleanup.h"

static void test_wrap_keeps_code(void **state) {
  (void)state;
  sbx_error err;
  sbx_err(&err, SBX_E_PARSE, "line 3: bad key");
  assert_int_equal(sbx_err_wrap(&err, "config %s", "/etc/x.json"), SBX_E_PARSE);
  assert_int_equal(err.code, SBX_E_PARSE);
  assert_string_equal(err.msg, "config /etc/x.json: line 3: bad key");

  sbx_err_os(&err, EACCES, "open %s", "/x");
  assert_int_equal(err.code, SBX_E_OS);
  assert_int_equal(sbx_err_wrap(&err, "load"), SBX_E_OS);
  assert_int_equal(err.os_errno, EACCES);
  assert_int_equal(strncmp(err.msg, "load: open /x: ", 15), 0);
}

static void test_wrap_cuts_at_the_end(void **state) {
  (void)state;
  sbx_error err;
  char long_msg[SBX_ERROR_MSG_MAX];
  memset(long_msg, 'x', sizeof long_msg - 1);
  long_msg[sizeof long_msg - 1] = '\0';
  sbx_err(&err, SBX_E_TOOBIG, "%s", long_msg);
  assert_int_equal(sbx_err_wrap(&err, "claim"), SBX_E_TOOBIG);
  assert_int_equal(strncmp(err.msg, "claim: xxx", 10), 0);
  assert_int_equal(strlen(err.msg), SBX_ERROR_MSG_MAX - 1);
}

static void test_os_errno_is_an_errno(void **state) {
  (void)state;
  sbx_error err;
  assert_int_equal(sbx_err_os(&err, ENOENT, "stat"), SBX_E_NOTFOUND);
  assert_int_equal(err.os_errno, ENOENT);
  sbx_err(&err, SBX_E_INVAL, "bad");
  assert_int_equal(err.os_errno, 0);
  assert_int_equal(err.detail, 0);
  sbx_err_clear(&err);
  assert_int_equal(err.code, SBX_OK);
  assert_int_equal(err.os_errno, 0);
  assert_string_equal(err.msg, "");
}

static void test_cleanup_keeps_errno(void **state) {
  (void)state;
  {
    /* A descriptor number nothing has open: close fails with EBADF. */
    sbxi_cleanup_close int fd = 1 << 20;
    sbxi_cleanup_free char *p = sbx_strdup("owned");
    assert_true(fd > 0);
    assert_non_null(p);
    errno = ENOENT;
  }
  assert_int_equal(errno, ENOENT);
}

static int take_fd(int fd) { return close(fd); }

static char *make_pair(char **second) {
  sbxi_cleanup_free char *a = sbx_strdup("a");
  sbxi_cleanup_free char *b = sbx_strdup("b");
  *second = sbxi_steal_ptr(&b);
  assert_null(b);
  return sbxi_steal_ptr(&a);
}

static void test_steal(void **state) {
  (void)state;
  int passed;
  {
    sbxi_cleanup_close int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    passed = sbxi_steal_fd(&fd);
    assert_int_equal(fd, -1);
  }
  /* The cleanup did not close it: the new owner can. */
  assert_int_equal(fcntl(passed, F_GETFD), FD_CLOEXEC);
  assert_int_equal(take_fd(passed), 0);

  char *second = NULL;
  char *first = make_pair(&second);
  assert_string_equal(first, "a");
  assert_string_equal(second, "b");
  sbx_free(first);
  sbx_free(second);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wrap_keeps_code),   cmocka_unit_test(test_wrap_cuts_at_the_end),
      cmocka_unit_test(test_os_errno_is_an_errno), cmocka_unit_test(test_cleanup_keeps_errno),
      cmocka_unit_test(test_steal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
