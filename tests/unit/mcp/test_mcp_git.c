/* sbxctl mcp's git tools without a server: their annotations tell the
 * truth (status and diff change nothing, commit does), their schemas
 * parse, and their arguments are checked (absolute repository path,
 * files as an array of strings). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../../../sbxctl/mcp_rpc.c"
#include "../../../sbxctl/mcp_tools.c"
#include "../../../sbxctl/mcp_util.c"
#include "../../../sbxctl/mcp_verbs.c"
#include "../../../sbxctl/mcp_search.c"
#include "../../../sbxctl/mcp_life.c"

bool mcp_call_running(mcp_call *c, sbx_sandbox *s, uint32_t pid) {
  (void)c, (void)s, (void)pid;
  return true;
}

static json_t *annotations(json_t *tools, const char *name) {
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0) return
      json_object_get(t, "annotations");
  return NULL;
}

static void test_git_annotations(void **state) {
  (void)state;
  json_t *tools = mcp_tools_list();
  assert_non_null(tools);
  struct {
    const char *name;
    bool read_only, destructive, idempotent;
  } want[] = {{"git_status", true, false, true}, {"git_diff", true, false, true}, {"git_commit", false, false, false}};
  for (size_t i = 0; i < 3; i++) {
    json_t *ann = annotations(tools, want[i].name);
    assert_non_null(ann);
    assert_int_equal(json_is_true(json_object_get(ann, "readOnlyHint")), want[i].read_only);
    assert_int_equal(json_is_true(json_object_get(ann, "destructiveHint")), want[i].destructive);
    assert_int_equal(json_is_true(json_object_get(ann, "idempotentHint")), want[i].idempotent);
    assert_false(json_is_true(json_object_get(ann, "openWorldHint")));
  }
  json_decref(tools);
}

static void test_git_args(void **state) {
  (void)state;
  const mcp_tool *st = mcp_tool_find("git_status"), *cm = mcp_tool_find("git_commit"), *df = mcp_tool_find("git_diff");
  assert_non_null(st);
  sbx_error err;
  json_t *a = json_pack("{s:s,s:s}", "sandbox_id", "sb_1", "path", "/src");
  assert_int_equal(mcp_tool_check_args(st, a, &err), 0);
  json_object_set_new(a, "path", json_string("src"));
  assert_int_equal(mcp_tool_check_args(st, a, &err), SBX_E_INVAL);
  assert_non_null(strstr(err.msg, "absolute path"));
  json_decref(a);
  a = json_pack("{s:s,s:s}", "sandbox_id", "sb_1", "path", "/src");
  assert_int_equal(mcp_tool_check_args(cm, a, &err), SBX_E_INVAL); /* no message */
  json_object_set_new(a, "message", json_string("m"));
  json_object_set_new(a, "files", json_string("a.c"));
  assert_int_equal(mcp_tool_check_args(cm, a, &err), SBX_E_INVAL); /* files is an array */
  json_object_set_new(a, "files", json_pack("[s]", "a.c"));
  assert_int_equal(mcp_tool_check_args(cm, a, &err), 0);
  json_object_del(a, "message");
  json_object_set_new(a, "staged", json_true());
  assert_int_equal(mcp_tool_check_args(df, a, &err), 0);
  json_decref(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_git_annotations), cmocka_unit_test(test_git_args)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
