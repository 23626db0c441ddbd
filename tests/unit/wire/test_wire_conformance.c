/* Conformance over the fixture corpus (silkd-wire.md §9.1, §9.2): every
 * request decodes to its op with every member, every response decodes and
 * re-encodes to value-equal JSON, enums.json equals the codec's tables, and
 * the corpus has exactly 39 requests, 22 responses and enums.json. The
 * corpus missing is a failure, never a skip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sandbox/wire.h>

#include "fixtures.h"

static char *fixture(const char *name, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", SBX_FIXTURES_DIR, name);
  char *s = slurp(path, len);
  if (!s) fail_msg("fixture %s missing (corpus at %s)", name, SBX_FIXTURES_DIR);
  /* The trailing LF is the frame terminator, not part of the frame. */
  assert_true(*len > 0 && s[*len - 1] == '\n');
  s[--*len] = '\0';
  return s;
}

/* Fixture file "req_exec_detach.json" names op "exec": the longest op name
 * that prefixes the stem at an underscore boundary. */
static int expected_tag(const char *stem, bool req) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", stem);
  for (;;) {
    int t = req ? sbx_wire_op_from_name(buf, strlen(buf)) : sbx_wire_type_from_name(buf, strlen(buf));
    if (t >= 0) return t;
    char *us = strrchr(buf, '_');
    if (!us) return -1;
    *us = '\0';
  }
}

static void check_roundtrip(const char *line, size_t len, bool req) {
  sbx_error err;
  sbx_buf out = SBX_BUF_INIT(SBX_WIRE_FRAME_CAP + 16);
  if (req) {
    sbx_wire_req r;
    assert_int_equal(sbx_wire_decode_req(line, len, &r, &err), 0);
    assert_int_equal(sbx_wire_encode_req(&out, &r, &err), 0);
    sbx_wire_req_free(&r);
  } else {
    sbx_wire_resp r;
    assert_int_equal(sbx_wire_decode_resp(line, len, &r, &err), 0);
    assert_int_equal(sbx_wire_encode_resp(&out, &r, &err), 0);
    sbx_wire_resp_free(&r);
  }
  assert_true(out.len > 0 && out.ptr[out.len - 1] == '\n');
  if (!json_value_equal(line, len, out.ptr, out.len - 1))
    fail_msg("re-encoding differs:\n  fixture: %s\n  ours:    %.*s", line, (int)out.len - 1, out.ptr);
  sbx_buf_free(&out);
}

static void test_corpus(void **state) {
  (void)state;
  DIR *dir = opendir(SBX_FIXTURES_DIR);
  if (!dir) fail_msg("fixture corpus not found at %s", SBX_FIXTURES_DIR);
  int nreq = 0, nresp = 0, nenums = 0;
  bool op_seen[SBX_OP__COUNT] = {0}, type_seen[SBX_RESP__COUNT] = {0};
  struct dirent *de;
  while ((de = readdir(dir))) {
    const char *name = de->d_name;
    size_t nl = strlen(name);
    if (nl < 6 || strcmp(name + nl - 5, ".json") != 0) continue;
    if (strcmp(name, "enums.json") == 0) {
      nenums++;
      continue;
    }
    bool req = strncmp(name, "req_", 4) == 0;
    bool resp = strncmp(name, "resp_", 5) == 0;
    assert_true(req || resp);
    char stem[128];
    snprintf(stem, sizeof stem, "%.*s", (int)(nl - 5 - (req ? 4 : 5)), name + (req ? 4 : 5));
    int tag = expected_tag(stem, req);
    if (tag < 0) fail_msg("%s names no known %s", name, req ? "op" : "type");
    size_t len = 0;
    char *line = fixture(name, &len);
    sbx_error err;
    if (req) {
      sbx_wire_req r;
      if (sbx_wire_decode_req(line, len, &r, &err) < 0) fail_msg("%s: %s", name, err.msg);
      assert_int_equal(r.op, tag);
      assert_null(r.nul_field);
      op_seen[tag] = true;
      sbx_wire_req_free(&r);
      nreq++;
    } else {
      sbx_wire_resp r;
      if (sbx_wire_decode_resp(line, len, &r, &err) < 0) fail_msg("%s: %s", name, err.msg);
      assert_int_equal(r.type, tag);
      type_seen[tag] = true;
      sbx_wire_resp_free(&r);
      nresp++;
    }
    check_roundtrip(line, len, req);
    free(line);
  }
  closedir(dir);
  assert_int_equal(nreq, 39);
  assert_int_equal(nresp, 22);
  assert_int_equal(nenums, 1);
  for (int i = 0; i < SBX_OP__COUNT; i++)
    if (!op_seen[i]) fail_msg("no fixture decoded as op %s", sbx_wire_op_name(i));
  for (int i = 0; i < SBX_RESP__COUNT; i++)
    if (!type_seen[i]) fail_msg("no fixture decoded as type %s", sbx_wire_type_name(i));
}

static void test_enums_match(void **state) {
  (void)state;
  size_t len = 0;
  char path[1024];
  snprintf(path, sizeof path, "%s/enums.json", SBX_FIXTURES_DIR);
  char *text = slurp(path, &len);
  if (!text) fail_msg("enums.json missing at %s", path);
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_PRESERVE_ORDER, &je);
  assert_non_null(root);
  size_t count;
  const sbx_wire_enum *enums = sbx_wire_enums(&count);
  assert_int_equal(json_object_size(root), count);
  size_t i = 0;
  const char *key;
  json_t *arr;
  json_object_foreach(root, key, arr) {
    assert_string_equal(key, enums[i].name);
    assert_int_equal(json_array_size(arr), enums[i].count);
    for (size_t k = 0; k < enums[i].count; k++) assert_string_equal(json_string_value(json_array_get(arr, k)), enums[i].values[k]);
    i++;
  }
  json_decref(root);
  free(text);
}

/* Every member of the richest fixtures decodes to the right C value. */
static void test_fields_decoded(void **state) {
  (void)state;
  size_t len = 0;
  sbx_error err;
  sbx_wire_req r;
  char *line = fixture("req_exec.json", &len);
  assert_int_equal(sbx_wire_decode_req(line, len, &r, &err), 0);
  assert_int_equal(r.u.exec.argv.len, 3);
  assert_string_equal(r.u.exec.argv.items[0], "python3");
  assert_string_equal(r.u.exec.argv.items[2], "print(40+2)");
  assert_string_equal(r.u.exec.cwd, "/workspace");
  assert_true(r.u.exec.env.present);
  assert_int_equal(r.u.exec.env.len, 1);
  assert_string_equal(r.u.exec.env.items[0].key, "PYTHONUNBUFFERED");
  assert_string_equal(r.u.exec.env.items[0].value, "1");
  assert_string_equal(r.u.exec.user, "root");
  assert_true(r.u.exec.has_detach);
  assert_false(r.u.exec.detach);
  assert_string_equal(r.u.exec.session, "sess-1");
  assert_int_equal(sbx_wire_req_input_mode(&r), SBX_INPUT_NONE); /* session exec reads no input */
  sbx_wire_req_free(&r);
  free(line);

  line = fixture("req_data.json", &len);
  assert_int_equal(sbx_wire_decode_req(line, len, &r, &err), 0);
  assert_int_equal(r.op, SBX_OP_DATA);
  assert_int_equal(r.u.data.data.len, 5);
  assert_memory_equal(r.u.data.data.ptr, "hello", 5);
  sbx_wire_req_free(&r);
  free(line);

  line = fixture("req_git_clone.json", &len);
  assert_int_equal(sbx_wire_decode_req(line, len, &r, &err), 0);
  assert_string_equal(r.u.git_clone.url, "https://github.com/x/y.git");
  assert_string_equal(r.u.git_clone.branch, "main");
  assert_true(r.u.git_clone.has_depth);
  assert_int_equal(r.u.git_clone.depth, 1);
  assert_string_equal(r.u.git_clone.auth, "x-token-1");
  sbx_wire_req_free(&r);
  free(line);

  line = fixture("req_pty_open.json", &len);
  assert_int_equal(sbx_wire_decode_req(line, len, &r, &err), 0);
  assert_int_equal(r.u.pty_open.cols, 80);
  assert_int_equal(r.u.pty_open.rows, 24);
  assert_string_equal(r.u.pty_open.user, "ubuntu");
  assert_int_equal(sbx_wire_req_input_mode(&r), SBX_INPUT_FED);
  sbx_wire_req_free(&r);
  free(line);

  sbx_wire_resp p;
  line = fixture("resp_procs.json", &len);
  assert_int_equal(sbx_wire_decode_resp(line, len, &p, &err), 0);
  assert_int_equal(p.u.procs.len, 2);
  assert_int_equal(p.u.procs.items[0].pid, 1234);
  assert_int_equal(p.u.procs.items[0].state, SBX_PROC_RUNNING);
  assert_false(p.u.procs.items[0].has_exit_code);
  assert_int_equal(p.u.procs.items[1].state, SBX_PROC_EXITED);
  assert_true(p.u.procs.items[1].has_exit_code);
  assert_int_equal(p.u.procs.items[1].exit_code, 0);
  assert_int_equal(p.u.procs.items[1].started_at_epoch_secs, 1700000001ull);
  sbx_wire_resp_free(&p);
  free(line);

  line = fixture("resp_stderr.json", &len);
  assert_int_equal(sbx_wire_decode_resp(line, len, &p, &err), 0);
  assert_int_equal(p.type, SBX_RESP_STDERR);
  assert_int_equal(p.u.stderr_.data.len, 5);
  assert_memory_equal(p.u.stderr_.data.ptr, "oops\n", 5);
  sbx_wire_resp_free(&p);
  free(line);

  line = fixture("resp_git_status_result_truncated.json", &len);
  assert_int_equal(sbx_wire_decode_resp(line, len, &p, &err), 0);
  assert_true(p.u.git_status_result.truncated);
  assert_int_equal(p.u.git_status_result.files_len, 1);
  assert_string_equal(p.u.git_status_result.files[0].staged, "?");
  sbx_wire_resp_free(&p);
  free(line);

  line = fixture("resp_match.json", &len);
  assert_int_equal(sbx_wire_decode_resp(line, len, &p, &err), 0);
  assert_string_equal(p.u.match.content, "    // TODO: fix");
  assert_int_equal(p.u.match.line, 42);
  sbx_wire_resp_free(&p);
  free(line);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_corpus),
      cmocka_unit_test(test_enums_match),
      cmocka_unit_test(test_fields_decoded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
