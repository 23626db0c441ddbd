/* test_log: libsandbox's logger as a log reader sees it. Plain lines carry
 * fields as key=value (quoted when not one word); JSON lines are one
 * object each with time, level, pid, component, message and the fields,
 * numbers as numbers; a message over the line cap still gives one
 * complete line, and a JSON one still closes its object. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include <sandbox/core.h>

/* What one log call wrote, through a pipe. */
static char *capture(void (*fn)(void)) {
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  sbx_log_fd(p[1]);
  fn();
  sbx_log_fd(STDERR_FILENO);
  close(p[1]);
  static char buf[16384];
  size_t n = 0;
  ssize_t r;
  while ((r = read(p[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
  close(p[0]);
  buf[n] = '\0';
  return buf;
}

static void log_claim(void) {
  sbx_log_field f[] = {SBX_LOG_STR("id", "sb_1"), SBX_LOG_STR("key", "host|none|small"),
                       SBX_LOG_STR("note", "two words"), SBX_LOG_NUM("duration_ms", 0.25)};
  sbx_log_fields(SBX_LOG_INFO, f, 4, "claim %d", 7);
}

static void log_debug(void) { sbx_log_fields(SBX_LOG_DEBUG, NULL, 0, "hidden"); }

static void log_long(void) {
  static char big[8000];
  memset(big, 'x', sizeof big - 1);
  sbx_log_field f[] = {SBX_LOG_STR("blob", big), SBX_LOG_NUM("n", 1)};
  sbx_log_fields(SBX_LOG_WARN, f, 2, "%s", big);
}

static void test_plain(void **state) {
  sbx_log_setup("tlog", SBX_LOG_INFO, SBX_LOG_PLAIN);
  const char *out = capture(log_claim);
  char want[128];
  snprintf(want, sizeof want, " info tlog[%d]: claim 7 id=sb_1 key=host|none|small note=\"two words\" duration_ms=0.25\n",
           (int)getpid());
  assert_non_null(strstr(out, want));
  assert_string_equal(capture(log_debug), "");
}

static void test_json(void **state) {
  sbx_log_setup("tlog", SBX_LOG_INFO, SBX_LOG_PLAIN);
  sbx_log_set_format(SBX_LOG_JSON);
  const char *out = capture(log_claim);
  assert_int_equal(strchr(out, '\n') - out + 1, (long)strlen(out)); /* one line */
  json_error_t je;
  json_t *v = json_loads(out, 0, &je);
  assert_non_null(v);
  assert_true(json_is_string(json_object_get(v, "time")));
  assert_string_equal(json_string_value(json_object_get(v, "level")), "info");
  assert_int_equal(json_integer_value(json_object_get(v, "pid")), getpid());
  assert_string_equal(json_string_value(json_object_get(v, "component")), "tlog");
  assert_string_equal(json_string_value(json_object_get(v, "message")), "claim 7");
  assert_string_equal(json_string_value(json_object_get(v, "key")), "host|none|small");
  assert_string_equal(json_string_value(json_object_get(v, "note")), "two words");
  assert_true(json_real_value(json_object_get(v, "duration_ms")) == 0.25);
  json_decref(v);
  sbx_log_set_format(SBX_LOG_PLAIN);
}

/* Over the cap: cut, one line, and in JSON still an object's braces. */
static void test_long_line(void **state) {
  for (int fmt = 0; fmt < 2; fmt++) {
    sbx_log_setup("tlog", SBX_LOG_INFO, fmt ? SBX_LOG_JSON : SBX_LOG_PLAIN);
    const char *out = capture(log_long);
    size_t n = strlen(out);
    assert_true(n > 1000 && n <= 4096);
    assert_int_equal(out[n - 1], '\n');
    assert_ptr_equal(strchr(out, '\n'), out + n - 1);
    if (fmt) {
      assert_int_equal(out[0], '{');
      assert_int_equal(out[n - 2], '}');
    }
  }
  sbx_log_setup("tlog", SBX_LOG_INFO, SBX_LOG_PLAIN);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain),
      cmocka_unit_test(test_json),
      cmocka_unit_test(test_long_line),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
