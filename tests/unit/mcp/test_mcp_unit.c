/* sbxctl mcp pieces that need no server: the tool table (every schema
 * parses, annotations are consistent, names unique), argument checking,
 * UTF-8 repair of output before it goes into JSON, the registry, and the
 * answer of the verbs sandboxd lacks. The sbxctl sources are compiled in
 * (sbxctl is a program, not a library); the stdio loop in mcp.c is covered
 * by the integration test (tests/integration/mcp). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../../../sbxctl/mcp_tools.c"
#include "../../../sbxctl/mcp_util.c"
#include "../../../sbxctl/mcp_verbs.c"

/* mcp.c's, which the verbs call around a streaming exec */
bool mcp_call_running(mcp_call *c, sbx_sandbox *s, uint32_t pid) {
  (void)c, (void)s, (void)pid;
  return true;
}

static void test_tool_table(void **state) {
  (void)state;
  json_t *tools = mcp_tools_list();
  assert_non_null(tools);
  assert_int_equal(json_array_size(tools), 18);
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    const char *name = json_string_value(json_object_get(t, "name"));
    assert_non_null(name);
    for (size_t k = 0; k < i; k++)
      assert_string_not_equal(name, json_string_value(json_object_get(json_array_get(tools, k), "name")));
    json_t *schema = json_object_get(t, "inputSchema");
    assert_string_equal(json_string_value(json_object_get(schema, "type")), "object");
    assert_true(json_is_object(json_object_get(schema, "properties")));
    /* every required property is declared */
    size_t r;
    json_t *req;
    json_array_foreach(json_object_get(schema, "required"), r, req)
        assert_non_null(json_object_get(json_object_get(schema, "properties"), json_string_value(req)));
    const char *desc = json_string_value(json_object_get(t, "description"));
    assert_non_null(desc);
    assert_null(strchr(desc, '\n'));
    json_t *ann = json_object_get(t, "annotations");
    /* read-only and destructive exclude each other */
    assert_false(json_is_true(json_object_get(ann, "readOnlyHint")) &&
                 json_is_true(json_object_get(ann, "destructiveHint")));
  }
  json_decref(tools);
  assert_true(mcp_tool_find("read_file")->read_only);
  assert_true(mcp_tool_find("exec")->destructive);
  assert_true(mcp_tool_find("release")->destructive);
  assert_null(mcp_tool_find("rm_rf"));
}

static int check(const char *tool, const char *args_json, sbx_error *err) {
  json_t *a = json_loads(args_json, 0, NULL);
  assert_non_null(a);
  int rc = mcp_tool_check_args(mcp_tool_find(tool), a, err);
  json_decref(a);
  return rc;
}

static void test_check_args(void **state) {
  (void)state;
  sbx_error err;
  assert_int_equal(check("exec", "{\"sandbox_id\":\"sb_1\",\"command\":\"ls\"}", &err), 0);
  assert_int_equal(check("exec", "{\"sandbox_id\":\"sb_1\",\"command\":\"ls\",\"cwd\":\"/tmp\"}", &err), 0);
  assert_int_equal(check("exec", "{\"sandbox_id\":\"sb_1\"}", &err), SBX_E_INVAL);
  assert_non_null(strstr(err.msg, "\"command\""));
  assert_int_equal(check("exec", "{\"sandbox_id\":1,\"command\":\"ls\"}", &err), SBX_E_INVAL);
  assert_non_null(strstr(err.msg, "string"));
  assert_int_equal(check("exec", "{\"sandbox_id\":\"a\",\"command\":\"ls\",\"shell\":\"bash\"}", &err), SBX_E_INVAL);
  assert_non_null(strstr(err.msg, "unknown argument \"shell\""));
  assert_int_equal(check("create_sandbox", "{}", &err), 0);
  assert_int_equal(check("create_sandbox", "{\"net\":\"egress\",\"ttl_seconds\":0}", &err), 0);
  assert_int_equal(check("create_sandbox", "{\"net\":\"everything\"}", &err), SBX_E_INVAL);
  assert_int_equal(check("create_sandbox", "{\"ttl_seconds\":-1}", &err), SBX_E_INVAL);
  assert_int_equal(check("create_sandbox", "{\"ttl_seconds\":1.5}", &err), SBX_E_INVAL);
  assert_int_equal(check("kill", "{\"sandbox_id\":\"a\",\"pid\":0}", &err), SBX_E_INVAL);
  assert_int_equal(check("kill", "{\"sandbox_id\":\"a\",\"pid\":5,\"signal\":15}", &err), 0);
  assert_int_equal(check("node_info", "{}", &err), 0);
}

static void text_is(const char *in, size_t n, const char *want, bool want_repaired) {
  bool repaired;
  json_t *j = mcp_json_text(in, n, &repaired);
  assert_non_null(j);
  assert_int_equal(json_string_length(j), strlen(want));
  assert_memory_equal(json_string_value(j), want, strlen(want));
  assert_int_equal(repaired, want_repaired);
  json_decref(j);
}

static void test_utf8_repair(void **state) {
  (void)state;
  text_is("hi\n", 3, "hi\n", false);
  text_is("\xc3\xbc", 2, "\xc3\xbc", false);                       /* ü */
  text_is("\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80", false);       /* U+1F600 */
  text_is("a\xff" "b", 3, "a\xef\xbf\xbd" "b", true);                /* stray byte */
  text_is("x\xc3", 2, "x\xef\xbf\xbd", true);                       /* cut at the cap */
  text_is("\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd", true);          /* overlong */
  text_is("\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", true); /* surrogate */
  text_is("\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", true); /* > U+10FFFF */
  /* NUL is valid UTF-8 and kept (jansson stores the length) */
  bool repaired;
  json_t *j = mcp_json_text("a\0b", 3, &repaired);
  assert_int_equal(json_string_length(j), 3);
  assert_false(repaired);
  json_decref(j);
}

static void test_unsupported_and_unknown(void **state) {
  (void)state;
  mcp_registry reg;
  mcp_registry_init(&reg);
  mcp_call c = {.reg = &reg, .tool = "checkpoint"};
  json_t *out = NULL;
  sbx_error err;
  assert_int_equal(mcp_unsupported(&c, NULL, &out, &err), SBX_E_UNSUPPORTED);
  assert_null(out);
  assert_non_null(strstr(err.msg, "checkpoint is not supported"));
  /* no token and not ours: a tool error naming the id and the way out */
  sbx_sandbox *s;
  bool owned;
  assert_int_equal(mcp_sandbox(&c, "sb_nope", &s, &owned, &err), SBX_E_NOTFOUND);
  assert_non_null(strstr(err.msg, "sb_nope"));
  assert_non_null(strstr(err.msg, "create_sandbox"));
  assert_int_equal(mcp_sandbox(&c, "bad\nid", &s, &owned, &err), SBX_E_INVAL);
  /* releasing an id nobody knows counts as released */
  json_t *a = json_pack("{s:s}", "sandbox_id", "sb_nope");
  assert_int_equal(mcp_release(&c, a, &out, &err), 0);
  assert_true(json_is_true(json_object_get(out, "released")));
  json_decref(out);
  json_decref(a);
  assert_int_equal(mcp_registry_release_all(&reg), 0);
  assert_true(reg.closing);
  mcp_registry_free(&reg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tool_table),
      cmocka_unit_test(test_check_args),
      cmocka_unit_test(test_utf8_repair),
      cmocka_unit_test(test_unsupported_and_unknown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
