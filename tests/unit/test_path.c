/* sbxi_path_fmt: a path that fits is built whole; one that needs one byte
 * more than its buffer fails with SBX_E_NAMETOOLONG and leaves an empty
 * string, never a shorter path that names another file. Buffers are
 * allocated at their exact sizes so ASan catches a write past cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <sandbox/core.h>

#include "core/path.h"

static void test_fits_exactly(void **state) {
  (void)state;
  const char *want = "/var/lib/sandboxd/goldens/abc/.ready";
  size_t cap = strlen(want) + 1;
  char *out = malloc(cap);
  sbx_error err;
  sbx_err_clear(&err);
  assert_int_equal(sbxi_path_fmt(out, cap, &err, "%s/goldens/%s/.ready", "/var/lib/sandboxd", "abc"), 0);
  assert_string_equal(out, want);
  assert_int_equal(err.code, SBX_OK);
  free(out);
}

static void test_one_byte_short_fails(void **state) {
  (void)state;
  const char *want = "/var/lib/sandboxd/goldens/abc/.ready";
  size_t cap = strlen(want); /* no room for the NUL */
  char *out = malloc(cap);
  sbx_error err;
  assert_int_equal(sbxi_path_fmt(out, cap, &err, "%s/goldens/%s/.ready", "/var/lib/sandboxd", "abc"),
                   SBX_E_NAMETOOLONG);
  assert_int_equal(err.code, SBX_E_NAMETOOLONG);
  assert_string_equal(out, "");
  assert_non_null(strstr(err.msg, "/var/lib/sandboxd/goldens"));
  assert_string_equal(sbx_code_name(SBX_E_NAMETOOLONG), "name_too_long");
  free(out);
}

static void test_long_component(void **state) {
  (void)state;
  char big[5000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  char out[4096];
  assert_int_equal(sbxi_path_fmt(out, sizeof out, NULL, "%s/state", big), SBX_E_NAMETOOLONG);
  assert_string_equal(out, "");
  /* A zero-sized buffer is never written. */
  assert_int_equal(sbxi_path_fmt(NULL, 0, NULL, "x"), SBX_E_NAMETOOLONG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fits_exactly),
      cmocka_unit_test(test_one_byte_short_fails),
      cmocka_unit_test(test_long_component),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
