/* test_silkd_fs.c - file verbs (§5.5, §9.3 checks 8 and 11). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>

#include "core/path.h"
#include "silkd_client.h"

static silkd_srv srv;
static char root[400];

static int setup(void **state) {
  if (silkd_start(&srv) < 0) return -1;
  snprintf(root, sizeof root, "%s/fs", srv.dir);
  return mkdir(root, 0755);
}
static int teardown(void **state) {
  int st = silkd_stop(&srv);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void put_file(const char *path, const char *content) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(content, f);
  fclose(f);
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  sbx_buf b = SBX_BUF_INIT(1u << 30);
  char tmp[65536];
  size_t n;
  while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) sbx_buf_add(&b, tmp, n, NULL);
  fclose(f);
  if (len) *len = b.len;
  if (!b.ptr) return sbx_strdup("");
  return sbx_buf_steal(&b, NULL);
}

static int count_tmp(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strstr(de->d_name, ".silkd-") && strstr(de->d_name, ".tmp")) n++;
  closedir(d);
  return n;
}

/* One request and the exact answer it must get, for the verbs that answer
 * with a single final frame. */
typedef struct {
  const char *req; /* printf format; each %s is the test root */
  bool done;       /* expect done; otherwise an error: */
  sbx_wire_error_kind kind;
  const char *msg;    /* the whole message, or NULL */
  const char *prefix; /* or its start, or NULL */
} fs_case;

static void run_cases(sc *c, const fs_case *cases, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const fs_case *k = &cases[i];
    sc_result res;
    sc_sendf(c, k->req, root, root);
    assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
    if (k->done) {
      assert_int_equal(res.final, SBX_RESP_DONE);
    } else {
      if (res.final != SBX_RESP_ERROR) fprintf(stderr, "case %zu: %s: no error\n", i, k->req);
      assert_int_equal(res.final, SBX_RESP_ERROR);
      assert_int_equal(res.kind, k->kind);
      if (k->msg) assert_string_equal(res.msg, k->msg);
      if (k->prefix) assert_int_equal(strncmp(res.msg, k->prefix, strlen(k->prefix)), 0);
    }
    sc_result_free(&res);
  }
}
#define N_CASES(a) (sizeof(a) / sizeof(a)[0])

static void test_fs_write_read(void **state) {
  sc *c = sc_open(&srv);
  char path[512];
  snprintf(path, sizeof path, "%s/w.bin", root);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_write\",\"path\":\"%s\",\"mode\":384}", path);
  size_t total = 3 * 1024 * 1024 + 17;
  uint8_t *data = sbx_malloc(total);
  for (size_t i = 0; i < total; i++) data[i] = (uint8_t)(i * 131 + (i >> 11));
  for (size_t off = 0; off < total; off += 262144)
    sc_send_bulk(c, SBX_BULK_REQ_DATA, data + off, total - off < 262144 ? total - off : 262144);
  sc_sendf(c, "{\"v\":1,\"op\":\"data_end\"}");
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.final, SBX_RESP_DONE);
  sc_result_free(&res);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  assert_int_equal(st.st_size, (off_t)total);
  /* read it back */
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_read\",\"path\":\"%s\"}", path);
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.final, SBX_RESP_DONE);
  assert_int_equal(res.data.len, total);
  assert_memory_equal(res.data.ptr, data, total);
  sc_result_free(&res);
  /* overwrite without mode keeps the existing permission bits */
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_write\",\"path\":\"%s\"}", path);
  sc_sendf(c, "{\"v\":1,\"op\":\"data\",\"data\":\"aGVsbG8=\"}");
  sc_sendf(c, "{\"v\":1,\"op\":\"data_end\"}");
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.final, SBX_RESP_DONE);
  sc_result_free(&res);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  char *got = slurp(path, NULL);
  assert_string_equal(got, "hello");
  sbx_free(got);
  /* an empty file */
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_write\",\"path\":\"%s/empty\"}", root);
  sc_sendf(c, "{\"v\":1,\"op\":\"data_end\"}");
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  sc_result_free(&res);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_read\",\"path\":\"%s/empty\"}", root);
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.frames, 1);
  sc_result_free(&res);
  assert_int_equal(count_tmp(root), 0);
  sbx_free(data);
  sc_close(c);
}

static void test_fs_write_atomic(void **state) {
  char path[512];
  snprintf(path, sizeof path, "%s/keep.txt", root);
  put_file(path, "original");
  /* cut off before data_end */
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_write\",\"path\":\"%s\"}", path);
  sc_sendf(c, "{\"v\":1,\"op\":\"data\",\"data\":\"aGVsbG8=\"}");
  shutdown(c->fd, SHUT_WR);
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.final, SBX_RESP_ERROR);
  assert_string_equal(res.msg, "stream ended before data_end");
  sc_result_free(&res);
  assert_true(sc_closed(c));
  sc_close(c);
  char *got = slurp(path, NULL);
  assert_string_equal(got, "original");
  sbx_free(got);
  assert_int_equal(count_tmp(root), 0);
  /* interrupted by another frame: error, frame consumed */
  c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_write\",\"path\":\"%s\"}", path);
  sc_sendf(c, "{\"v\":1,\"op\":\"data\",\"data\":\"aGVsbG8=\"}");
  sc_sendf(c, "{\"v\":1,\"op\":\"ps\"}");
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_string_equal(res.msg, "expected data or data_end");
  sc_result_free(&res);
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
  got = slurp(path, NULL);
  assert_string_equal(got, "original");
  sbx_free(got);
  assert_int_equal(count_tmp(root), 0);
  /* missing parent: not_found at once; the upload frames are dropped */
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_write\",\"path\":\"%s/nodir/x\"}", root);
  sc_sendf(c, "{\"v\":1,\"op\":\"data\",\"data\":\"aGVsbG8=\"}");
  sc_sendf(c, "{\"v\":1,\"op\":\"data_end\"}");
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_NOT_FOUND);
  assert_int_equal(strncmp(res.msg, "create: ", 8), 0);
  sc_result_free(&res);
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
  sc_close(c);
}

static void test_fs_concurrent_writers(void **state) {
  char path[512];
  snprintf(path, sizeof path, "%s/race.txt", root);
  enum { N = 8, SZ = 1 << 20 };
  sc *cs[N];
  uint8_t *bufs[N];
  for (int i = 0; i < N; i++) {
    cs[i] = sc_open(&srv);
    bufs[i] = sbx_malloc(SZ);
    memset(bufs[i], 'a' + i, SZ);
    sc_sendf(cs[i], "{\"v\":1,\"op\":\"fs_write\",\"path\":\"%s\"}", path);
  }
  /* interleave chunks of all writers */
  for (size_t off = 0; off < SZ; off += 65536)
    for (int i = 0; i < N; i++) sc_send_bulk(cs[i], SBX_BULK_REQ_DATA, bufs[i] + off, 65536);
  for (int i = 0; i < N; i++) sc_sendf(cs[i], "{\"v\":1,\"op\":\"data_end\"}");
  for (int i = 0; i < N; i++) {
    sc_result res;
    assert_int_equal(sc_collect(cs[i], &res, SC_FIN_DONE), 1);
    assert_int_equal(res.final, SBX_RESP_DONE);
    sc_result_free(&res);
    sc_close(cs[i]);
  }
  size_t len;
  char *got = slurp(path, &len);
  assert_int_equal(len, SZ);
  for (size_t i = 1; i < len; i++) assert_int_equal(got[i], got[0]);
  sbx_free(got);
  for (int i = 0; i < N; i++) sbx_free(bufs[i]);
}

/* The commit replaces what is at the path as rename(2) would: a symlink
 * itself (not its target), one name of a hard-linked file (the other keeps
 * the old bytes), and never a directory. */
static void write_hello(sc *c, const char *path, sc_result *res) {
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_write\",\"path\":\"%s\"}", path);
  sc_sendf(c, "{\"v\":1,\"op\":\"data\",\"data\":\"aGVsbG8=\"}");
  sc_sendf(c, "{\"v\":1,\"op\":\"data_end\"}");
  assert_int_equal(sc_collect(c, res, SC_FIN_DONE), 1);
}

static void test_fs_write_replaces(void **state) {
  char dir[512], target[512], sym[512], other[512], path[512];
  snprintf(dir, sizeof dir, "%s/repl", root);
  assert_int_equal(mkdir(dir, 0755), 0);
  assert_int_equal(sbxi_path_fmt(target, sizeof target, NULL, "%s/target", dir), 0);
  assert_int_equal(sbxi_path_fmt(sym, sizeof sym, NULL, "%s/link", dir), 0);
  put_file(target, "target");
  assert_int_equal(symlink(target, sym), 0);
  sc *c = sc_open(&srv);
  sc_result res;
  write_hello(c, sym, &res);
  assert_int_equal(res.final, SBX_RESP_DONE);
  sc_result_free(&res);
  struct stat st;
  assert_int_equal(lstat(sym, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  char *got = slurp(sym, NULL);
  assert_string_equal(got, "hello");
  sbx_free(got);
  got = slurp(target, NULL);
  assert_string_equal(got, "target");
  sbx_free(got);
  /* hard links */
  assert_int_equal(sbxi_path_fmt(other, sizeof other, NULL, "%s/other", dir), 0);
  assert_int_equal(link(target, other), 0);
  write_hello(c, target, &res);
  assert_int_equal(res.final, SBX_RESP_DONE);
  sc_result_free(&res);
  got = slurp(target, NULL);
  assert_string_equal(got, "hello");
  sbx_free(got);
  got = slurp(other, NULL);
  assert_string_equal(got, "target");
  sbx_free(got);
  /* a directory stays, and the answer is rename's */
  assert_int_equal(sbxi_path_fmt(path, sizeof path, NULL, "%s/sub", dir), 0);
  assert_int_equal(mkdir(path, 0755), 0);
  write_hello(c, path, &res);
  assert_int_equal(res.final, SBX_RESP_ERROR);
  assert_int_equal(res.kind, SBX_ERR_INTERNAL);
  assert_string_equal(res.msg, "commit: Is a directory (os error 21)");
  sc_result_free(&res);
  assert_int_equal(lstat(path, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(count_tmp(dir), 0);
  sc_close(c);
}

static void test_fs_read_errors(void **state) {
  sc *c = sc_open(&srv);
  char fifo[512];
  snprintf(fifo, sizeof fifo, "%s/fifo", root);
  assert_int_equal(mkfifo(fifo, 0644), 0);
  static const fs_case cases[] = {
      {"{\"v\":1,\"op\":\"fs_read\",\"path\":\"%s/missing\"}", false, SBX_ERR_NOT_FOUND,
       "open: No such file or directory (os error 2)", NULL},
      {"{\"v\":1,\"op\":\"fs_read\",\"path\":\"%s\"}", false, SBX_ERR_BAD_REQUEST, "open: not a regular file", NULL},
      {"{\"v\":1,\"op\":\"fs_read\",\"path\":\"%s/fifo\"}", false, SBX_ERR_BAD_REQUEST, NULL, NULL},
  };
  run_cases(c, cases, N_CASES(cases));
  unlink(fifo);
  sc_close(c);
}

static void test_fs_list_batches(void **state) {
  char dir[512], p[600];
  snprintf(dir, sizeof dir, "%s/many", root);
  assert_int_equal(mkdir(dir, 0755), 0);
  for (int i = 0; i < 5000; i++) {
    snprintf(p, sizeof p, "%s/f%05d", dir, i);
    close(open(p, O_CREAT | O_WRONLY, 0644));
  }
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_list\",\"path\":\"%s\"}", dir);
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_ENTRIES);
  assert_int_equal(r.u.entries.len, 4096);
  sbx_wire_resp_free(&r);
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_ENTRIES);
  assert_int_equal(r.u.entries.len, 904);
  sbx_wire_resp_free(&r);
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_DONE);
  sbx_wire_resp_free(&r);
  /* kinds from lstat; empty dir is done alone */
  char sub[512];
  snprintf(sub, sizeof sub, "%s/kinds", root);
  mkdir(sub, 0755);
  snprintf(p, sizeof p, "%s/kinds/link", root);
  assert_int_equal(symlink("/etc", p), 0);
  snprintf(p, sizeof p, "%s/kinds/file", root);
  put_file(p, "12345");
  snprintf(p, sizeof p, "%s/kinds/dir", root);
  mkdir(p, 0755);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_list\",\"path\":\"%s\"}", sub);
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.u.entries.len, 3);
  for (size_t i = 0; i < 3; i++) {
    const sbx_wire_dir_entry *e = &r.u.entries.items[i];
    if (!strcmp(e->name, "link")) assert_int_equal(e->kind, SBX_FILE_SYMLINK);
    else if (!strcmp(e->name, "dir")) assert_int_equal(e->kind, SBX_FILE_DIR);
    else {
      assert_string_equal(e->name, "file");
      assert_int_equal(e->kind, SBX_FILE_FILE);
      assert_int_equal(e->size, 5);
    }
  }
  sbx_wire_resp_free(&r);
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  sc_result_free(&res);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_list\",\"path\":\"%s/kinds/dir\"}", root);
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.frames, 1);
  sc_result_free(&res);
  static const fs_case cases[] = {
      {"{\"v\":1,\"op\":\"fs_list\",\"path\":\"%s/kinds/file\"}", false, SBX_ERR_INTERNAL, NULL, NULL},
      {"{\"v\":1,\"op\":\"fs_list\",\"path\":\"%s/nope\"}", false, SBX_ERR_NOT_FOUND, NULL, "read_dir: "},
  };
  run_cases(c, cases, N_CASES(cases));
  sc_close(c);
}

static void test_fs_stat_mkdir_rm_rename(void **state) {
  sc *c = sc_open(&srv);
  char p[512];
  sbx_wire_resp r;
  snprintf(p, sizeof p, "%s/st", root);
  put_file(p, "hello");
  chmod(p, 0640);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_stat\",\"path\":\"%s\"}", p);
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_STAT);
  assert_int_equal(r.u.stat.info.kind, SBX_FILE_FILE);
  assert_int_equal(r.u.stat.info.size, 5);
  assert_int_equal(r.u.stat.info.mode, 0640);
  assert_true(r.u.stat.info.mtime_epoch_secs > 1600000000u);
  sbx_wire_resp_free(&r);
  /* stat of nothing, then mkdir: missing parent, parents (twice: an
   * existing directory counts as success), and an existing path */
  static const fs_case mkdirs[] = {
      {"{\"v\":1,\"op\":\"fs_stat\",\"path\":\"%s/none\"}", false, SBX_ERR_NOT_FOUND,
       "stat: No such file or directory (os error 2)", NULL},
      {"{\"v\":1,\"op\":\"fs_mkdir\",\"path\":\"%s/a/b/c\"}", false, SBX_ERR_NOT_FOUND, NULL, NULL},
      {"{\"v\":1,\"op\":\"fs_mkdir\",\"path\":\"%s/a/b/c\",\"parents\":true}", true, 0, NULL, NULL},
      {"{\"v\":1,\"op\":\"fs_mkdir\",\"path\":\"%s/a/b/c\",\"parents\":true}", true, 0, NULL, NULL},
      {"{\"v\":1,\"op\":\"fs_mkdir\",\"path\":\"%s/a/b/c\"}", false, SBX_ERR_INTERNAL, NULL, "mkdir: File exists"},
  };
  run_cases(c, mkdirs, N_CASES(mkdirs));
  /* rm: a tree holding a symlink to outside is removed without following */
  char outside[512], link[600];
  snprintf(outside, sizeof outside, "%s/outside", root);
  mkdir(outside, 0755);
  snprintf(p, sizeof p, "%s/outside/precious", root);
  put_file(p, "keep");
  snprintf(link, sizeof link, "%s/a/b/c/out", root);
  assert_int_equal(symlink(outside, link), 0);
  static const fs_case rms[] = {
      {"{\"v\":1,\"op\":\"fs_rm\",\"path\":\"%s/a\"}", false, SBX_ERR_INTERNAL, NULL, NULL}, /* ENOTEMPTY */
      {"{\"v\":1,\"op\":\"fs_rm\",\"path\":\"%s/a\",\"recursive\":true}", true, 0, NULL, NULL},
  };
  run_cases(c, rms, N_CASES(rms));
  struct stat st;
  snprintf(p, sizeof p, "%s/a", root);
  assert_int_equal(lstat(p, &st), -1);
  snprintf(p, sizeof p, "%s/outside/precious", root);
  assert_int_equal(lstat(p, &st), 0);
  /* rm of nothing, then rename: done, and again with the source gone */
  static const fs_case renames[] = {
      {"{\"v\":1,\"op\":\"fs_rm\",\"path\":\"%s/a\"}", false, SBX_ERR_NOT_FOUND, NULL, "rm: "},
      {"{\"v\":1,\"op\":\"fs_rename\",\"from\":\"%s/st\",\"to\":\"%s/st2\"}", true, 0, NULL, NULL},
      {"{\"v\":1,\"op\":\"fs_rename\",\"from\":\"%s/st\",\"to\":\"%s/st2\"}", false, SBX_ERR_NOT_FOUND, NULL,
       "rename: "},
  };
  run_cases(c, renames, 2);
  snprintf(p, sizeof p, "%s/st2", root);
  assert_int_equal(lstat(p, &st), 0);
  run_cases(c, renames + 2, 1);
  sc_close(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fs_write_read),
      cmocka_unit_test(test_fs_write_atomic),
      cmocka_unit_test(test_fs_concurrent_writers),
      cmocka_unit_test(test_fs_write_replaces),
      cmocka_unit_test(test_fs_read_errors),
      cmocka_unit_test(test_fs_list_batches),
      cmocka_unit_test(test_fs_stat_mkdir_rm_rename),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, setup, teardown);
}
