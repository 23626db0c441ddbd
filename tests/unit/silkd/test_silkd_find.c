/* test_silkd_find.c - fs_find, fs_replace (§5.7) and fs_watch (§5.8)
 * against a real silkd: results, the bad inputs (rejected and catastrophic
 * patterns, symlinks out of the tree, a replace failing midway) and the
 * watch's recursion, overflow and end with its connection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>

#include "silkd_client.h"

static silkd_srv srv;
static char root[400], out[400]; /* the tree searched, and a place outside it */

static void put(const char *fmt, const char *content) {
  char p[800];
  snprintf(p, sizeof p, fmt, root);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(content, f);
  fclose(f);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  sbx_buf b = SBX_BUF_INIT(1u << 26);
  char tmp[65536];
  size_t n;
  while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) sbx_buf_add(&b, tmp, n, NULL);
  fclose(f);
  return b.ptr ? sbx_buf_steal(&b, NULL) : sbx_strdup("");
}

static int setup(void **state) {
  if (silkd_start(&srv) < 0) return -1;
  snprintf(root, sizeof root, "%s/tree", srv.dir);
  snprintf(out, sizeof out, "%s/outside", srv.dir);
  return mkdir(root, 0755) || mkdir(out, 0755);
}
static int teardown(void **state) {
  int st = silkd_stop(&srv);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* All frames of an RPC up to its final one, as "file:line:content" lines
 * (sorted, since the order of matches is unspecified) or "replaced
 * file count" lines; the final frame in res. */
static char *collect(sc *c, sc_result *res) {
  memset(res, 0, sizeof *res);
  res->final = SBX_RESP__COUNT;
  char *lines[4096];
  size_t n = 0;
  for (;;) {
    sbx_wire_resp r;
    if (sc_recv(c, &r) != 1) break;
    char *l = NULL;
    if (r.type == SBX_RESP_MATCH) {
      assert_true(asprintf(&l, "%s:%llu:%s", r.u.match.file + strlen(root), (unsigned long long)r.u.match.line,
                           r.u.match.content) > 0);
    } else if (r.type == SBX_RESP_REPLACED) {
      assert_true(asprintf(&l, "%s=%llu", r.u.replaced.file + strlen(root),
                           (unsigned long long)r.u.replaced.replacements) > 0);
    } else {
      res->final = r.type;
      if (r.type == SBX_RESP_ERROR) {
        res->kind = r.u.error.kind;
        snprintf(res->msg, sizeof res->msg, "%s", r.u.error.message);
      }
      sbx_wire_resp_free(&r);
      break;
    }
    sbx_wire_resp_free(&r);
    if (n < 4096) lines[n++] = l;
    else free(l);
  }
  for (size_t i = 1; i < n; i++) /* insertion sort; few lines */
    for (size_t k = i; k > 0 && strcmp(lines[k - 1], lines[k]) > 0; k--) {
      char *t = lines[k];
      lines[k] = lines[k - 1];
      lines[k - 1] = t;
    }
  sbx_buf b = SBX_BUF_INIT(1u << 24);
  sbx_buf_adds(&b, "", NULL);
  for (size_t i = 0; i < n; i++) {
    sbx_buf_adds(&b, lines[i], NULL);
    sbx_buf_addc(&b, '\n', NULL);
    free(lines[i]);
  }
  return sbx_buf_steal(&b, NULL);
}

static char *find(const char *pattern, const char *glob, sc_result *res) {
  sc *c = sc_open(&srv);
  assert_non_null(c);
  char *pj = sc_json_str(pattern), *rj = sc_json_str(root);
  if (glob) sc_sendf(c, "{\"v\":1,\"op\":\"fs_find\",\"path\":%s,\"pattern\":%s,\"glob\":\"%s\"}", rj, pj, glob);
  else sc_sendf(c, "{\"v\":1,\"op\":\"fs_find\",\"path\":%s,\"pattern\":%s}", rj, pj);
  free(pj);
  free(rj);
  char *s = collect(c, res);
  sc_close(c);
  return s;
}

static void make_tree(void) {
  char p[800];
  snprintf(p, sizeof p, "%s/sub", root);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/.git", root);
  mkdir(p, 0755);
  put("%s/a.txt", "hello world\n  TODO: fix\r\nbye TODO");
  put("%s/sub/b.rs", "fn main() {} // TODO\nlet x = 1;\n");
  put("%s/.git/config", "TODO in git\n");
  put("%s/bin.dat", "\xff\xfe TODO binary\n");
  put("%s/uni.txt", "naïve TODO ünïcode\n");
  char t[800];
  snprintf(p, sizeof p, "%s/secret.txt", out);
  FILE *f = fopen(p, "w");
  fputs("TODO outside\n", f);
  fclose(f);
  snprintf(p, sizeof p, "%s/linkdir", root);
  symlink(out, p);
  snprintf(p, sizeof p, "%s/linkfile.txt", root);
  snprintf(t, sizeof t, "%s/secret.txt", out);
  symlink(t, p);
  /* 8 MiB + 1: skipped */
  snprintf(p, sizeof p, "%s/big.txt", root);
  f = fopen(p, "w");
  for (int i = 0; i < 8 * 1024; i++) {
    char line[1024];
    memset(line, 'x', sizeof line);
    if (i == 0) memcpy(line, "TODO", 4);
    line[1023] = '\n';
    fwrite(line, 1, sizeof line, f);
  }
  fputc('\n', f);
  fclose(f);
}

static void test_find_matches(void **state) {
  make_tree();
  sc_result res;
  char *got = find("TODO", NULL, &res);
  assert_int_equal(res.final, SBX_RESP_DONE);
  /* Not the binary file, not the big one, nothing through either symlink;
   * .git is searched; CRLF stripped; the last line without LF counts. */
  assert_string_equal(got, "/.git/config:1:TODO in git\n"
                           "/a.txt:2:  TODO: fix\n"
                           "/a.txt:3:bye TODO\n"
                           "/sub/b.rs:1:fn main() {} // TODO\n"
                           "/uni.txt:1:naïve TODO ünïcode\n");
  free(got);
  got = find("TODO", "*.rs", &res);
  assert_string_equal(got, "/sub/b.rs:1:fn main() {} // TODO\n");
  free(got);
  got = find("fix$", "?.txt", &res); /* $ before a CRLF */
  assert_string_equal(got, "/a.txt:2:  TODO: fix\n");
  free(got);
  got = find("(?i)^\\s+todo", NULL, &res);
  assert_string_equal(got, "/a.txt:2:  TODO: fix\n");
  free(got);
  got = find("\\w+ve\\b", "uni*", &res); /* UCP: ï is a word character */
  assert_string_equal(got, "/uni.txt:1:naïve TODO ünïcode\n");
  free(got);
  got = find("^let", NULL, &res);
  assert_string_equal(got, "/sub/b.rs:2:let x = 1;\n");
  free(got);
  got = find("(?<!fn )main", NULL, &res); /* look-around: line by line */
  assert_string_equal(got, "");
  assert_int_equal(res.final, SBX_RESP_DONE);
  free(got);
  /* from the parent: few entries, so the work is shared out a level or two
   * deeper; still every file once, nothing through the symlinks */
  char saved[sizeof root];
  memcpy(saved, root, sizeof root);
  snprintf(root, sizeof root, "%s", srv.dir);
  got = find("TODO", NULL, &res);
  memcpy(root, saved, sizeof root);
  assert_int_equal(res.final, SBX_RESP_DONE);
  assert_string_equal(got, "/outside/secret.txt:1:TODO outside\n"
                           "/tree/.git/config:1:TODO in git\n"
                           "/tree/a.txt:2:  TODO: fix\n"
                           "/tree/a.txt:3:bye TODO\n"
                           "/tree/sub/b.rs:1:fn main() {} // TODO\n"
                           "/tree/uni.txt:1:naïve TODO ünïcode\n");
  free(got);
}

static void test_find_errors(void **state) {
  sc_result res;
  char *got = find("(unclosed", NULL, &res);
  assert_int_equal(res.final, SBX_RESP_ERROR);
  assert_int_equal(res.kind, SBX_ERR_BAD_REQUEST);
  assert_non_null(strstr(res.msg, "missing closing parenthesis"));
  free(got);
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_find\",\"path\":\"%s/nope\",\"pattern\":\"x\"}", root);
  free(collect(c, &res));
  assert_int_equal(res.kind, SBX_ERR_NOT_FOUND);
  assert_non_null(strstr(res.msg, "read_dir"));
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_find\",\"path\":\"%s/a.txt\",\"pattern\":\"x\"}", root);
  free(collect(c, &res));
  assert_int_equal(res.kind, SBX_ERR_INTERNAL);
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}"); /* still usable */
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
  sc_close(c);
}

/* (a+)+$ on a long line of a's ending in b: the match limit, a clear
 * error, and silkd answers other connections meanwhile and after. */
static void test_find_catastrophic(void **state) {
  char p[800];
  snprintf(p, sizeof p, "%s/cat", root);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/cat/long.txt", root);
  FILE *f = fopen(p, "w");
  for (int i = 0; i < 20000; i++) fputc('a', f);
  fputs("b\n", f);
  fclose(f);
  sc *c = sc_open(&srv), *o = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_find\",\"path\":\"%s/cat\",\"pattern\":\"(a+)+$\"}", root);
  sc_sendf(o, "{\"v\":1,\"op\":\"info\"}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(o, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
  sc_result res;
  free(collect(c, &res));
  assert_int_equal(res.final, SBX_RESP_ERROR);
  assert_int_equal(res.kind, SBX_ERR_BAD_REQUEST);
  assert_non_null(strstr(res.msg, "pattern too expensive"));
  assert_non_null(strstr(res.msg, "long.txt:1"));
  /* the same through fs_replace: the file stays as it was */
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_replace\",\"files\":[\"%s\"],\"pattern\":\"(a+)+$\",\"replacement\":\"\"}", p);
  free(collect(c, &res));
  assert_int_equal(res.kind, SBX_ERR_BAD_REQUEST);
  assert_non_null(strstr(res.msg, "pattern too expensive"));
  char *s = slurp(p);
  assert_int_equal(strlen(s), 20002);
  free(s);
  sc_close(c);
  sc_close(o);
}

/* Input during a find stops it with no final frame (§2.6d); the request
 * that stopped it is served next. */
static void test_find_cancel(void **state) {
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_find\",\"path\":\"%s\",\"pattern\":\"x\"}\n{\"v\":1,\"op\":\"info\"}", root);
  for (;;) {
    sbx_wire_resp r;
    assert_int_equal(sc_recv(c, &r), 1);
    sbx_wire_type t = r.type;
    sbx_wire_resp_free(&r);
    if (t == SBX_RESP_INFO) break;
    assert_true(t == SBX_RESP_MATCH || t == SBX_RESP_DONE);
  }
  sc_close(c);
}

static sc *replace(const char *files_json, const char *pattern, const char *tpl, char **got, sc_result *res) {
  sc *c = sc_open(&srv);
  char *pj = sc_json_str(pattern), *tj = sc_json_str(tpl);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_replace\",\"files\":[%s],\"pattern\":%s,\"replacement\":%s}", files_json, pj, tj);
  free(pj);
  free(tj);
  *got = collect(c, res);
  return c;
}

static int count_tmp(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strstr(de->d_name, ".silkd-")) n++;
  closedir(d);
  return n;
}

static void test_replace(void **state) {
  char p[800], q[800], r2[800], files[3000];
  snprintf(p, sizeof p, "%s/r1.txt", root);
  snprintf(q, sizeof q, "%s/r2.txt", root);
  snprintf(r2, sizeof r2, "%s/r3.txt", root);
  put("%s/r1.txt", "key=alpha\nkey=beta\n");
  put("%s/r2.txt", "nothing here\n");
  put("%s/r3.txt", "a.b.c");
  assert_int_equal(chmod(p, 0640), 0);
  assert_int_equal(chown(p, 1234, 5678), 0);
  struct stat before2;
  stat(q, &before2);
  snprintf(files, sizeof files, "\"%s\",\"%s\",\"%s\"", p, q, r2);
  sc_result res;
  char *got;
  sc *c = replace(files, "(?m)^(?<k>\\w+)=(\\w+)$", "$2:${k} $$ ${1}x $1x $", &got, &res);
  assert_int_equal(res.final, SBX_RESP_DONE);
  assert_string_equal(got, "/r1.txt=2\n/r2.txt=0\n/r3.txt=0\n");
  free(got);
  char *s = slurp(p);
  assert_string_equal(s, "alpha:key $ keyx  $\nbeta:key $ keyx  $\n");
  free(s);
  struct stat st, after2;
  stat(p, &st);
  assert_int_equal(st.st_mode & 07777, 0640);
  assert_int_equal(st.st_uid, 1234);
  assert_int_equal(st.st_gid, 5678);
  stat(q, &after2); /* no match: not rewritten */
  assert_int_equal(before2.st_ino, after2.st_ino);
  /* empty matches: one at each position, none right after a match */
  snprintf(files, sizeof files, "\"%s\"", r2);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_replace\",\"files\":[%s],\"pattern\":\"b*\",\"replacement\":\"-\"}", files);
  got = collect(c, &res);
  s = slurp(r2);
  assert_string_equal(s, "-a-.-.-c-");
  free(s);
  free(got);
  assert_int_equal(count_tmp(root), 0);
  sc_close(c);
}

static void test_replace_bad_input(void **state) {
  char a[800], b[800], cc[800], link[800], sec[800], files[4000];
  snprintf(a, sizeof a, "%s/m1.txt", root);
  snprintf(b, sizeof b, "%s/m2.txt", root);
  snprintf(cc, sizeof cc, "%s/m3.txt", root);
  put("%s/m1.txt", "old one\n");
  put("%s/m2.txt", "old \xff two\n"); /* not UTF-8: the replace fails here */
  put("%s/m3.txt", "old three\n");
  snprintf(files, sizeof files, "\"%s\",\"%s\",\"%s\"", a, b, cc);
  sc_result res;
  char *got;
  /* a rejected pattern: nothing touched */
  sc *c = replace(files, "old(", "new", &got, &res);
  assert_int_equal(res.kind, SBX_ERR_BAD_REQUEST);
  assert_non_null(strstr(res.msg, "invalid pattern"));
  free(got);
  char *s = slurp(a);
  assert_string_equal(s, "old one\n");
  free(s);
  /* failing midway: each file old or new, no temp file left */
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_replace\",\"files\":[%s],\"pattern\":\"old\",\"replacement\":\"new\"}", files);
  got = collect(c, &res);
  assert_string_equal(got, "/m1.txt=1\n");
  assert_int_equal(res.final, SBX_RESP_ERROR);
  assert_int_equal(res.kind, SBX_ERR_INTERNAL);
  assert_non_null(strstr(res.msg, "m2.txt"));
  free(got);
  s = slurp(a);
  assert_string_equal(s, "new one\n");
  free(s);
  s = slurp(b);
  assert_string_equal(s, "old \xff two\n");
  free(s);
  s = slurp(cc);
  assert_string_equal(s, "old three\n");
  free(s);
  assert_int_equal(count_tmp(root), 0);
  /* a missing file: not_found */
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_replace\",\"files\":[\"%s/none\"],\"pattern\":\"x\",\"replacement\":\"y\"}", root);
  free(collect(c, &res));
  assert_int_equal(res.kind, SBX_ERR_NOT_FOUND);
  /* a symlink out of the tree: refused before any file is touched */
  snprintf(sec, sizeof sec, "%s/secret2.txt", out);
  FILE *f = fopen(sec, "w");
  fputs("old secret\n", f);
  fclose(f);
  snprintf(link, sizeof link, "%s/m4.txt", root);
  symlink(sec, link);
  snprintf(files, sizeof files, "\"%s\",\"%s\"", cc, link);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_replace\",\"files\":[%s],\"pattern\":\"old\",\"replacement\":\"new\"}", files);
  got = collect(c, &res);
  assert_string_equal(got, "");
  assert_int_equal(res.kind, SBX_ERR_BAD_REQUEST);
  assert_non_null(strstr(res.msg, "symbolic link"));
  free(got);
  s = slurp(cc);
  assert_string_equal(s, "old three\n");
  free(s);
  s = slurp(sec);
  assert_string_equal(s, "old secret\n");
  free(s);
  struct stat st;
  assert_int_equal(lstat(link, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  sc_close(c);
}

/* ---- fs_watch ---- */

static void expect_event(sc *c, sbx_wire_event_kind kind, const char *path) {
  for (;;) {
    sbx_wire_resp r;
    assert_int_equal(sc_recv(c, &r), 1);
    assert_int_equal(r.type, SBX_RESP_EVENT);
    bool hit = r.u.event.kind == kind && !strcmp(r.u.event.path, path);
    if (!hit && strncmp(r.u.event.path, root, strlen(root)) != 0)
      fail_msg("event outside the tree: %s", r.u.event.path);
    sbx_wire_resp_free(&r);
    if (hit) return;
  }
}

static sc *watch(const char *path, bool recursive) {
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_watch\",\"path\":\"%s\",\"recursive\":%s}", path, recursive ? "true" : "false");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_READY);
  sbx_wire_resp_free(&r);
  return c;
}

static int inotify_fds(void) {
  char d[64], p[400], t[256];
  snprintf(d, sizeof d, "/proc/%d/fd", (int)srv.pid);
  DIR *dir = opendir(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(dir))) {
    snprintf(p, sizeof p, "%s/%s", d, de->d_name);
    ssize_t k = readlink(p, t, sizeof t - 1);
    if (k > 0) {
      t[k] = 0;
      n += strstr(t, "inotify") != NULL;
    }
  }
  closedir(dir);
  return n;
}

static void test_watch(void **state) {
  char w[420], p[800], q[800]; /* w: root (400) + "/w" */
  snprintf(w, sizeof w, "%s/w", root);
  mkdir(w, 0755);
  snprintf(p, sizeof p, "%s/escape", w);
  symlink(out, p); /* a symlink out of the watched tree */
  sc *c = watch(w, true);
  /* a directory created later, and one inside it, are followed */
  snprintf(p, sizeof p, "%s/new", w);
  mkdir(p, 0755);
  snprintf(q, sizeof q, "%s/new/deeper", w);
  mkdir(q, 0755);
  expect_event(c, SBX_EVENT_CREATED, p);
  snprintf(q, sizeof q, "%s/new/deeper/f.txt", w);
  FILE *f = fopen(q, "w");
  fputs("x", f);
  fclose(f);
  expect_event(c, SBX_EVENT_CREATED, q);
  /* a write through the symlink's target reports nothing; the next event
   * is the write in the tree (expect_event fails on anything outside) */
  snprintf(p, sizeof p, "%s/seen-not.txt", out);
  f = fopen(p, "w");
  fputs("x", f);
  fclose(f);
  snprintf(p, sizeof p, "%s/after.txt", w);
  f = fopen(p, "w");
  fclose(f);
  expect_event(c, SBX_EVENT_CREATED, p);
  snprintf(q, sizeof q, "%s/renamed.txt", w);
  rename(p, q);
  expect_event(c, SBX_EVENT_RENAMED, p);
  expect_event(c, SBX_EVENT_RENAMED, q);
  unlink(q);
  expect_event(c, SBX_EVENT_DELETED, q);
  /* a directory moved out of the tree is no longer watched: a write in it
   * reports nothing (under its old path or any other) */
  snprintf(p, sizeof p, "%s/new", w);
  snprintf(q, sizeof q, "%s/moved-out", out);
  assert_int_equal(rename(p, q), 0);
  expect_event(c, SBX_EVENT_RENAMED, p);
  snprintf(q, sizeof q, "%s/moved-out/deeper/late.txt", out);
  f = fopen(q, "w");
  fputs("x", f);
  fclose(f);
  snprintf(q, sizeof q, "%s/marker.txt", w);
  f = fopen(q, "w");
  fclose(f);
  for (;;) {
    sbx_wire_resp r;
    assert_int_equal(sc_recv(c, &r), 1);
    assert_int_equal(r.type, SBX_RESP_EVENT);
    bool marker = strcmp(r.u.event.path, q) == 0;
    if (strstr(r.u.event.path, "late.txt")) fail_msg("event from a directory moved out: %s", r.u.event.path);
    sbx_wire_resp_free(&r);
    if (marker) break;
  }
  assert_int_equal(inotify_fds(), 1);
  sc_close(c); /* the watch ends with its connection */
  for (int i = 0; i < 200 && inotify_fds() > 0; i++) usleep(10000);
  assert_int_equal(inotify_fds(), 0);
  /* not recursive: a subdirectory's content is not reported */
  snprintf(p, sizeof p, "%s/sub2", w);
  mkdir(p, 0755);
  c = watch(w, false);
  snprintf(p, sizeof p, "%s/sub2/g.txt", w);
  f = fopen(p, "w");
  fclose(f);
  snprintf(p, sizeof p, "%s/top.txt", w);
  f = fopen(p, "w");
  fclose(f);
  expect_event(c, SBX_EVENT_CREATED, p);
  sc_close(c);
  /* errors before ready */
  c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_watch\",\"path\":\"%s/none\"}", root);
  sc_result res;
  free(collect(c, &res));
  assert_int_equal(res.kind, SBX_ERR_NOT_FOUND);
  sc_close(c);
}

/* A client that does not read: once 256 events wait, the watch ends with
 * error{internal, "watch event queue overflow"} after what was queued. */
static void test_watch_overflow(void **state) {
  char w[800], p[900];
  snprintf(w, sizeof w, "%s/ovf", root);
  mkdir(w, 0755);
  sc *c = watch(w, false);
  for (int i = 0; i < 30000; i++) {
    snprintf(p, sizeof p, "%s/file-with-a-longish-name-%06d", w, i);
    int fd = open(p, O_CREAT | O_WRONLY, 0644);
    close(fd);
  }
  int events = 0;
  for (;;) {
    sbx_wire_resp r;
    assert_int_equal(sc_recv(c, &r), 1);
    if (r.type == SBX_RESP_ERROR) {
      assert_int_equal(r.u.error.kind, SBX_ERR_INTERNAL);
      assert_non_null(strstr(r.u.error.message, "watch event queue overflow"));
      sbx_wire_resp_free(&r);
      break;
    }
    assert_int_equal(r.type, SBX_RESP_EVENT);
    sbx_wire_resp_free(&r);
    events++;
  }
  assert_true(events > 256 && events < 30000);
  /* the RPC ended: the connection serves the next request */
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
  sc_close(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_find_matches),   cmocka_unit_test(test_find_errors),
      cmocka_unit_test(test_find_catastrophic), cmocka_unit_test(test_find_cancel),
      cmocka_unit_test(test_replace),        cmocka_unit_test(test_replace_bad_input),
      cmocka_unit_test(test_watch),          cmocka_unit_test(test_watch_overflow),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
