/* test_silkd_tar.c - fs_push / fs_pull (§5.6) and the §8.5 hardening. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>

#include "silkd_client.h"

static silkd_srv srv;

static int setup(void **state) { return silkd_start(&srv); }
static int teardown(void **state) {
  int st = silkd_stop(&srv);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* ---- a minimal ustar writer for crafted archives ---- */
static void tar_member(sbx_buf *b, const char *name, char type, const char *link, const char *data, int mode) {
  char h[512] = {0};
  size_t size = data ? strlen(data) : 0;
  snprintf(h, 100, "%s", name);
  snprintf(h + 100, 8, "%07o", mode);
  snprintf(h + 108, 8, "%07o", 0);
  snprintf(h + 116, 8, "%07o", 0);
  snprintf(h + 124, 12, "%011zo", size & 077777777777u); /* ustar: 11 octal digits */
  snprintf(h + 136, 12, "%011o", 1700000000);
  memset(h + 148, ' ', 8);
  h[156] = type;
  if (link) snprintf(h + 157, 100, "%s", link);
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += (unsigned char)h[i];
  snprintf(h + 148, 8, "%06o", sum);
  h[155] = ' ';
  sbx_buf_add(b, h, 512, NULL);
  if (size) {
    sbx_buf_add(b, data, size, NULL);
    char pad[512] = {0};
    if (size % 512) sbx_buf_add(b, pad, 512 - size % 512, NULL);
  }
}

static void tar_end(sbx_buf *b) {
  char z[1024] = {0};
  sbx_buf_add(b, z, sizeof z, NULL);
}

static void push(sc *c, const char *dest, const void *tar, size_t n, sc_result *res) {
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_push\",\"dest\":\"%s\"}", dest);
  const uint8_t *p = tar;
  for (size_t off = 0; off < n; off += 262144)
    sc_send_bulk(c, SBX_BULK_REQ_DATA, p + off, n - off < 262144 ? n - off : 262144);
  sc_sendf(c, "{\"v\":1,\"op\":\"data_end\"}");
  assert_int_equal(sc_collect(c, res, SC_FIN_DONE), 1);
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
  closedir(d);
  return n;
}

static void expect_rejected(sc *c, const char *dest, sbx_buf *tar) {
  sc_result res;
  push(c, dest, tar->ptr, tar->len, &res);
  if (res.final != SBX_RESP_ERROR) fprintf(stderr, "push was not rejected\n");
  assert_int_equal(res.final, SBX_RESP_ERROR);
  assert_int_equal(res.kind, SBX_ERR_BAD_REQUEST);
  assert_int_equal(strncmp(res.msg, "tar extract: unsafe member", 26), 0);
  sc_result_free(&res);
  assert_int_equal(count_entries(dest), 0); /* untouched: no staging left */
  /* the connection is still usable */
  sc_sendf(c, "{\"v\":1,\"op\":\"info\"}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(c, &r), 1);
  assert_int_equal(r.type, SBX_RESP_INFO);
  sbx_wire_resp_free(&r);
}

static void test_push_crafted(void **state) {
  sc *c = sc_open(&srv);
  char dest[512], outside[512], p[600];
  snprintf(dest, sizeof dest, "%s/c/dest", srv.dir);
  snprintf(outside, sizeof outside, "%s/c/outside", srv.dir);
  mkdir(outside, 0755); /* fails: parent missing */
  snprintf(p, sizeof p, "%s/c", srv.dir);
  mkdir(p, 0755);
  mkdir(outside, 0755);
  mkdir(dest, 0755);

  sbx_buf t = SBX_BUF_INIT(1 << 20);
  tar_member(&t, "ok.txt", '0', NULL, "fine", 0644);
  tar_member(&t, "../x", '0', NULL, "evil", 0644);
  tar_end(&t);
  expect_rejected(c, dest, &t);
  snprintf(p, sizeof p, "%s/c/x", srv.dir);
  assert_int_equal(access(p, F_OK), -1);

  sbx_buf_reset(&t);
  tar_member(&t, "a/../../y", '0', NULL, "evil", 0644);
  tar_end(&t);
  expect_rejected(c, dest, &t);

  sbx_buf_reset(&t);
  snprintf(p, sizeof p, "%s/abs", outside);
  tar_member(&t, p, '0', NULL, "evil", 0644);
  tar_end(&t);
  expect_rejected(c, dest, &t);
  assert_int_equal(access(p, F_OK), -1);

  /* a symlink, then a file through it */
  sbx_buf_reset(&t);
  tar_member(&t, "l", '2', outside, NULL, 0777);
  tar_member(&t, "l/x", '0', NULL, "evil", 0644);
  tar_end(&t);
  expect_rejected(c, dest, &t);
  assert_int_equal(count_entries(outside), 0);

  /* a hardlink to /etc/passwd, and one out of the tree */
  sbx_buf_reset(&t);
  tar_member(&t, "h", '1', "/etc/passwd", NULL, 0644);
  tar_end(&t);
  expect_rejected(c, dest, &t);
  sbx_buf_reset(&t);
  tar_member(&t, "h", '1', "../../../../etc/passwd", NULL, 0644);
  tar_end(&t);
  expect_rejected(c, dest, &t);
  sbx_buf_reset(&t);
  tar_member(&t, "h", '1', "not-yet-extracted", NULL, 0644);
  tar_end(&t);
  expect_rejected(c, dest, &t);

  /* device nodes */
  sbx_buf_reset(&t);
  tar_member(&t, "dev", '3', NULL, NULL, 0644);
  tar_end(&t);
  expect_rejected(c, dest, &t);

  /* garbage: internal, dest untouched */
  sbx_buf_reset(&t);
  sbx_buf_adds(&t, "this is not a tar archive", NULL);
  sc_result res;
  push(c, dest, t.ptr, t.len, &res);
  assert_int_equal(res.final, SBX_RESP_ERROR);
  assert_int_equal(res.kind, SBX_ERR_INTERNAL);
  assert_int_equal(strncmp(res.msg, "tar extract: ", 13), 0);
  sc_result_free(&res);
  assert_int_equal(count_entries(dest), 0);

  /* a valid hardlink inside the tree, and a symlink in dest replaced by the
   * merge instead of written through */
  snprintf(p, sizeof p, "%s/link", dest);
  assert_int_equal(symlink(outside, p), 0);
  snprintf(p, sizeof p, "%s/flink", dest);
  char target[600];
  snprintf(target, sizeof target, "%s/victim", outside);
  assert_int_equal(symlink(target, p), 0);
  sbx_buf_reset(&t);
  tar_member(&t, "f", '0', NULL, "data", 0640);
  tar_member(&t, "g", '1', "f", NULL, 0640);
  tar_member(&t, "link/", '5', NULL, NULL, 0755);
  tar_member(&t, "link/inner", '0', NULL, "in", 0644);
  tar_member(&t, "flink", '0', NULL, "replaced", 0644);
  tar_end(&t);
  push(c, dest, t.ptr, t.len, &res);
  if (res.final != SBX_RESP_DONE) fprintf(stderr, "push: %s\n", res.msg);
  assert_int_equal(res.final, SBX_RESP_DONE);
  sc_result_free(&res);
  assert_int_equal(count_entries(outside), 0);
  struct stat st1, st2;
  snprintf(p, sizeof p, "%s/f", dest);
  assert_int_equal(stat(p, &st1), 0);
  snprintf(p, sizeof p, "%s/g", dest);
  assert_int_equal(stat(p, &st2), 0);
  assert_int_equal(st1.st_ino, st2.st_ino);
  assert_int_equal(st1.st_mode & 07777, 0640);
  assert_int_equal(st1.st_mtime, 1700000000);
  snprintf(p, sizeof p, "%s/link", dest);
  assert_int_equal(lstat(p, &st1), 0);
  assert_true(S_ISDIR(st1.st_mode));
  snprintf(p, sizeof p, "%s/flink", dest);
  assert_int_equal(lstat(p, &st1), 0);
  assert_true(S_ISREG(st1.st_mode));
  assert_int_equal(count_entries(dest), 4); /* f g link flink, no staging */
  sbx_buf_free(&t);
  sc_close(c);
}

static int run(const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_push_pull_round_trip(void **state) {
  sc *c = sc_open(&srv);
  char src[512], dest[512], back[512];
  snprintf(src, sizeof src, "%s/rt/src", srv.dir);
  snprintf(dest, sizeof dest, "%s/rt/dest", srv.dir);
  snprintf(back, sizeof back, "%s/rt/back", srv.dir);
  assert_int_equal(run("mkdir -p %s/tree/sub/deeper %s/tree/empty %s && cd %s/tree && "
                       "printf hello > a.txt && chmod 600 a.txt && printf '#!/bin/sh\\n' > sub/run.sh && "
                       "chmod 755 sub/run.sh && head -c 3000000 /dev/urandom > sub/deeper/big.bin && "
                       "ln -s a.txt link && ln -s /etc/passwd abs-link && ln sub/run.sh sub/hard.sh && chmod 750 sub && "
                       "touch -h -d @1600000000 a.txt link abs-link sub/run.sh sub/deeper/big.bin && "
                       "touch -d @1500000000 empty sub/deeper sub . ",
                       src, src, back, src),
                   0);
  /* push a GNU tar of the tree */
  assert_int_equal(run("tar -C %s -cf %s/../tree.tar tree", src, src), 0);
  char tarpath[600];
  snprintf(tarpath, sizeof tarpath, "%s/../tree.tar", src);
  FILE *f = fopen(tarpath, "r");
  sbx_buf t = SBX_BUF_INIT(1u << 30);
  char tmp[65536];
  size_t n;
  while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) sbx_buf_add(&t, tmp, n, NULL);
  fclose(f);
  sc_result res;
  push(c, dest, t.ptr, t.len, &res);
  if (res.final != SBX_RESP_DONE) fprintf(stderr, "push: %s\n", res.msg);
  assert_int_equal(res.final, SBX_RESP_DONE);
  sc_result_free(&res);
  sbx_buf_free(&t);
  /* identical content, modes, symlinks, mtimes */
  assert_int_equal(run("diff -r --no-dereference %s/tree %s/tree", src, dest), 0);
  assert_int_equal(run("cd %s/tree && find . -printf '%%p %%m %%y %%l %%T@\\n' | sort > ../a.lst && "
                       "cd %s/tree && find . -printf '%%p %%m %%y %%l %%T@\\n' | sort > ../b.lst && "
                       "cmp ../b.lst %s/../src/a.lst",
                       src, dest, dest),
                   0);
  /* pull it back (trailing slash and dot are dropped) */
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_pull\",\"path\":\"%s/tree/./\"}", dest);
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.final, SBX_RESP_DONE);
  char pulled[600];
  snprintf(pulled, sizeof pulled, "%s/pulled.tar", back);
  f = fopen(pulled, "w");
  fwrite(res.data.ptr, 1, res.data.len, f);
  fclose(f);
  sc_result_free(&res);
  assert_int_equal(run("tar -C %s -xpf %s && tar -tvf %s | grep -q '^lrwxrwxrwx.*tree/link -> a.txt'", back, pulled,
                       pulled),
                   0);
  assert_int_equal(run("cd %s/tree && find . -printf '%%p %%m %%y %%l %%T@\\n' | sort > ../c.lst && "
                       "cmp ../c.lst %s/../src/a.lst",
                       back, back),
                   0);
  /* hard links stay hard links */
  assert_int_equal(run("tar -tvf %s | grep -q '^hrwxr-xr-x.*tree/sub/.* link to tree/sub/'", pulled), 0);
  assert_int_equal(run("[ $(stat -c %%i %s/tree/sub/run.sh) = $(stat -c %%i %s/tree/sub/hard.sh) ]", back, back), 0);
  /* pull of a single file */
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_pull\",\"path\":\"%s/tree/a.txt\"}", dest);
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.final, SBX_RESP_DONE);
  assert_true(res.data.len >= 1024);
  assert_memory_equal(res.data.ptr, "a.txt", 6);
  sc_result_free(&res);
  /* errors */
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_pull\",\"path\":\"/\"}");
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_BAD_REQUEST);
  assert_string_equal(res.msg, "invalid path");
  sc_result_free(&res);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_pull\",\"path\":\"%s/..\"}", dest);
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_string_equal(res.msg, "invalid path");
  sc_result_free(&res);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_pull\",\"path\":\"%s/missing\"}", dest);
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_int_equal(res.kind, SBX_ERR_INTERNAL);
  assert_int_equal(strncmp(res.msg, "tar create: ", 12), 0);
  sc_result_free(&res);
  sc_close(c);
}

static void test_push_cut_off(void **state) {
  char dest[512];
  snprintf(dest, sizeof dest, "%s/cut", srv.dir);
  sc *c = sc_open(&srv);
  sbx_buf t = SBX_BUF_INIT(1 << 20);
  tar_member(&t, "file", '0', NULL, "content", 0644);
  tar_end(&t);
  sc_sendf(c, "{\"v\":1,\"op\":\"fs_push\",\"dest\":\"%s\"}", dest);
  sc_send_bulk(c, SBX_BULK_REQ_DATA, t.ptr, 600);
  shutdown(c->fd, SHUT_WR);
  sc_result res;
  assert_int_equal(sc_collect(c, &res, SC_FIN_DONE), 1);
  assert_string_equal(res.msg, "stream ended before data_end");
  sc_result_free(&res);
  sc_close(c);
  sbx_buf_free(&t);
  /* dest was created but stays empty once the worker has cleaned up */
  for (int i = 0; i < 100000 && count_entries(dest) != 0; i++) usleep(1000);
  assert_int_equal(count_entries(dest), 0);
}

/* A push larger than the 8 MiB the daemon lets wait for the extractor, so
 * the client is paused and resumed many times; then an unsafe first member
 * followed by megabytes more: rejected at once, the rest dropped, dest
 * untouched, the connection usable. */
static void test_push_large_and_early_reject(void **state) {
  char dest[512], p[600];
  snprintf(dest, sizeof dest, "%s/large", srv.dir);
  size_t size = 24u << 20;
  char *data = sbx_malloc(size + 1);
  for (size_t i = 0; i < size; i++) data[i] = (char)('a' + (i * 7 + i / 4093) % 26);
  data[size] = 0;
  sbx_buf t = SBX_BUF_INIT(64u << 20);
  tar_member(&t, "big", '0', NULL, data, 0644);
  tar_end(&t);
  sc *c = sc_open(&srv);
  sc_result res;
  push(c, dest, t.ptr, t.len, &res);
  assert_int_equal(res.final, SBX_RESP_DONE);
  sc_result_free(&res);
  snprintf(p, sizeof p, "%s/big", dest);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  char *got = sbx_malloc(size + 1);
  assert_int_equal(fread(got, 1, size + 1, f), size);
  fclose(f);
  assert_memory_equal(got, data, size);
  sbx_free(got);
  sbx_buf_free(&t);

  /* Many small files: the extractor is slower than the upload, so the
   * queue fills and the client is paused and resumed. */
  char dest3[512];
  snprintf(dest3, sizeof dest3, "%s/many", srv.dir);
  sbx_buf m = SBX_BUF_INIT(64u << 20);
  enum { FILES = 12000 };
  char name[64], body[1025];
  memcpy(body, data, 1024);
  body[1024] = 0;
  tar_member(&m, "d/", '5', NULL, NULL, 0755);
  for (int i = 0; i < FILES; i++) {
    snprintf(name, sizeof name, "d/f%05d", i);
    tar_member(&m, name, '0', NULL, body, 0644);
  }
  tar_end(&m);
  push(c, dest3, m.ptr, m.len, &res);
  assert_int_equal(res.final, SBX_RESP_DONE);
  sc_result_free(&res);
  sbx_buf_free(&m);
  snprintf(p, sizeof p, "%s/d", dest3);
  assert_int_equal(count_entries(p), FILES);
  snprintf(p, sizeof p, "%s/d/f%05d", dest3, FILES - 1);
  f = fopen(p, "r");
  assert_non_null(f);
  char back[1100];
  assert_int_equal(fread(back, 1, sizeof back, f), 1024);
  fclose(f);
  assert_memory_equal(back, body, 1024);

  char dest2[512];
  snprintf(dest2, sizeof dest2, "%s/early", srv.dir);
  mkdir(dest2, 0755);
  sbx_buf u = SBX_BUF_INIT(64u << 20);
  tar_member(&u, "../escape", '0', NULL, "x", 0644);
  tar_member(&u, "big", '0', NULL, data, 0644);
  tar_end(&u);
  expect_rejected(c, dest2, &u);
  sbx_buf_free(&u);
  sbx_free(data);
  sc_close(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_push_crafted),
      cmocka_unit_test(test_push_pull_round_trip),
      cmocka_unit_test(test_push_cut_off),
      cmocka_unit_test(test_push_large_and_early_reject),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, setup, teardown);
}
