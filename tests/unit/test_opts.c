/* Growable option structs: what a caller built against older or newer
 * headers sees (docs/client.md, "Option structs and the ABI"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <sandbox/sandbox.h>

#include "core/opts.h"

/* One struct in two releases: v2 appended c. */
typedef struct {
  size_t struct_size;
  int a;
  const char *b;
} opts_v1;
typedef struct {
  size_t struct_size;
  int a;
  const char *b;
  int64_t c;
} opts_v2;
#define V1_MIN SBXI_SIZE_TO(opts_v1, b)

/* An older caller's struct: the appended field reads as its default, 0. */
static void test_older_caller(void **state) {
  (void)state;
  opts_v1 old = {.struct_size = sizeof old, .a = 7, .b = "x"};
  opts_v2 got;
  memset(&got, 0x5a, sizeof got);
  assert_int_equal(sbxi_opts_load(&got, sizeof got, &old, V1_MIN, "t", NULL), 0);
  assert_int_equal(got.struct_size, sizeof got);
  assert_int_equal(got.a, 7);
  assert_string_equal(got.b, "x");
  assert_int_equal(got.c, 0);
}

/* A newer caller's struct: accepted while the fields this library does
 * not know are zero, refused (not ignored) once one is set. */
static void test_newer_caller(void **state) {
  (void)state;
  opts_v2 nw;
  memset(&nw, 0, sizeof nw);
  nw.struct_size = sizeof nw;
  nw.a = 3;
  opts_v1 got;
  sbx_error err = {0};
  assert_int_equal(sbxi_opts_load(&got, sizeof got, &nw, V1_MIN, "t", &err), 0);
  assert_int_equal(got.a, 3);
  assert_int_equal(got.struct_size, sizeof got);
  nw.c = 1;
  assert_int_equal(sbxi_opts_load(&got, sizeof got, &nw, V1_MIN, "t", &err), SBX_E_UNSUPPORTED);
  assert_non_null(strstr(err.msg, "does not know"));
}

static void test_bad_sizes(void **state) {
  (void)state;
  opts_v2 got;
  sbx_error err = {0};
  opts_v1 none = {.a = 1}; /* struct_size never set */
  assert_int_equal(sbxi_opts_load(&got, sizeof got, &none, V1_MIN, "t", &err), SBX_E_INVAL);
  assert_non_null(strstr(err.msg, "INIT"));
  opts_v1 huge = {.struct_size = 1u << 20};
  assert_int_equal(sbxi_opts_load(&got, sizeof got, &huge, V1_MIN, "t", &err), SBX_E_INVAL);
  opts_v1 short_ = {.struct_size = sizeof(size_t) + sizeof(int)}; /* cuts b */
  assert_int_equal(sbxi_opts_load(&got, sizeof got, &short_, V1_MIN, "t", &err), SBX_E_INVAL);
  /* NULL is all defaults; whether that is allowed is the caller's rule */
  assert_int_equal(sbxi_opts_load(&got, sizeof got, NULL, V1_MIN, "t", &err), 0);
  assert_int_equal(got.struct_size, sizeof got);
  assert_int_equal(got.a, 0);
  assert_null(got.b);
}

/* In an array the stride is the caller's size, not the library's. */
static void test_array_stride(void **state) {
  (void)state;
  opts_v1 arr[3] = {{sizeof(opts_v1), 1, "a"}, {sizeof(opts_v1), 2, "b"}, {sizeof(opts_v1), 3, "c"}};
  for (size_t i = 0; i < 3; i++) {
    opts_v2 got;
    assert_int_equal(sbxi_opts_load_at(&got, sizeof got, arr, i, V1_MIN, "t", NULL), 0);
    assert_int_equal(got.a, (int)i + 1);
    assert_int_equal(got.c, 0);
  }
  arr[2].struct_size = sizeof(opts_v2);
  opts_v2 got;
  sbx_error err = {0};
  assert_int_equal(sbxi_opts_load_at(&got, sizeof got, arr, 2, V1_MIN, "t", &err), SBX_E_INVAL);
  assert_non_null(strstr(err.msg, "[2]"));
}

/* The public entry points apply the rule (none of these connects). */
static void test_public_entry_points(void **state) {
  (void)state;
  sbx_error err = {0};
  sbx_client *c = NULL;
  sbx_client_opts bare = {.addr = "127.0.0.1:1"}; /* no SBX_CLIENT_OPTS_INIT */
  assert_int_equal(sbx_client_new(&bare, &c, &err), SBX_E_INVAL);
  assert_null(c);

  struct {
    sbx_client_opts o;
    uint64_t future; /* a field of a later release */
  } newer;
  memset(&newer, 0, sizeof newer);
  newer.o = (sbx_client_opts)SBX_CLIENT_OPTS_INIT(.addr = "127.0.0.1:1");
  newer.o.struct_size = sizeof newer;
  assert_int_equal(sbx_client_new(&newer.o, &c, &err), 0);
  sbx_client_free(c);
  c = NULL;
  newer.future = 1;
  assert_int_equal(sbx_client_new(&newer.o, &c, &err), SBX_E_UNSUPPORTED);
  assert_null(c);

  sbx_driver *d = NULL;
  sbx_driver_config cfg = {.run_dir = "/nonexistent"}; /* no SBX_DRIVER_CONFIG_INIT */
  assert_int_equal(sbx_driver_open("jail", &cfg, &d, &err), SBX_E_INVAL);
  assert_null(d);
  assert_non_null(strstr(err.msg, "driver config"));
}

static void test_version_macros(void **state) {
  (void)state;
  assert_int_equal(SBX_VERSION_NUM, (SBX_VERSION_MAJOR << 16) | (SBX_VERSION_MINOR << 8) | SBX_VERSION_PATCH);
  assert_true(SBX_VERSION_CHECK(SBX_VERSION_MAJOR, SBX_VERSION_MINOR, SBX_VERSION_PATCH));
  assert_false(SBX_VERSION_CHECK(SBX_VERSION_MAJOR + 1, 0, 0));
  assert_true(SBX_VERSION_CHECK(0, 0, 0));
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", SBX_VERSION_MAJOR, SBX_VERSION_MINOR, SBX_VERSION_PATCH);
  assert_string_equal(SBX_VERSION_STRING, want);
  assert_string_equal(sbx_version(), SBX_VERSION_STRING);
  assert_int_equal(sbx_version_num(), SBX_VERSION_NUM);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_older_caller),       cmocka_unit_test(test_newer_caller),
      cmocka_unit_test(test_bad_sizes),          cmocka_unit_test(test_array_stride),
      cmocka_unit_test(test_public_entry_points), cmocka_unit_test(test_version_macros),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
