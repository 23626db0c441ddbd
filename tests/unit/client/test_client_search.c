/* find, replace and watch through the C client (sbx_sandbox_*) and through
 * sbxctl (plain and --json output), against a real silkd on a unix:
 * address: results, a rejected pattern, errors naming the object, the
 * option-struct checks, a watch that follows a new subdirectory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>

#include <sandbox/client.h>

#include "client_test.h"
#include "sbxctl_run.h"

static silkd_proc silkd;
static char state_dir[128], tree[256];
static sbx_client *cl;
static sbx_sandbox *sb;

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define SBX "sb_00000000000000ab"

static void put(const char *rel, const char *content) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", tree, rel);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(content, f);
  fclose(f);
}

static int collect_match(void *ud, const sbx_resp_match *m) {
  char line[1024];
  snprintf(line, sizeof line, "%s:%llu:%s\n", m->file + strlen(tree), (unsigned long long)m->line, m->content);
  return sbx_buf_adds(ud, line, NULL);
}

static void test_client_find(void **state) {
  (void)state;
  sbx_buf got = SBX_BUF_INIT(1 << 20);
  sbx_find_opts o = SBX_FIND_OPTS_INIT(.path = tree, .pattern = "needle\\d", .glob = "*.c", .on_match = collect_match,
                                       .ud = &got);
  sbx_error err;
  assert_int_equal(sbx_sandbox_find(sb, &o, &err), 0);
  assert_string_equal(got.ptr, "/one.c:2:  needle1 here\n");
  sbx_buf_free(&got);
  /* a rejected pattern: SBX_E_REMOTE, bad_request, the compiler's words */
  o.pattern = "needle[";
  assert_int_equal(sbx_sandbox_find(sb, &o, &err), SBX_E_REMOTE);
  assert_int_equal(err.detail, SBX_ERR_BAD_REQUEST);
  assert_non_null(strstr(err.msg, "missing terminating ]"));
  /* a struct made without its macro is refused before any I/O */
  sbx_find_opts raw = {0};
  raw.path = tree;
  raw.pattern = "x";
  assert_int_equal(sbx_sandbox_find(sb, &raw, &err), SBX_E_INVAL);
  /* a callback's stop: the call succeeds, the connection is not reused */
  o.pattern = "needle";
  o.glob = NULL;
  o.on_match = NULL;
  assert_int_equal(sbx_sandbox_find(sb, &o, &err), 0);
}

static int collect_replaced(void *ud, const sbx_resp_replaced *r) {
  char line[1024];
  snprintf(line, sizeof line, "%s=%llu\n", r->file + strlen(tree), (unsigned long long)r->replacements);
  return sbx_buf_adds(ud, line, NULL);
}

static void test_client_replace(void **state) {
  (void)state;
  put("r.txt", "v1 v2 v3\n");
  char f[512];
  snprintf(f, sizeof f, "%s/r.txt", tree);
  const char *files[] = {f};
  sbx_buf got = SBX_BUF_INIT(1 << 20);
  sbx_replace_opts o = SBX_REPLACE_OPTS_INIT(.files = files, .nfiles = 1, .pattern = "v(\\d)", .replacement = "w${1}0",
                                             .on_replaced = collect_replaced, .ud = &got);
  sbx_error err;
  assert_int_equal(sbx_sandbox_replace(sb, &o, &err), 0);
  assert_string_equal(got.ptr, "/r.txt=3\n");
  sbx_buf_free(&got);
  sbx_buf content = SBX_BUF_INIT(1 << 20);
  assert_int_equal(sbx_sandbox_read_file(sb, f, &content, &err), 0);
  assert_string_equal(content.ptr, "w10 w20 w30\n");
  sbx_buf_free(&content);
}

struct watch_state {
  int ready;
  sbx_buf seen;
  const char *want;
};

static void w_on_ready(void *ud) { ((struct watch_state *)ud)->ready = 1; }

static int w_on_event(void *ud, const sbx_resp_event *ev) {
  struct watch_state *w = ud;
  sbx_buf_adds(&w->seen, ev->path, NULL);
  sbx_buf_addc(&w->seen, '\n', NULL);
  return strcmp(ev->path, w->want) == 0 ? 1 : 0; /* stop at the file in the new directory */
}

/* Makes the changes once the watch is armed, from another thread. */
static void *changer(void *arg) {
  struct watch_state *w = arg;
  while (!__atomic_load_n(&w->ready, __ATOMIC_SEQ_CST)) sleep_ms(5);
  char p[512];
  snprintf(p, sizeof p, "%s/wdir/sub", tree);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/wdir/sub/inner.txt", tree);
  FILE *f = fopen(p, "w");
  fputs("x", f);
  fclose(f);
  return NULL;
}

static void test_client_watch(void **state) {
  (void)state;
  char dir[512], want[600];
  snprintf(dir, sizeof dir, "%s/wdir", tree);
  mkdir(dir, 0755);
  snprintf(want, sizeof want, "%s/sub/inner.txt", dir);
  struct watch_state w = {.want = want};
  sbx_buf_init(&w.seen, 1 << 20);
  pthread_t t;
  pthread_create(&t, NULL, changer, &w);
  sbx_watch_opts o = SBX_WATCH_OPTS_INIT(.path = dir, .recursive = true, .on_ready = w_on_ready, .on_event = w_on_event,
                                         .ud = &w);
  sbx_error err;
  assert_int_equal(sbx_sandbox_watch(sb, &o, &err), 0);
  pthread_join(t, NULL);
  assert_non_null(strstr(w.seen.ptr, want));
  sbx_buf_free(&w.seen);
  /* a missing path: not_found before ready */
  snprintf(dir, sizeof dir, "%s/none", tree);
  o.path = dir;
  assert_int_equal(sbx_sandbox_watch(sb, &o, &err), SBX_E_REMOTE);
  assert_int_equal(err.detail, SBX_ERR_NOT_FOUND);
}

/* ---- sbxctl ---- */

static void test_sbxctl_find_replace(void **state) {
  (void)state;
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("find", SBX, "needle\\d", tree, "--glob", "*.c"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  char want[1024];
  snprintf(want, sizeof want, "%s/one.c:2:  needle1 here\n", tree);
  assert_string_equal(r.out.ptr, want);
  run_result_free(&r);
  /* --json: one object per line with file, line, content */
  assert_int_equal(run_sbxctl(ARGS("--json", "find", SBX, "needle\\d", tree, "--glob", "*.c"), NULL, &r, NULL, NULL),
                   0);
  assert_int_equal(r.status, 0);
  json_error_t je;
  json_t *o = json_loads(r.out.ptr, JSON_DISABLE_EOF_CHECK, &je);
  assert_non_null(o);
  snprintf(want, sizeof want, "%s/one.c", tree);
  assert_string_equal(json_string_value(json_object_get(o, "file")), want);
  assert_int_equal(json_integer_value(json_object_get(o, "line")), 2);
  assert_string_equal(json_string_value(json_object_get(o, "content")), "  needle1 here");
  json_decref(o);
  run_result_free(&r);
  /* errors name the object; a rejected pattern is the compiler's message */
  assert_int_equal(run_sbxctl(ARGS("find", SBX, "(", tree), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err.ptr, "find in " SBX ":"));
  assert_non_null(strstr(r.err.ptr, "missing closing parenthesis"));
  run_result_free(&r);
  /* replace, then --json */
  put("s.txt", "alpha beta alpha\n");
  char f[512];
  snprintf(f, sizeof f, "%s/s.txt", tree);
  assert_int_equal(run_sbxctl(ARGS("replace", SBX, "alpha", "gamma", f), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  snprintf(want, sizeof want, "%s: 2\n", f);
  assert_string_equal(r.out.ptr, want);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "replace", SBX, "gamma", "$$", f), NULL, &r, NULL, NULL), 0);
  o = json_loads(r.out.ptr, JSON_DISABLE_EOF_CHECK, &je);
  assert_non_null(o);
  assert_string_equal(json_string_value(json_object_get(o, "file")), f);
  assert_int_equal(json_integer_value(json_object_get(o, "replacements")), 2);
  json_decref(o);
  run_result_free(&r);
  FILE *fp = fopen(f, "r");
  char buf[64] = "";
  assert_non_null(fgets(buf, sizeof buf, fp));
  fclose(fp);
  assert_string_equal(buf, "$ beta $\n");
  snprintf(f, sizeof f, "%s/missing.txt", tree);
  assert_int_equal(run_sbxctl(ARGS("replace", SBX, "a", "b", f), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err.ptr, "missing.txt"));
  run_result_free(&r);
  /* usage errors */
  assert_int_equal(run_sbxctl(ARGS("find", SBX), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 2);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("replace", SBX, "a", "b"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 2);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("watch", SBX, tree, "--count", "0"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 2);
  run_result_free(&r);
}

/* sbxctl watch --json --count 1 prints the first event and exits; the
 * writer keeps touching a file until it does (the watch arms at its own
 * pace, and no test waits on time). */
static void *toucher(void *arg) {
  char p[512];
  snprintf(p, sizeof p, "%s/wj/sub", tree);
  for (int i = 0; i < 6000 && !__atomic_load_n((int *)arg, __ATOMIC_SEQ_CST); i++) {
    mkdir(p, 0755);
    rmdir(p);
    sleep_ms(20);
  }
  return NULL;
}

static void test_sbxctl_watch(void **state) {
  (void)state;
  char dir[512];
  snprintf(dir, sizeof dir, "%s/wj", tree);
  mkdir(dir, 0755);
  int stop = 0;
  pthread_t t;
  pthread_create(&t, NULL, toucher, &stop);
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("--json", "watch", SBX, dir, "--recursive", "--count", "1"), NULL, &r, NULL, NULL),
                   0);
  __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
  pthread_join(t, NULL);
  assert_int_equal(r.status, 0);
  json_error_t je;
  json_t *o = json_loads(r.out.ptr, 0, &je);
  assert_non_null(o);
  const char *kind = json_string_value(json_object_get(o, "kind"));
  assert_true(strcmp(kind, "created") == 0 || strcmp(kind, "deleted") == 0);
  char want[600];
  snprintf(want, sizeof want, "%s/sub", dir);
  assert_string_equal(json_string_value(json_object_get(o, "path")), want);
  json_decref(o);
  run_result_free(&r);
  /* a missing path names it */
  snprintf(dir, sizeof dir, "%s/none", tree);
  assert_int_equal(run_sbxctl(ARGS("watch", SBX, dir), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err.ptr, "none"));
  run_result_free(&r);
}

int main(void) {
  silkd_start(&silkd);
  snprintf(state_dir, sizeof state_dir, "%s/state", silkd.dir);
  snprintf(tree, sizeof tree, "%s/tree", silkd.dir);
  mkdir(tree, 0755);
  put("one.c", "int x;\n  needle1 here\n");
  put("two.h", "needle2\n");
  setenv("XDG_STATE_HOME", state_dir, 1);
  setenv("SANDBOXD_ADDR", silkd.addr, 1);
  setenv("SANDBOXD_TOKEN", "0123456789abcdef0123456789abcdef", 1);
  sbx_error err;
  sbx_client_opts co = SBX_CLIENT_OPTS_INIT(.addr = silkd.addr);
  if (sbx_client_new(&co, &cl, &err) < 0 ||
      sbx_client_attach(cl, "sb_0000000000000001", "0123456789abcdef0123456789abcdef", NULL, &sb, &err) < 0) {
    fprintf(stderr, "client: %s\n", err.msg);
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_client_find),         cmocka_unit_test(test_client_replace),
      cmocka_unit_test(test_client_watch),        cmocka_unit_test(test_sbxctl_find_replace),
      cmocka_unit_test(test_sbxctl_watch),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sbx_sandbox_free(sb);
  sbx_client_free(cl);
  silkd_cleanup(&silkd);
  return rc;
}
