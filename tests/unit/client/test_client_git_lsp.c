/* The git and LSP calls of the client API, and `sbxctl git` / `sbxctl lsp`,
 * against a real silkd on a Unix socket and the host's git. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include <sandbox/client.h>

#include "client_test.h"
#include "sbxctl_run.h"

static silkd_proc silkd;
static char repo[200], lspdir[200];

#define SBX "sb_00000000000000bb"
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

typedef struct {
  sbx_client *c;
  sbx_sandbox *s;
} fixture;

static int setup(void **state) {
  static fixture f;
  sbx_error err;
  sbx_client_opts o = SBX_CLIENT_OPTS_INIT(.addr = silkd.addr);
  if (sbx_client_new(&o, &f.c, &err) < 0) return -1;
  if (sbx_client_attach(f.c, SBX, "0123456789abcdef0123456789abcdef", NULL, &f.s, &err) < 0) return -1;
  *state = &f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  sbx_sandbox_free(f->s);
  sbx_client_free(f->c);
  return 0;
}

static int sh(const char *fmt, ...) {
  char *cmd;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&cmd, fmt, ap) < 0) return -1;
  va_end(ap);
  int st = system(cmd);
  free(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_git_calls(void **state) {
  fixture *f = *state;
  sbx_error err;
  assert_int_equal(sh("echo more >> %s/a.txt && echo n > %s/n.txt", repo, repo), 0);
  sbx_wire_resp r;
  assert_int_equal(sbx_sandbox_git_status(f->s, repo, &r, &err), 0);
  assert_string_equal(r.u.git_status_result.branch, "main");
  assert_int_equal(r.u.git_status_result.files_len, 2);
  sbx_wire_resp_free(&r);
  assert_int_equal(sbx_sandbox_git_add(f->s, repo, ARGS("a.txt", "n.txt"), &err), 0);
  char hash[80];
  assert_int_equal(sbx_sandbox_git_commit(f->s, repo, "second", "Ann <ann@x.org>", hash, sizeof hash, &err), 0);
  assert_int_equal(strlen(hash), 40);
  assert_int_equal(sbx_sandbox_git_branch(f->s, repo, SBX_GIT_BRANCH_CREATE, "topic", NULL, &err), 0);
  assert_int_equal(sbx_sandbox_git_branch(f->s, repo, SBX_GIT_BRANCH_LIST, NULL, &r, &err), 0);
  assert_string_equal(r.u.git_branches.current, "main");
  assert_int_equal(r.u.git_branches.branches.len, 2);
  sbx_wire_resp_free(&r);
  /* a refused name is a silkd bad_request; the handle stays usable */
  assert_int_equal(sbx_sandbox_git_branch(f->s, repo, SBX_GIT_BRANCH_DELETE, "-f", NULL, &err), SBX_E_REMOTE);
  assert_int_equal(err.detail, SBX_ERR_BAD_REQUEST);
  char clone[300];
  snprintf(clone, sizeof clone, "%s/clone", silkd.dir);
  sbx_git_clone_opts co = SBX_GIT_CLONE_OPTS_INIT(.url = repo, .path = clone, .depth = 1, .branch = "main");
  assert_int_equal(sbx_sandbox_git_clone(f->s, &co, &err), 0);
  assert_int_equal(sbx_sandbox_git_pull(f->s, clone, NULL, &err), 0);
  /* git outside a repository: kind internal with git's message */
  assert_int_equal(sbx_sandbox_git_status(f->s, silkd.dir, &r, &err), SBX_E_REMOTE);
  assert_int_equal(sbx_client_error_kind(&err), SBX_CLIENT_ERR_SILKD);
  assert_int_equal(err.detail, SBX_ERR_INTERNAL);
  assert_non_null(strstr(err.msg, "not a git repository"));
  /* an options struct made without its macro is refused */
  sbx_git_clone_opts bad = {0};
  assert_int_equal(sbx_sandbox_git_clone(f->s, &bad, &err), SBX_E_INVAL);
}

static int collect(void *ud, const void *p, size_t n) { return sbx_buf_add(ud, p, n, NULL); }

static void test_lsp_stream(void **state) {
  fixture *f = *state;
  sbx_error err;
  sbx_lsp *l;
  sbx_lsp_opts o = SBX_LSP_OPTS_INIT(.language = "cat", .root = "/");
  assert_int_equal(sbx_sandbox_lsp_open(f->s, &o, &l, &err), 0);
  assert_int_equal(strncmp(sbx_lsp_id(l), "lsp-", 4), 0);
  assert_int_equal(sbx_lsp_write(l, "Content-Length: 2\r\n\r\n{}", 23, &err), 0);
  assert_int_equal(sbx_lsp_close_input(l, &err), 0);
  sbx_buf got = SBX_BUF_INIT(1 << 20);
  int rc;
  while ((rc = sbx_lsp_read(l, collect, &got, 60000, &err)) == 0) {}
  assert_int_equal(rc, 1);
  assert_int_equal(got.len, 23);
  assert_memory_equal(got.ptr, "Content-Length: 2\r\n\r\n{}", 23);
  sbx_buf_free(&got);
  sbx_lsp_close(l);
  sbx_lsp_opts bad = SBX_LSP_OPTS_INIT(.language = "../../bin/sh");
  assert_int_equal(sbx_sandbox_lsp_open(f->s, &bad, &l, &err), SBX_E_REMOTE);
  assert_int_equal(err.detail, SBX_ERR_NOT_FOUND);
  assert_int_equal(sbx_sandbox_lsp_stop(f->s, "lsp-424242", &err), SBX_E_REMOTE);
  assert_int_equal(err.detail, SBX_ERR_NOT_FOUND);
}

static void test_sbxctl_git_lsp(void **state) {
  (void)state;
  const char *const *bad[] = {ARGS("git"), ARGS("git", SBX, "status"), ARGS("git", SBX, "bogus", "/r"),
                              ARGS("git", SBX, "commit", "/r"), ARGS("git", SBX, "clone", "/u"),
                              ARGS("git", SBX, "branch", "/r", "create"), ARGS("lsp", SBX),
                              ARGS("git", SBX, "clone", "/u", "/p", "--depth", "0"), NULL};
  for (int i = 0; bad[i]; i++) {
    run_result r;
    assert_int_equal(run_sbxctl(bad[i], NULL, &r, NULL, NULL), 0);
    if (r.status != 2) fail_msg("case %d: exit %d, want 2", i, r.status);
    run_result_free(&r);
  }
  assert_int_equal(sh("echo third >> %s/a.txt", repo), 0);
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("--json", "git", SBX, "status", repo), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  json_t *j = json_loads(r.out.ptr, 0, NULL);
  assert_non_null(j);
  assert_string_equal(json_string_value(json_object_get(j, "branch")), "main");
  json_t *f0 = json_array_get(json_object_get(j, "files"), 0);
  assert_string_equal(json_string_value(json_object_get(f0, "path")), "a.txt");
  assert_string_equal(json_string_value(json_object_get(f0, "unstaged")), "M");
  json_decref(j);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("git", SBX, "status", repo), NULL, &r, NULL, NULL), 0);
  assert_string_equal(r.out.ptr, "## main\n.M a.txt\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("git", SBX, "add", repo, "a.txt"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("git", SBX, "commit", repo, "-m", "third", "--author", "Bo <bo@x.org>"), NULL, &r,
                              NULL, NULL),
                   0);
  assert_int_equal(r.status, 0);
  assert_int_equal(r.out.len, 41); /* the hash and a newline */
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("git", SBX, "branch", repo), NULL, &r, NULL, NULL), 0);
  assert_non_null(strstr(r.out.ptr, "* main\n"));
  run_result_free(&r);
  /* a failure: exit 1, git's message on stderr */
  assert_int_equal(run_sbxctl(ARGS("git", SBX, "status", "/"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err.ptr, "not a git repository"));
  run_result_free(&r);
  /* lsp: stdin to the server, the server to stdout, byte for byte */
  assert_int_equal(run_sbxctl(ARGS("lsp", SBX, "cat"), "Content-Length: 2\r\n\r\n{}", &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out.ptr, "Content-Length: 2\r\n\r\n{}");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("lsp", SBX, "nosuch"), "", &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err.ptr, "no language server for \"nosuch\""));
  run_result_free(&r);
}

int main(void) {
  char tmpl[] = "/tmp/sbx-gitlsp-XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  snprintf(repo, sizeof repo, "%s/repo", tmpl);
  snprintf(lspdir, sizeof lspdir, "%s/lsp.d", tmpl);
  if (sh("mkdir %s && echo cat > %s/cat && git -c init.defaultBranch=main init -q %s && cd %s && echo a > a.txt && "
         "git add a.txt && git -c user.name=T -c user.email=t@x commit -qm init",
         lspdir, lspdir, repo, repo) != 0)
    return 1;
  setenv("SILKD_LSP_DIR", lspdir, 1);
  setenv("SILKD_NET", "egress", 1);
  silkd_start(&silkd);
  setenv("XDG_STATE_HOME", silkd.dir, 1);
  setenv("SANDBOXD_ADDR", silkd.addr, 1);
  setenv("SANDBOXD_TOKEN", "0123456789abcdef0123456789abcdef", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_git_calls, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lsp_stream, setup, teardown),
      cmocka_unit_test(test_sbxctl_git_lsp),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  silkd_cleanup(&silkd);
  sh("rm -rf %s", tmpl);
  return rc;
}
