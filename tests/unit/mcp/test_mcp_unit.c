/* sbxctl mcp pieces that need no server: the tool table (every schema
 * parses, annotations are consistent, names unique), argument checking,
 * reading a JSON-RPC line (which error, with which id),
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

#include "../../../sbxctl/mcp_rpc.c"
#include "../../../sbxctl/mcp_tools.c"
#include "../../../sbxctl/mcp_util.c"
#include "../../../sbxctl/mcp_verbs.c"
#include "../../../sbxctl/mcp_search.c"
#include "../../../sbxctl/mcp_life.c"

/* mcp.c's, which the verbs call around a streaming exec */
bool mcp_call_running(mcp_call *c, sbx_sandbox *s, uint32_t pid) {
  (void)c, (void)s, (void)pid;
  return true;
}

static void test_tool_table(void **state) {
  (void)state;
  json_t *tools = mcp_tools_list();
  assert_non_null(tools);
  assert_int_equal(json_array_size(tools), 24);
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
    /* check_args enforces only the pattern "^/": no other may appear */
    const char *pk;
    json_t *pv;
    json_object_foreach(json_object_get(schema, "properties"), pk, pv) {
      json_t *pat = json_object_get(pv, "pattern");
      if (pat) assert_string_equal(json_string_value(pat), "^/");
    }
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

/* Every tool's annotations, spelled out: a tool that changes state is not
 * read-only, one that destroys or replaces something is destructive. A new
 * tool must be added here with its truthful hints. */
static void test_every_tool_annotation(void **state) {
  (void)state;
  static const struct {
    const char *name;
    bool ro, destructive, idempotent;
  } want[] = {
      {"create_sandbox", false, false, false}, {"exec", false, true, false},
      {"spawn", false, true, false},           {"ps", true, false, true},
      {"logs", true, false, true},             {"kill", false, true, false},
      {"write_file", false, true, true},       {"read_file", true, false, true},
      {"list_dir", true, false, true},         {"release", false, true, true},
      {"node_info", true, false, true},        {"fork", false, false, false},
      {"hibernate", false, false, true},       {"checkpoint", false, false, false},
      {"branch_checkpoint", false, false, false}, {"list_checkpoints", true, false, true},
      {"delete_checkpoint", false, true, true}, {"promote", false, true, false},
      {"wake", false, false, true},            {"search", true, false, true},
      {"replace", false, true, false},         {"git_status", true, false, true},
      {"git_diff", true, false, true},         {"git_commit", false, false, false},
  };
  size_t n = sizeof want / sizeof *want, seen = 0;
  json_t *tools = mcp_tools_list();
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    const char *name = json_string_value(json_object_get(t, "name"));
    json_t *ann = json_object_get(t, "annotations");
    size_t k = 0;
    while (k < n && strcmp(want[k].name, name) != 0) k++;
    if (k == n) fail_msg("tool %s has no expected annotations in this test", name);
    seen++;
    if (json_is_true(json_object_get(ann, "readOnlyHint")) != want[k].ro ||
        json_is_true(json_object_get(ann, "destructiveHint")) != want[k].destructive ||
        json_is_true(json_object_get(ann, "idempotentHint")) != want[k].idempotent)
      fail_msg("tool %s: annotations differ from the expected ones", name);
  }
  json_decref(tools);
  assert_int_equal(seen, n);
  /* upstream's argument names */
  assert_non_null(strstr(mcp_tool_find("fork")->schema, "\"count\""));
  assert_non_null(strstr(mcp_tool_find("promote")->schema, "\"template_name\""));
  assert_non_null(strstr(mcp_tool_find("promote")->schema, "\"sandbox_id\""));
  assert_null(strstr(mcp_tool_find("promote")->schema, "checkpoint_id"));
}

static int check(const char *tool, const char *args_json, sbx_error *err) {
  json_t *a = json_loads(args_json, 0, NULL);
  assert_non_null(a);
  int rc = mcp_tool_check_args(mcp_tool_find(tool), a, err);
  json_decref(a);
  return rc;
}

/* search changes nothing; replace rewrites files: the annotations an MCP
 * client shows must say so, and replace's files must be an array. */
static void test_search_tools(void **state) {
  (void)state;
  json_t *tools = mcp_tools_list();
  json_t *search = NULL, *replace = NULL, *t;
  size_t i;
  json_array_foreach(tools, i, t) {
    const char *name = json_string_value(json_object_get(t, "name"));
    if (strcmp(name, "search") == 0) search = t;
    if (strcmp(name, "replace") == 0) replace = t;
  }
  assert_non_null(search);
  assert_non_null(replace);
  json_t *sa = json_object_get(search, "annotations"), *ra = json_object_get(replace, "annotations");
  assert_true(json_is_true(json_object_get(sa, "readOnlyHint")));
  assert_true(json_is_false(json_object_get(sa, "destructiveHint")));
  assert_true(json_is_false(json_object_get(ra, "readOnlyHint")));
  assert_true(json_is_true(json_object_get(ra, "destructiveHint")));
  assert_true(json_is_false(json_object_get(ra, "idempotentHint")));
  json_t *files = json_object_get(json_object_get(json_object_get(replace, "inputSchema"), "properties"), "files");
  assert_string_equal(json_string_value(json_object_get(files, "type")), "array");
  json_decref(tools);
  sbx_error err;
  assert_int_equal(check("search", "{\"sandbox_id\":\"sb_1\",\"path\":\"/src\",\"pattern\":\"x\"}", &err), 0);
  assert_int_not_equal(check("search", "{\"sandbox_id\":\"sb_1\",\"path\":\"src\",\"pattern\":\"x\"}", &err), 0);
  assert_int_not_equal(check("search", "{\"sandbox_id\":\"sb_1\",\"path\":\"/\"}", &err), 0);
  assert_int_equal(check("replace", "{\"sandbox_id\":\"sb_1\",\"files\":[\"/a\"],\"pattern\":\"x\",\"replacement\":\"y\"}", &err), 0);
  assert_int_not_equal(
      check("replace", "{\"sandbox_id\":\"sb_1\",\"files\":\"/a\",\"pattern\":\"x\",\"replacement\":\"y\"}", &err), 0);
  assert_non_null(strstr(err.msg, "array"));
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
  /* sandbox paths are absolute, in every tool that takes one */
  const char *rel[] = {"{\"sandbox_id\":\"a\",\"path\":\"rel.txt\",\"content\":\"x\"}",
                       "{\"sandbox_id\":\"a\",\"path\":\"\"}", "{\"sandbox_id\":\"a\",\"path\":\"./x\"}",
                       "{\"sandbox_id\":\"a\",\"command\":\"ls\",\"cwd\":\"tmp\"}",
                       "{\"sandbox_id\":\"a\",\"command\":\"ls\",\"cwd\":\"tmp\"}"};
  const char *tool[] = {"write_file", "read_file", "list_dir", "exec", "spawn"};
  for (size_t i = 0; i < 5; i++) {
    assert_int_equal(check(tool[i], rel[i], &err), SBX_E_INVAL);
    assert_non_null(strstr(err.msg, "must be an absolute path"));
  }
  assert_int_equal(check("write_file", "{\"sandbox_id\":\"a\",\"path\":\"/tmp/a\",\"content\":\"x\"}", &err), 0);
  assert_int_equal(check("list_dir", "{\"sandbox_id\":\"a\",\"path\":\"/\"}", &err), 0);
}

/* Read one line; expect an error `code` answered to the id whose JSON text
 * is `id_json` ("null" for none), or with code 0 a request to serve. */
static void rpc_is(const char *line, int code, const char *id_json) {
  mcp_rpc_msg m;
  mcp_rpc_read(line, strlen(line), &m);
  if (code == 0) {
    if (m.reply) fail_msg("%s: unexpected reply %s", line, json_dumps(m.reply, JSON_COMPACT));
    assert_non_null(m.method);
    assert_non_null(m.params);
  } else {
    if (!m.reply) fail_msg("%s: no reply", line);
    json_t *e = json_object_get(m.reply, "error");
    if (json_integer_value(json_object_get(e, "code")) != code)
      fail_msg("%s: %s", line, json_dumps(m.reply, JSON_COMPACT));
    assert_true(json_is_string(json_object_get(e, "message")));
  }
  json_t *id = m.reply ? json_object_get(m.reply, "id") : m.id;
  char *got = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
  if (strcmp(got, id_json) != 0) fail_msg("%s: id %s, want %s", line, got, id_json);
  free(got);
  mcp_rpc_msg_free(&m);
}

static void test_rpc_read(void **state) {
  (void)state;
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", 0, "1");
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"ping\",\"params\":null}", 0, "\"a\"");
  /* valid JSON holding \u0000: answered to its own id */
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"exec\","
         "\"arguments\":{\"sandbox_id\":\"a\",\"command\":\"echo a\\u0000b\"}}}",
         MCP_RPC_PARAMS, "3");
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\",\"params\":{\"k\\u0000\":1}}", MCP_RPC_PARAMS, "4");
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\\u0000x\"}", MCP_RPC_INVALID, "5");
  rpc_is("{\"jsonrpc\":\"2.0\\u0000\",\"id\":6,\"method\":\"ping\"}", MCP_RPC_INVALID, "6");
  /* an id with \u0000 is still an id, echoed exactly */
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":\"x\\u0000y\",\"method\":\"ping\"}", 0, "\"x\\u0000y\"");
  /* integers past int64 (and a real past double) */
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"kill\","
         "\"arguments\":{\"sandbox_id\":\"a\",\"pid\":9223372036854775808}}}",
         MCP_RPC_PARAMS, "7");
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\",\"params\":{\"n\":-99999999999999999999999}}",
         MCP_RPC_PARAMS, "8");
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"params\":{\"n\":1e999}}", MCP_RPC_PARAMS, "9");
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"ping\",\"params\":{\"s\":\"9223372036854775808\"}}", 0,
         "10");
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":9223372036854775807,\"method\":\"ping\"}", 0, "9223372036854775807");
  /* an id that cannot be represented cannot be echoed: null, -32600 */
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":9223372036854775808,\"method\":\"ping\"}", MCP_RPC_INVALID, "null");
  /* not JSON at all: -32700, null */
  rpc_is("{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":", MCP_RPC_PARSE, "null");
  rpc_is("{\"id\":12,\"n\":99999999999999999999,}", MCP_RPC_PARSE, "null");
  rpc_is("{\"id\":13,\"s\":\"\\u0000\" x}", MCP_RPC_PARSE, "null");
  rpc_is("not json", MCP_RPC_PARSE, "null");
  rpc_is("{\"id\":14,\"s\":\"\\ud800\"}", MCP_RPC_PARSE, "null");
  const char raw_nul[] = "{\"jsonrpc\":\"2.0\",\"id\":15,\"method\":\"ping\"}\0";
  mcp_rpc_msg m;
  mcp_rpc_read(raw_nul, sizeof raw_nul - 1, &m);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(m.reply, "error"), "code")), MCP_RPC_PARSE);
  mcp_rpc_msg_free(&m);
  /* a notification with either is simply dropped */
  const char *note = "{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"n\":99999999999999999999}}";
  mcp_rpc_read(note, strlen(note), &m);
  assert_null(m.reply);
  assert_null(m.id);
  mcp_rpc_msg_free(&m);
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

/* MCP 2025-06-18: every tool declares its structuredContent's shape, and
 * what it requires it declares. */
static void test_output_schemas(void **state) {
  (void)state;
  json_t *tools = mcp_tools_list();
  assert_non_null(tools);
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    const char *name = json_string_value(json_object_get(t, "name"));
    json_t *os = json_object_get(t, "outputSchema");
    if (!json_is_object(os)) fail_msg("%s has no outputSchema", name);
    assert_string_equal(json_string_value(json_object_get(os, "type")), "object");
    size_t r;
    json_t *req;
    json_array_foreach(json_object_get(os, "required"), r, req)
        if (!json_object_get(json_object_get(os, "properties"), json_string_value(req)))
            fail_msg("%s: required %s undeclared", name, json_string_value(req));
  }
  json_decref(tools);
  assert_non_null(strstr(mcp_tool_output_schema("kill"), "\"sent\""));
  assert_non_null(strstr(mcp_tool_output_schema("exec"), "\"timed_out\""));
}

/* A node whose driver answers the lifecycle verbs 501 is not offered them. */
static void test_lifecycle_tools_hidden(void **state) {
  (void)state;
  json_t *all = mcp_tools_list_for(true), *some = mcp_tools_list_for(false);
  assert_int_equal(json_array_size(all), 24);
  assert_int_equal(json_array_size(some), 16);
  size_t i;
  json_t *t;
  json_array_foreach(some, i, t) {
    const char *name = json_string_value(json_object_get(t, "name"));
    assert_false(mcp_tool_is_lifecycle(name));
  }
  for (const char *const *n = (const char *const[]){"fork", "hibernate", "wake", "checkpoint", "promote", NULL}; *n;
       n++)
    assert_true(mcp_tool_is_lifecycle(*n));
  assert_false(mcp_tool_is_lifecycle("exec"));
  json_decref(all);
  json_decref(some);
}

/* exec's new arguments are declared (and so pass check_args). */
static void test_exec_args(void **state) {
  (void)state;
  sbx_error err;
  assert_int_equal(check("exec", "{\"sandbox_id\":\"s\",\"command\":\"c\",\"env\":{\"A\":\"1\"},"
                                 "\"stdin\":\"x\",\"timeout_seconds\":5,\"cwd\":\"/\"}",
                         &err),
                   0);
  assert_int_equal(check("exec", "{\"sandbox_id\":\"s\",\"command\":\"c\",\"timeout_seconds\":0}", &err),
                   SBX_E_INVAL);
  assert_int_equal(check("exec", "{\"sandbox_id\":\"s\",\"command\":\"c\",\"env\":\"A=1\"}", &err), SBX_E_INVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tool_table),
      cmocka_unit_test(test_every_tool_annotation),
      cmocka_unit_test(test_check_args),
      cmocka_unit_test(test_search_tools),
      cmocka_unit_test(test_rpc_read),
      cmocka_unit_test(test_utf8_repair),
      cmocka_unit_test(test_unsupported_and_unknown),
      cmocka_unit_test(test_output_schemas),
      cmocka_unit_test(test_lifecycle_tools_hidden),
      cmocka_unit_test(test_exec_args),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
