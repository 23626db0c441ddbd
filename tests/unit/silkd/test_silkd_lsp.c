/* test_silkd_lsp.c - the LSP broker (§5.12) against a real silkd: manifest
 * rules (names with / or .., symlinks, empty files), the raw relay both
 * ways, single-shot attach, lsp_stop, the unattached reap, and a round
 * trip with a real language server (the host's clangd: initialize, then a
 * hover and a definition answer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "silkd_client.h"

static silkd_srv srv;
static char lspdir[400], work[400];

static void put(const char *dir, const char *name, const char *content) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(content, f);
  fclose(f);
}

static int setup(void **state) {
  char tmpl[] = "/tmp/silkd-lsp-XXXXXX";
  if (!mkdtemp(tmpl)) return -1;
  snprintf(lspdir, sizeof lspdir, "%s/lsp.d", tmpl);
  snprintf(work, sizeof work, "%s/work", tmpl);
  mkdir(lspdir, 0755);
  mkdir(work, 0755);
  put(lspdir, "cat", "cat\n");
  put(lspdir, "empty", " \n\t");
  put(lspdir, "missing-binary", "/nonexistent/language-server --stdio");
  put(lspdir, "c", "clangd --log=error\n");
  char script[600], manifest[700];
  snprintf(script, sizeof script, "echo $$ > %s/server.pid; exec cat", work);
  put(work, "server.sh", script);
  snprintf(manifest, sizeof manifest, "/bin/sh %s/server.sh", work);
  put(lspdir, "pidcat", manifest);
  char link[600];
  snprintf(link, sizeof link, "%s/linked", lspdir);
  if (symlink("cat", link) < 0) return -1;
  setenv("SILKD_LSP_DIR", lspdir, 1);
  return silkd_start(&srv);
}
static int teardown(void **state) {
  int st = silkd_stop(&srv);
  char top[400];
  snprintf(top, sizeof top, "%.*s", (int)(strrchr(lspdir, '/') - lspdir), lspdir);
  sc_rmrf(top);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* lsp_start; returns the server id (static) or NULL with the error in r. */
static const char *start(sc *c, const char *lang_json, const char *root, sbx_wire_resp *err) {
  static char id[64];
  if (root) sc_sendf(c, "{\"v\":1,\"op\":\"lsp_start\",\"language\":%s,\"root\":\"%s\"}", lang_json, root);
  else sc_sendf(c, "{\"v\":1,\"op\":\"lsp_start\",\"language\":%s}", lang_json);
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  if (r.type != SBX_RESP_LSP_STARTED) {
    *err = r;
    return NULL;
  }
  snprintf(id, sizeof id, "%s", r.u.lsp_started.server_id);
  sbx_wire_resp_free(&r);
  return id;
}

static void expect_start_refused(sc *c, const char *lang_json, const char *lang) {
  sbx_wire_resp r;
  assert_null(start(c, lang_json, NULL, &r));
  assert_int_equal(r.type, SBX_RESP_ERROR);
  assert_int_equal(r.u.error.kind, SBX_ERR_NOT_FOUND);
  char want[1200];
  snprintf(want, sizeof want, "no language server for \"%s\"; a flavor image provides %s/%s", lang, lspdir, lang);
  assert_string_equal(r.u.error.message, want);
  sbx_wire_resp_free(&r);
}

static void test_bad_languages(void **state) {
  sc *c = sc_open(&srv);
  expect_start_refused(c, "\"../../bin/sh\"", "../../bin/sh");
  expect_start_refused(c, "\"..\"", "..");
  expect_start_refused(c, "\"a/b\"", "a/b");
  expect_start_refused(c, "\"a\\\\b\"", "a\\b");
  expect_start_refused(c, "\"\"", "");
  expect_start_refused(c, "\"nosuch\"", "nosuch");
  expect_start_refused(c, "\"empty\"", "empty");
  expect_start_refused(c, "\"linked\"", "linked"); /* O_NOFOLLOW */
  /* a manifest whose program is missing: spawn fails with ENOENT */
  sbx_wire_resp r;
  assert_null(start(c, "\"missing-binary\"", NULL, &r));
  assert_int_equal(r.u.error.kind, SBX_ERR_NOT_FOUND);
  assert_int_equal(strncmp(r.u.error.message, "spawn language server: ", 23), 0);
  sbx_wire_resp_free(&r);
  /* unknown ids */
  sc_sendf(c, "{\"v\":1,\"op\":\"lsp_request\",\"server_id\":\"lsp-999999\"}");
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_NOT_FOUND);
  assert_string_equal(res.msg, "no such lsp server");
  sc_result_free(&res);
  sc_sendf(c, "{\"v\":1,\"op\":\"lsp_stop\",\"server_id\":\"lsp-999999\"}");
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_NOT_FOUND);
  assert_string_equal(res.msg, "no such lsp server");
  sc_result_free(&res);
  sc_close(c);
}

static void expect_frame(sc *c, sbx_wire_type t) {
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  if (r.type == SBX_RESP_ERROR) fprintf(stderr, "error: %s\n", r.u.error.message);
  assert_int_equal(r.type, t);
  sbx_wire_resp_free(&r);
}

static void test_relay_single_shot(void **state) {
  sc *c = sc_open(&srv), *c2 = sc_open(&srv);
  sbx_wire_resp r;
  const char *id0 = start(c, "\"cat\"", work, &r);
  assert_non_null(id0);
  char id[64];
  snprintf(id, sizeof id, "%s", id0);
  assert_int_equal(strncmp(id, "lsp-", 4), 0);
  sc_sendf(c, "{\"v\":1,\"op\":\"lsp_request\",\"server_id\":\"%s\"}", id);
  expect_frame(c, SBX_RESP_READY);
  /* a second attach, even while the first runs, is refused */
  sc_sendf(c2, "{\"v\":1,\"op\":\"lsp_request\",\"server_id\":\"%s\"}", id);
  sc_result res;
  assert_int_equal(sc_collect(c2, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_BAD_REQUEST);
  assert_string_equal(res.msg, "lsp server already attached");
  sc_result_free(&res);
  /* bytes go through untouched, both ways, with no framing of ours */
  const char msg[] = "Content-Length: 2\r\n\r\n{}\x00\xff binary";
  sc_send_bulk(c, SBX_BULK_REQ_DATA, msg, sizeof msg);
  sbx_buf got = SBX_BUF_INIT(1 << 20);
  while (got.len < sizeof msg) {
    assert_int_equal(sc_recv(c, &r), 1);
    assert_int_equal(r.type, SBX_RESP_DATA);
    sbx_buf_add(&got, r.u.data.data.ptr, r.u.data.data.len, NULL);
    sbx_wire_resp_free(&r);
  }
  assert_int_equal(got.len, sizeof msg);
  assert_memory_equal(got.ptr, msg, sizeof msg);
  sbx_buf_free(&got);
  /* data_end closes the server's stdin: cat ends, and so does the RPC */
  sc_sendf(c, "{\"v\":1,\"op\":\"data_end\"}");
  expect_frame(c, SBX_RESP_DONE);
  /* single shot: the server is gone */
  sc_sendf(c, "{\"v\":1,\"op\":\"lsp_request\",\"server_id\":\"%s\"}", id);
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_NOT_FOUND);
  sc_result_free(&res);
  sc_close(c);
  sc_close(c2);
}

static pid_t read_pid(void) {
  char p[600];
  snprintf(p, sizeof p, "%s/server.pid", work);
  for (int i = 0; i < SC_HANG_MS / 10; i++) {
    FILE *f = fopen(p, "r");
    int pid = 0;
    if (f) {
      if (fscanf(f, "%d", &pid) != 1) pid = 0;
      fclose(f);
    }
    if (pid > 0) return pid;
    usleep(10000);
  }
  return 0;
}

static bool gone(pid_t pid) {
  for (int i = 0; i < SC_HANG_MS / 10; i++) {
    if (kill(pid, 0) < 0 && errno == ESRCH) return true;
    usleep(10000);
  }
  return false;
}

static void test_stop_ends_attached_stream(void **state) {
  sc *c = sc_open(&srv), *c2 = sc_open(&srv);
  char p[600];
  snprintf(p, sizeof p, "%s/server.pid", work);
  unlink(p);
  sbx_wire_resp r;
  const char *id0 = start(c, "\"pidcat\"", NULL, &r);
  assert_non_null(id0);
  char id[64];
  snprintf(id, sizeof id, "%s", id0);
  pid_t pid = read_pid();
  assert_true(pid > 0);
  sc_sendf(c, "{\"v\":1,\"op\":\"lsp_request\",\"server_id\":\"%s\"}", id);
  expect_frame(c, SBX_RESP_READY);
  sc_sendf(c2, "{\"v\":1,\"op\":\"lsp_stop\",\"server_id\":\"%s\"}", id);
  expect_frame(c2, SBX_RESP_DONE);
  assert_true(kill(pid, 0) < 0 && errno == ESRCH); /* killed and reaped before done */
  expect_frame(c, SBX_RESP_DONE);
  sc_close(c);
  sc_close(c2);
}

static void test_lost_connection_kills(void **state) {
  sc *c = sc_open(&srv);
  char p[600];
  snprintf(p, sizeof p, "%s/server.pid", work);
  unlink(p);
  sbx_wire_resp r;
  const char *id = start(c, "\"pidcat\"", NULL, &r);
  assert_non_null(id);
  pid_t pid = read_pid();
  sc_sendf(c, "{\"v\":1,\"op\":\"lsp_request\",\"server_id\":\"%s\"}", id);
  expect_frame(c, SBX_RESP_READY);
  sc_close(c); /* end of stream: stdin closed, cat exits, the server is removed */
  assert_true(gone(pid));
}

static void test_unattached_reap(void **state) {
  silkd_srv s2;
  assert_int_equal(silkd_start_args(&s2, "--lsp-ttl", "1"), 0);
  sc *c = sc_open(&s2);
  char p[600];
  snprintf(p, sizeof p, "%s/server.pid", work);
  unlink(p);
  sbx_wire_resp r;
  const char *id0 = start(c, "\"pidcat\"", NULL, &r);
  assert_non_null(id0);
  char id[64];
  snprintf(id, sizeof id, "%s", id0);
  pid_t pid = read_pid();
  assert_true(pid > 0);
  /* nobody attaches: after the TTL the server is killed and forgotten */
  assert_true(gone(pid));
  sc_sendf(c, "{\"v\":1,\"op\":\"lsp_request\",\"server_id\":\"%s\"}", id);
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_NOT_FOUND);
  sc_result_free(&res);
  sc_close(c);
  assert_int_equal(silkd_stop(&s2), 0);
}

/* ---- a real server ---- */

static void lsp_send(sc *c, const char *json) {
  char *frame;
  int n = asprintf(&frame, "Content-Length: %zu\r\n\r\n%s", strlen(json), json);
  assert_true(n > 0);
  sc_send_bulk(c, SBX_BULK_REQ_DATA, frame, (size_t)n);
  free(frame);
}

/* Read LSP messages from the relay until the response with this id. */
static json_t *lsp_wait(sc *c, sbx_buf *in, int id) {
  for (;;) {
    char *hdr_end = in->ptr ? memmem(in->ptr, in->len, "\r\n\r\n", 4) : NULL;
    if (hdr_end) {
      char *cl = strcasestr(in->ptr, "Content-Length:");
      assert_non_null(cl);
      size_t len = strtoul(cl + 15, NULL, 10);
      size_t off = (size_t)(hdr_end + 4 - in->ptr);
      if (in->len >= off + len) {
        json_t *msg = json_loadb(in->ptr + off, len, 0, NULL);
        memmove(in->ptr, in->ptr + off + len, in->len - off - len);
        in->len -= off + len;
        in->ptr[in->len] = 0;
        assert_non_null(msg);
        json_t *jid = json_object_get(msg, "id");
        if (json_is_integer(jid) && json_integer_value(jid) == id && !json_object_get(msg, "method")) return msg;
        json_decref(msg);
        continue;
      }
    }
    sbx_wire_resp r;
    assert_int_equal(sc_recv(c, &r), 1);
    if (r.type != SBX_RESP_DATA) fprintf(stderr, "frame %s\n", sbx_wire_type_name(r.type));
    assert_int_equal(r.type, SBX_RESP_DATA);
    sbx_buf_add(in, r.u.data.data.ptr, r.u.data.data.len, NULL);
    sbx_buf_addc(in, 0, NULL);
    in->len--;
    sbx_wire_resp_free(&r);
  }
}

static void test_real_server_round_trip(void **state) {
  assert_int_equal(system("command -v clangd >/dev/null"), 0); /* scripts/setup installs it */
  put(work, "m.c", "int twice(int x) { return 2 * x; }\nint main(void) { return twice(21); }\n");
  sc *c = sc_open(&srv);
  sbx_wire_resp r;
  const char *id0 = start(c, "\"c\"", work, &r);
  if (!id0) fprintf(stderr, "lsp_start c: %s\n", r.u.error.message);
  assert_non_null(id0);
  char id[64], msg[2048], uri[600];
  snprintf(id, sizeof id, "%s", id0);
  snprintf(uri, sizeof uri, "file://%s/m.c", work);
  sc_sendf(c, "{\"v\":1,\"op\":\"lsp_request\",\"server_id\":\"%s\"}", id);
  expect_frame(c, SBX_RESP_READY);
  sbx_buf in = SBX_BUF_INIT(64 << 20);
  snprintf(msg, sizeof msg,
           "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"processId\":null,"
           "\"rootUri\":\"file://%s\",\"capabilities\":{}}}",
           work);
  lsp_send(c, msg);
  json_t *init = lsp_wait(c, &in, 1);
  assert_non_null(json_object_get(json_object_get(init, "result"), "capabilities"));
  json_decref(init);
  lsp_send(c, "{\"jsonrpc\":\"2.0\",\"method\":\"initialized\",\"params\":{}}");
  snprintf(msg, sizeof msg,
           "{\"jsonrpc\":\"2.0\",\"method\":\"textDocument/didOpen\",\"params\":{\"textDocument\":{\"uri\":\"%s\","
           "\"languageId\":\"c\",\"version\":1,\"text\":\"int twice(int x) { return 2 * x; }\\nint main(void) { "
           "return twice(21); }\\n\"}}}",
           uri);
  lsp_send(c, msg);
  /* hover over the call of twice in main (line 1, column 26) */
  snprintf(msg, sizeof msg,
           "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"textDocument/hover\",\"params\":{\"textDocument\":{\"uri\":"
           "\"%s\"},\"position\":{\"line\":1,\"character\":26}}}",
           uri);
  lsp_send(c, msg);
  json_t *hover = lsp_wait(c, &in, 2);
  char *text = json_dumps(json_object_get(hover, "result"), 0);
  assert_non_null(text);
  assert_non_null(strstr(text, "twice"));
  free(text);
  json_decref(hover);
  snprintf(msg, sizeof msg,
           "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"textDocument/definition\",\"params\":{\"textDocument\":"
           "{\"uri\":\"%s\"},\"position\":{\"line\":1,\"character\":26}}}",
           uri);
  lsp_send(c, msg);
  json_t *def = lsp_wait(c, &in, 3);
  json_t *loc = json_object_get(def, "result");
  if (json_is_array(loc)) loc = json_array_get(loc, 0);
  assert_string_equal(json_string_value(json_object_get(loc, "uri")), uri);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(json_object_get(loc, "range"), "start"), "line")), 0);
  json_decref(def);
  lsp_send(c, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"shutdown\"}");
  json_decref(lsp_wait(c, &in, 4));
  lsp_send(c, "{\"jsonrpc\":\"2.0\",\"method\":\"exit\"}");
  /* the server exits: its stdout ends, the RPC ends with done */
  for (;;) {
    assert_int_equal(sc_recv(c, &r), 1);
    sbx_wire_type t = r.type;
    sbx_wire_resp_free(&r);
    if (t == SBX_RESP_DONE) break;
    assert_int_equal(t, SBX_RESP_DATA);
  }
  sbx_buf_free(&in);
  sc_close(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_languages),          cmocka_unit_test(test_relay_single_shot),
      cmocka_unit_test(test_stop_ends_attached_stream), cmocka_unit_test(test_lost_connection_kills),
      cmocka_unit_test(test_unattached_reap),        cmocka_unit_test(test_real_server_round_trip),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
