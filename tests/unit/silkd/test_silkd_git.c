/* test_silkd_git.c - the git verbs (§5.11) against a real silkd and the
 * host's git: each verb on a repository the test makes, git outside a
 * repository, the §8.4 hardening (option injection through paths, refs
 * and URLs, ext:: and fd:: transports), the token kept out of argv and
 * off disk, the network rule and status truncation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "silkd_client.h"

static silkd_srv srv;
static char repo[400], marker[400];

static int sh(const char *fmt, ...) {
  char *cmd;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&cmd, fmt, ap) < 0) cmd = NULL;
  va_end(ap);
  int st = system(cmd);
  free(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *sh_out(const char *fmt, ...) {
  char *cmd;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&cmd, fmt, ap) < 0) cmd = NULL;
  va_end(ap);
  FILE *f = popen(cmd, "r");
  free(cmd);
  static char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  pclose(f);
  buf[n] = 0;
  while (n > 0 && buf[n - 1] == '\n') buf[--n] = 0;
  return buf;
}

#define GITC "git -c user.name=T -c user.email=t@x -c init.defaultBranch=main"

static int setup(void **state) {
  setenv("SILKD_NET", "egress", 1);
  if (silkd_start(&srv) < 0) return -1;
  snprintf(repo, sizeof repo, "%s/repo", srv.dir);
  snprintf(marker, sizeof marker, "%s/pwned", srv.dir);
  return sh(GITC " init -q %s && cd %s && echo one > a.txt && " GITC " add a.txt && " GITC " commit -qm init",
            repo, repo);
}
static int teardown(void **state) {
  int st = silkd_stop(&srv);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* One request; the whole reply frame decoded into *r (caller frees). */
static void rpc(sc *c, sbx_wire_resp *r, const char *fmt, ...) {
  char *line;
  va_list ap;
  va_start(ap, fmt);
  assert_true(vasprintf(&line, fmt, ap) > 0);
  va_end(ap);
  assert_int_equal(sc_sendf(c, "%s", line), 0);
  free(line);
  assert_int_equal(sc_recv(c, r), 1);
}

static void expect_error(sc *c, sbx_wire_error_kind kind, const char *prefix, const char *fmt, ...) {
  char *line;
  va_list ap;
  va_start(ap, fmt);
  assert_true(vasprintf(&line, fmt, ap) > 0);
  va_end(ap);
  sbx_wire_resp r;
  rpc(c, &r, "%s", line);
  if (r.type != SBX_RESP_ERROR) fprintf(stderr, "no error for %s\n", line);
  free(line);
  assert_int_equal(r.type, SBX_RESP_ERROR);
  assert_int_equal(r.u.error.kind, kind);
  if (strncmp(r.u.error.message, prefix, strlen(prefix)) != 0) fprintf(stderr, "message: %s\n", r.u.error.message);
  assert_int_equal(strncmp(r.u.error.message, prefix, strlen(prefix)), 0);
  sbx_wire_resp_free(&r);
}

static void expect_done(sc *c, const char *fmt, ...) {
  char *line;
  va_list ap;
  va_start(ap, fmt);
  assert_true(vasprintf(&line, fmt, ap) > 0);
  va_end(ap);
  sbx_wire_resp r;
  rpc(c, &r, "%s", line);
  if (r.type == SBX_RESP_ERROR) fprintf(stderr, "%s: %s\n", line, r.u.error.message);
  free(line);
  assert_int_equal(r.type, SBX_RESP_DONE);
  sbx_wire_resp_free(&r);
}

static const sbx_wire_git_file *find_file(const sbx_wire_resp *r, const char *path) {
  for (size_t i = 0; i < r->u.git_status_result.files_len; i++)
    if (strcmp(r->u.git_status_result.files[i].path, path) == 0) return &r->u.git_status_result.files[i];
  return NULL;
}

static void test_status_add_commit(void **state) {
  sc *c = sc_open(&srv);
  assert_int_equal(sh("cd %s && echo two >> a.txt && echo new > 'b c.txt' && mkdir -p d && echo x > d/x.txt && echo x > ü.txt", repo), 0);
  sbx_wire_resp r;
  rpc(c, &r, "{\"v\":1,\"op\":\"git_status\",\"path\":\"%s\"}", repo);
  assert_int_equal(r.type, SBX_RESP_GIT_STATUS_RESULT);
  assert_string_equal(r.u.git_status_result.branch, "main");
  assert_int_equal(r.u.git_status_result.ahead, 0);
  assert_false(r.u.git_status_result.truncated);
  const sbx_wire_git_file *f = find_file(&r, "a.txt");
  assert_non_null(f);
  assert_string_equal(f->staged, ".");
  assert_string_equal(f->unstaged, "M");
  f = find_file(&r, "b c.txt"); /* spaces kept: the path is the rest of the line */
  assert_non_null(f);
  assert_string_equal(f->staged, "?");
  assert_non_null(find_file(&r, "ü.txt")); /* core.quotePath=false: raw UTF-8 */
  sbx_wire_resp_free(&r);

  expect_done(c, "{\"v\":1,\"op\":\"git_add\",\"path\":\"%s\",\"files\":[\"a.txt\",\"b c.txt\",\"d\",\"ü.txt\"]}", repo);
  rpc(c, &r, "{\"v\":1,\"op\":\"git_status\",\"path\":\"%s\"}", repo);
  f = find_file(&r, "b c.txt");
  assert_non_null(f);
  assert_string_equal(f->staged, "A");
  assert_string_equal(f->unstaged, ".");
  sbx_wire_resp_free(&r);

  rpc(c, &r, "{\"v\":1,\"op\":\"git_commit\",\"path\":\"%s\",\"message\":\"-m second\\n\\nbody\",\"author\":\"Ann Lee <ann@example.org>\"}",
      repo);
  assert_int_equal(r.type, SBX_RESP_GIT_COMMIT_RESULT);
  assert_int_equal(strlen(r.u.git_commit_result.hash), 40);
  assert_string_equal(r.u.git_commit_result.hash, sh_out("git -C %s rev-parse HEAD", repo));
  sbx_wire_resp_free(&r);
  /* the message starting with '-' is the message (attached form), and the
   * committer comes from the author string */
  assert_string_equal(sh_out("git -C %s log -1 --format='%%s|%%an|%%ae|%%cn|%%ce'", repo),
                      "-m second|Ann Lee|ann@example.org|Ann Lee|ann@example.org");

  /* nothing to commit: git's stdout becomes the message */
  expect_error(c, SBX_ERR_INTERNAL, "git commit: ",
               "{\"v\":1,\"op\":\"git_commit\",\"path\":\"%s\",\"message\":\"x\",\"author\":\"A <a@b>\"}", repo);
  sc_close(c);
}

static void test_branch(void **state) {
  sc *c = sc_open(&srv);
  expect_done(c, "{\"v\":1,\"op\":\"git_branch\",\"path\":\"%s\",\"action\":\"create\",\"name\":\"feat\"}", repo);
  sbx_wire_resp r;
  rpc(c, &r, "{\"v\":1,\"op\":\"git_branch\",\"path\":\"%s\",\"action\":\"list\"}", repo);
  assert_int_equal(r.type, SBX_RESP_GIT_BRANCHES);
  assert_string_equal(r.u.git_branches.current, "main");
  assert_int_equal(r.u.git_branches.branches.len, 2);
  assert_string_equal(r.u.git_branches.branches.items[0], "feat");
  assert_string_equal(r.u.git_branches.branches.items[1], "main");
  sbx_wire_resp_free(&r);
  expect_done(c, "{\"v\":1,\"op\":\"git_branch\",\"path\":\"%s\",\"action\":\"checkout\",\"name\":\"feat\"}", repo);
  assert_string_equal(sh_out("git -C %s rev-parse --abbrev-ref HEAD", repo), "feat");
  expect_done(c, "{\"v\":1,\"op\":\"git_branch\",\"path\":\"%s\",\"action\":\"checkout\",\"name\":\"main\"}", repo);
  expect_done(c, "{\"v\":1,\"op\":\"git_branch\",\"path\":\"%s\",\"action\":\"delete\",\"name\":\"feat\"}", repo);
  assert_string_equal(sh_out("git -C %s branch --format='%%(refname:short)'", repo), "main");
  /* a checkout name that is a file is never a path to restore */
  assert_int_equal(sh("echo changed > %s/a.txt", repo), 0);
  expect_error(c, SBX_ERR_INTERNAL, "git branch: ",
               "{\"v\":1,\"op\":\"git_branch\",\"path\":\"%s\",\"action\":\"checkout\",\"name\":\"a.txt\"}", repo);
  assert_string_equal(sh_out("cat %s/a.txt", repo), "changed");
  assert_int_equal(sh("git -C %s checkout -q -- a.txt", repo), 0);
  expect_error(c, SBX_ERR_BAD_REQUEST, "branch op needs a name",
               "{\"v\":1,\"op\":\"git_branch\",\"path\":\"%s\",\"action\":\"delete\"}", repo);
  sc_close(c);
}

static void test_clone_push_pull(void **state) {
  sc *c = sc_open(&srv);
  char bare[500], work[500], other[500];
  snprintf(bare, sizeof bare, "%s/bare.git", srv.dir);
  snprintf(work, sizeof work, "%s/work", srv.dir);
  snprintf(other, sizeof other, "%s/other", srv.dir);
  assert_int_equal(sh("git clone -q --bare %s %s", repo, bare), 0);
  expect_done(c, "{\"v\":1,\"op\":\"git_clone\",\"url\":\"%s\",\"path\":\"%s\",\"branch\":\"main\",\"auth\":\"tok-on-disk-never\"}",
              bare, work);
  expect_done(c, "{\"v\":1,\"op\":\"git_clone\",\"url\":\"file://%s\",\"path\":\"%s\",\"depth\":1}", bare, other);
  assert_string_equal(sh_out("git -C %s rev-list --count HEAD", other), "1");
  assert_int_equal(sh("cd %s && echo pushed > p.txt && " GITC " add p.txt && " GITC " commit -qm p", work), 0);
  expect_done(c, "{\"v\":1,\"op\":\"git_push\",\"path\":\"%s\",\"auth\":\"tok-on-disk-never\"}", work);
  assert_string_equal(sh_out("git -C %s log -1 --format=%%s main", bare), "p");
  expect_done(c, "{\"v\":1,\"op\":\"git_pull\",\"path\":\"%s\"}", other);
  assert_string_equal(sh_out("cat %s/p.txt", other), "pushed");
  /* the token went nowhere on disk */
  assert_int_equal(sh("grep -rqs tok-on-disk-never %s/.git %s", work, bare), 1);
  /* a clone onto an existing directory: git's failure, as internal */
  expect_error(c, SBX_ERR_INTERNAL, "git clone: ", "{\"v\":1,\"op\":\"git_clone\",\"url\":\"%s\",\"path\":\"%s\"}", bare,
               work);
  sc_close(c);
}

static void test_not_a_repository(void **state) {
  sc *c = sc_open(&srv);
  char plain[500];
  snprintf(plain, sizeof plain, "%s/plain", srv.dir);
  mkdir(plain, 0755);
  expect_error(c, SBX_ERR_INTERNAL, "git status: fatal: not a git repository",
               "{\"v\":1,\"op\":\"git_status\",\"path\":\"%s\"}", plain);
  expect_error(c, SBX_ERR_INTERNAL, "git add: fatal: not a git repository",
               "{\"v\":1,\"op\":\"git_add\",\"path\":\"%s\",\"files\":[\"x\"]}", plain);
  expect_error(c, SBX_ERR_INTERNAL, "git branch: fatal: not a git repository",
               "{\"v\":1,\"op\":\"git_branch\",\"path\":\"%s\",\"action\":\"list\"}", plain);
  /* the connection stays usable */
  sbx_wire_resp r;
  rpc(c, &r, "{\"v\":1,\"op\":\"info\"}");
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
  sc_close(c);
}

static void test_injection_refused(void **state) {
  sc *c = sc_open(&srv);
  const char *inj = "--upload-pack=touch ";
  /* a path, a URL and a clone target that look like options */
  expect_error(c, SBX_ERR_INTERNAL, "git status: ", "{\"v\":1,\"op\":\"git_status\",\"path\":\"%s%s\"}", inj, marker);
  expect_error(c, SBX_ERR_INTERNAL, "git clone: ", "{\"v\":1,\"op\":\"git_clone\",\"url\":\"%s%s\",\"path\":\"%s/c1\"}",
               inj, marker, srv.dir);
  /* a clone target after --: a directory of that name (in silkd's working
   * directory, the test's), not an option */
  expect_done(c, "{\"v\":1,\"op\":\"git_clone\",\"url\":\"%s\",\"path\":\"%spwned-clone\"}", repo, inj);
  assert_int_equal(sh("test -f './%spwned-clone/a.txt' && rm -rf './%spwned-clone'", inj, inj), 0);
  expect_error(c, SBX_ERR_INTERNAL, "git add: ", "{\"v\":1,\"op\":\"git_add\",\"path\":\"%s\",\"files\":[\"%s%s\"]}",
               repo, inj, marker);
  /* refs that look like options */
  const char *actions[] = {"list", "create", "delete", "checkout"};
  for (int i = 0; i < 4; i++)
    expect_error(c, SBX_ERR_BAD_REQUEST, "invalid argument: name may not start with '-'",
                 "{\"v\":1,\"op\":\"git_branch\",\"path\":\"%s\",\"action\":\"%s\",\"name\":\"-d\"}", repo, actions[i]);
  expect_error(c, SBX_ERR_BAD_REQUEST, "invalid argument: branch may not start with '-'",
               "{\"v\":1,\"op\":\"git_clone\",\"url\":\"%s\",\"path\":\"%s/c2\",\"branch\":\"--upload-pack=touch %s\"}",
               repo, srv.dir, marker);
  /* transports that run programs */
  expect_error(c, SBX_ERR_BAD_REQUEST, "invalid argument: url transport ext is refused",
               "{\"v\":1,\"op\":\"git_clone\",\"url\":\"ext::sh -c touch%% %s\",\"path\":\"%s/c3\"}", marker, srv.dir);
  expect_error(c, SBX_ERR_BAD_REQUEST, "invalid argument: url transport fd is refused",
               "{\"v\":1,\"op\":\"git_clone\",\"url\":\"fd::0\",\"path\":\"%s/c4\"}", srv.dir);
  /* ... also when a repository's own remote names one (and the
   * repository's config allows it) */
  char evil[500];
  snprintf(evil, sizeof evil, "%s/evil", srv.dir);
  assert_int_equal(sh("git clone -q %s %s && git -C %s config protocol.allow always && "
                      "git -C %s config protocol.ext.allow always && git -C %s remote set-url origin 'ext::sh -c touch%% %s'",
                      repo, evil, evil, evil, evil, marker),
                   0);
  expect_error(c, SBX_ERR_INTERNAL, "git pull: ", "{\"v\":1,\"op\":\"git_pull\",\"path\":\"%s\"}", evil);
  expect_error(c, SBX_ERR_INTERNAL, "git push: ", "{\"v\":1,\"op\":\"git_push\",\"path\":\"%s\"}", evil);
  struct stat st;
  assert_int_equal(stat(marker, &st), -1); /* nothing was executed */
  sc_close(c);
}

/* Scan every process's argv for needle; true if found. */
static bool in_any_cmdline(const char *needle) {
  DIR *d = opendir("/proc");
  struct dirent *de;
  bool found = false;
  while (!found && (de = readdir(d))) {
    if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
    char p[300], buf[65536];
    snprintf(p, sizeof p, "/proc/%s/cmdline", de->d_name);
    int fd = open(p, O_RDONLY);
    if (fd < 0) continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    for (ssize_t i = 0; i < n; i++)
      if (buf[i] == 0) buf[i] = ' ';
    if (n > 0) {
      buf[n] = 0;
      found = strstr(buf, needle) != NULL;
    }
  }
  closedir(d);
  return found;
}

/* The pid of the process whose argv contains needle, or 0. */
static pid_t pid_with_cmdline(const char *needle) {
  DIR *d = opendir("/proc");
  struct dirent *de;
  pid_t pid = 0;
  while (!pid && (de = readdir(d))) {
    if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
    char p[300], buf[65536];
    snprintf(p, sizeof p, "/proc/%s/cmdline", de->d_name);
    int fd = open(p, O_RDONLY);
    if (fd < 0) continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    for (ssize_t i = 0; i < n; i++)
      if (buf[i] == 0) buf[i] = ' ';
    if (n > 0) {
      buf[n] = 0;
      if (strstr(buf, needle) && strncmp(buf, "git ", 4) == 0) pid = atoi(de->d_name);
    }
  }
  closedir(d);
  return pid;
}

static void test_token_only_in_env(void **state) {
  /* An HTTP "server" on loopback that reads the request and holds it:
   * meanwhile the git child is inspected. */
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t sl = sizeof sa;
  getsockname(ls, (struct sockaddr *)&sa, &sl);
  assert_int_equal(listen(ls, 8), 0);
  const char *token = "sekrit-7f3a9c";
  sc *c = sc_open(&srv);
  assert_int_equal(sc_sendf(c, "{\"v\":1,\"op\":\"git_clone\",\"url\":\"http://127.0.0.1:%u/r.git\",\"path\":\"%s/tc\",\"auth\":\"%s\"}",
                            ntohs(sa.sin_port), srv.dir, token),
                   0);
  struct pollfd pfd = {ls, POLLIN, 0};
  assert_int_equal(poll(&pfd, 1, SC_HANG_MS), 1);
  int a = accept(ls, NULL, NULL);
  char req[8192];
  size_t got = 0;
  while (got < sizeof req - 1 && !memmem(req, got, "\r\n\r\n", 4)) {
    ssize_t n = read(a, req + got, sizeof req - 1 - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  req[got] = 0;
  /* the token reached the server as the header ... */
  char want[200];
  snprintf(want, sizeof want, "Authorization: Bearer %s", token);
  assert_non_null(strstr(req, want));
  /* ... while no argv on the machine carries it, and the git child has
   * it in its environment */
  char url[100];
  snprintf(url, sizeof url, "127.0.0.1:%u/r.git", ntohs(sa.sin_port));
  pid_t gp = pid_with_cmdline(url);
  assert_true(gp > 0);
  assert_false(in_any_cmdline(token));
  char p[100], env[65536];
  snprintf(p, sizeof p, "/proc/%d/environ", (int)gp);
  int fd = open(p, O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, env, sizeof env - 1) : -1;
  if (fd >= 0) close(fd);
  assert_true(n > 0);
  bool in_env = false;
  for (ssize_t i = 0; i < n; i += (ssize_t)strlen(env + i) + 1)
    if (strstr(env + i, want) && strncmp(env + i, "GIT_CONFIG_VALUE_1=", 19) == 0) in_env = true;
  assert_true(in_env);
  /* fail the fetch: git's error comes back, without the token */
  const char *resp = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  assert_int_equal(write(a, resp, strlen(resp)), (ssize_t)strlen(resp));
  close(a);
  close(ls);
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_ERROR);
  assert_int_equal(r.u.error.kind, SBX_ERR_INTERNAL);
  assert_null(strstr(r.u.error.message, token));
  sbx_wire_resp_free(&r);
  sc_close(c);
}

static void test_no_network(void **state) {
  silkd_srv off;
  setenv("SILKD_NET", "none", 1);
  assert_int_equal(silkd_start(&off), 0);
  setenv("SILKD_NET", "egress", 1);
  sc *c = sc_open(&off);
  const char *msg = "no network on this sandbox; use fs.push to move a repository in";
  expect_error(c, SBX_ERR_UNIMPLEMENTED, msg, "{\"v\":1,\"op\":\"git_clone\",\"url\":\"%s\",\"path\":\"%s/n\"}", repo,
               off.dir);
  expect_error(c, SBX_ERR_UNIMPLEMENTED, msg, "{\"v\":1,\"op\":\"git_push\",\"path\":\"%s\"}", repo);
  expect_error(c, SBX_ERR_UNIMPLEMENTED, msg, "{\"v\":1,\"op\":\"git_pull\",\"path\":\"%s\"}", repo);
  /* local verbs still work */
  sbx_wire_resp r;
  rpc(c, &r, "{\"v\":1,\"op\":\"git_status\",\"path\":\"%s\"}", repo);
  assert_int_equal(r.type, SBX_RESP_GIT_STATUS_RESULT);
  sbx_wire_resp_free(&r);
  sc_close(c);
  assert_int_equal(silkd_stop(&off), 0);
}

static void test_status_truncated(void **state) {
  char big[500];
  snprintf(big, sizeof big, "%s/big", srv.dir);
  /* 12,000 untracked files of 62-byte paths: 12,000 x 102 > 1 MiB */
  assert_int_equal(sh("git init -q %s && cd %s && seq -w 1 12000 | sed 's/^/f-%054d-/' | xargs touch", big, big, 0), 0);
  sc *c = sc_open(&srv);
  sbx_wire_resp r;
  rpc(c, &r, "{\"v\":1,\"op\":\"git_status\",\"path\":\"%s\"}", big);
  assert_int_equal(r.type, SBX_RESP_GIT_STATUS_RESULT);
  assert_true(r.u.git_status_result.truncated);
  size_t plen = strlen(r.u.git_status_result.files[0].path);
  /* as many entries as fit the budget, not one more */
  assert_int_equal(r.u.git_status_result.files_len, 1048576 / (plen + 40));
  sbx_wire_resp_free(&r);
  sc_close(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_add_commit), cmocka_unit_test(test_branch),
      cmocka_unit_test(test_clone_push_pull),   cmocka_unit_test(test_not_a_repository),
      cmocka_unit_test(test_injection_refused), cmocka_unit_test(test_token_only_in_env),
      cmocka_unit_test(test_no_network),        cmocka_unit_test(test_status_truncated),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
