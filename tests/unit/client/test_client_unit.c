/* Client pieces that need no server: addresses (§9.1), refusal of CR, LF
 * and NUL in ids and tokens, decoding of claim answers, typed errors, and
 * the tar round trip of a tree with modes, symlinks and empty dirs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <sandbox/client.h>

#include "client/client_priv.h"

static void test_addr_forms(void **state) {
  (void)state;
  sbx_addr a;
  sbx_error err;
  char o[300];
  assert_int_equal(sbx_addr_parse("127.0.0.1:7777", NULL, &a, &err), 0);
  assert_string_equal(a.scheme, "http");
  assert_string_equal(a.host, "127.0.0.1");
  assert_int_equal(a.port, 7777);
  assert_int_equal(sbx_addr_parse("https://node.example.com", NULL, &a, &err), 0);
  assert_string_equal(a.scheme, "https");
  assert_int_equal(a.port, 443);
  assert_int_equal(sbx_addr_parse("http://h", NULL, &a, &err), 0);
  assert_int_equal(a.port, 80);
  assert_int_equal(sbx_addr_parse("http://[::1]:8080/", NULL, &a, &err), 0);
  assert_string_equal(a.host, "::1");
  assert_int_equal(a.port, 8080);
  sbx_addr_origin(&a, o, sizeof o);
  assert_string_equal(o, "http://[::1]:8080");
  assert_int_equal(sbx_addr_parse("[fe80::2]:1", NULL, &a, &err), 0);
  assert_string_equal(a.host, "fe80::2");
  /* a seed list uses its first entry */
  assert_int_equal(sbx_addr_parse("10.0.0.1:7777, 10.0.0.2:7777", NULL, &a, &err), 0);
  assert_string_equal(a.host, "10.0.0.1");
  /* a bare host:port inherits the entry's scheme; an explicit one wins */
  sbx_addr entry;
  assert_int_equal(sbx_addr_parse("https://entry:443", NULL, &entry, &err), 0);
  assert_int_equal(sbx_addr_parse("10.0.0.6:7777", &entry, &a, &err), 0);
  assert_string_equal(a.scheme, "https");
  assert_int_equal(sbx_addr_parse("http://10.0.0.6:7777", &entry, &a, &err), 0);
  assert_string_equal(a.scheme, "http");
  assert_int_equal(sbx_addr_parse("unix:/run/silkd.sock", NULL, &a, &err), 0);
  assert_string_equal(a.scheme, "unix");
  assert_string_equal(a.host, "/run/silkd.sock");
}

static void test_addr_rejects(void **state) {
  (void)state;
  const char *bad[] = {"",
                       "host",
                       "host:",
                       "host:0",
                       "host:65536",
                       "host:12x",
                       "ftp://host:21",
                       "http://host:80/path",
                       "http://user@host:80",
                       "http://host:80?q=1",
                       "::1:80",
                       "[::1",
                       "[::1]x",
                       "http://",
                       "ho st:80",
                       NULL};
  for (int i = 0; bad[i]; i++) {
    sbx_addr a;
    sbx_error err;
    int rc = sbx_addr_parse(bad[i], NULL, &a, &err);
    if (rc != SBX_E_INVAL) fail_msg("accepted %s", bad[i]);
  }
}

static void test_header_values(void **state) {
  (void)state;
  sbx_error err;
  assert_int_equal(sbx_client_check_header_value("id", "sb_0123456789abcdef", 19, &err), 0);
  assert_int_equal(sbx_client_check_header_value("id", "sb_1\r\nX: y", 10, &err), SBX_E_INVAL);
  assert_int_equal(sbx_client_check_header_value("id", "sb_1\nx", 6, &err), SBX_E_INVAL);
  assert_int_equal(sbx_client_check_header_value("token", "ab\0cd", 5, &err), SBX_E_INVAL);
  assert_int_equal(sbx_client_check_header_value("token", "", 0, &err), SBX_E_INVAL);

  /* refused before any I/O: the entry is a port nobody listens on, and a
   * bad id or token never gets as far as a dial */
  sbx_client *c;
  sbx_client_opts o = SBX_CLIENT_OPTS_INIT(.addr = "127.0.0.1:1");
  assert_int_equal(sbx_client_new(&o, &c, &err), 0);
  sbx_sandbox *s = NULL;
  assert_int_equal(sbx_client_attach(c, "sb_1\r\n", "tok", NULL, &s, &err), SBX_E_INVAL);
  assert_int_equal(sbx_client_attach(c, "sb_1", "tok\nen", NULL, &s, &err), SBX_E_INVAL);
  assert_int_equal(sbx_client_attach(c, "sb_1/../x", "tok", NULL, &s, &err), SBX_E_INVAL);
  assert_int_equal(sbx_client_lookup(c, "sb_1\r", "tok", &s, &err), SBX_E_INVAL);
  assert_null(s);
  sbx_client_free(c);
  sbx_client_opts bad = SBX_CLIENT_OPTS_INIT(.addr = "127.0.0.1:1", .token = "a\r\nb");
  assert_int_equal(sbx_client_new(&bad, &c, &err), SBX_E_INVAL);
}

static void test_claim_decode(void **state) {
  (void)state;
  sbxi_claim_result r;
  sbxi_redirect red;
  sbx_error err;
  const char *ok = "{\"id\":\"sb_9f2c4e7a1b3d5f60\",\"token\":\"3c1f0e9a8b7d6c5e4f3a2b1c0d9e8f7a\","
                   "\"deadline\":\"2026-01-01T12:10:00Z\",\"owner_addr\":\"10.0.0.5:7777\",\"future\":{\"x\":1}}";
  assert_int_equal(sbxi_client_parse_claim(ok, strlen(ok), &r, &red, &err), 0);
  assert_int_equal(red.len, 0);
  assert_string_equal(r.id, "sb_9f2c4e7a1b3d5f60");
  assert_string_equal(r.token, "3c1f0e9a8b7d6c5e4f3a2b1c0d9e8f7a");
  assert_string_equal(r.owner_addr, "10.0.0.5:7777");
  assert_string_equal(r.template_digest, "");

  const char *redir = "{\"redirect\":[\"10.0.0.6:7777\",\"https://n7\"],\"require_promoted\":true}";
  assert_int_equal(sbxi_client_parse_claim(redir, strlen(redir), &r, &red, &err), 0);
  assert_int_equal(red.len, 2);
  assert_string_equal(red.addrs[1], "https://n7");
  assert_true(red.require_promoted);
  sbxi_redirect_free(&red);

  const char *bad[] = {"", "[]", "{}", "{\"id\":\"sb_1\"}", "{\"id\":1,\"token\":\"t\"}", "{\"redirect\":\"x\"}",
                       "{\"redirect\":[]}", "{\"redirect\":[1]}", "{\"id\":\"a\",\"token\":\"b\"} x", NULL};
  for (int i = 0; bad[i]; i++) {
    if (sbxi_client_parse_claim(bad[i], strlen(bad[i]), &r, &red, &err) >= 0) fail_msg("accepted %s", bad[i]);
    assert_int_equal(red.len, 0);
  }
}

static void test_error_kinds(void **state) {
  (void)state;
  sbx_error e = {0};
  assert_int_equal(sbx_client_error_kind(&e), SBX_CLIENT_ERR_NONE);
  sbx_err(&e, SBX_E_REMOTE, "claim: 429: node at capacity");
  e.detail = 429;
  assert_int_equal(sbx_client_error_kind(&e), SBX_CLIENT_ERR_API);
  e.detail = SBX_ERR_NOT_FOUND;
  assert_int_equal(sbx_client_error_kind(&e), SBX_CLIENT_ERR_SILKD);
  e.detail = SBX_CLIENT_EXIT_DETAIL(3);
  assert_int_equal(sbx_client_error_kind(&e), SBX_CLIENT_ERR_EXIT);
  assert_int_equal(sbx_client_error_exit_code(&e), 3);
  e.detail = SBX_CLIENT_EXIT_DETAIL(-1);
  assert_int_equal(sbx_client_error_exit_code(&e), -1);
  sbx_err(&e, SBX_E_OS, "dial");
  assert_int_equal(sbx_client_error_kind(&e), SBX_CLIENT_ERR_OTHER);
}

/* ---- tar round trip through memory ---- */
static int to_buf(void *ud, const void *p, size_t n) {
  sbx_error err;
  return sbx_buf_add(ud, p, n, &err);
}

typedef struct {
  const char *p;
  size_t left;
  size_t piece;
} src;

static int from_buf(void *ud, const void **p, size_t *n) {
  src *s = ud;
  if (!s->left) return 0;
  *p = s->p;
  *n = s->left < s->piece ? s->left : s->piece;
  s->p += *n;
  s->left -= *n;
  return 1;
}

static void test_tar_roundtrip(void **state) {
  (void)state;
  char dir[] = "/tmp/sbx-client-tar-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char p[512], q[512];
  snprintf(p, sizeof p, "%s/tree", dir);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/tree/empty", dir);
  assert_int_equal(mkdir(p, 0700), 0);
  snprintf(p, sizeof p, "%s/tree/x.sh", dir);
  FILE *f = fopen(p, "w");
  fputs("#!/bin/sh\necho hi\n", f);
  fclose(f);
  assert_int_equal(chmod(p, 0751), 0);
  snprintf(p, sizeof p, "%s/tree/link", dir);
  assert_int_equal(symlink("x.sh", p), 0);

  sbx_buf tar = SBX_BUF_INIT(64 << 20);
  sbx_error err;
  snprintf(p, sizeof p, "%s/tree/", dir); /* a trailing slash names the same tree */
  if (sbxi_tar_pack(p, to_buf, &tar, &err) < 0) fail_msg("pack: %s", err.msg);
  assert_true(tar.len >= 1024);

  snprintf(q, sizeof q, "%s/out", dir);
  assert_int_equal(mkdir(q, 0755), 0);
  src s = {tar.ptr, tar.len, 100}; /* odd piece size: boundaries carry no meaning */
  if (sbxi_tar_unpack(from_buf, &s, q, &err) < 0) fail_msg("unpack: %s", err.msg);
  struct stat st;
  snprintf(p, sizeof p, "%s/out/tree/x.sh", dir);
  assert_int_equal(lstat(p, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0751);
  assert_int_equal(st.st_size, 18);
  snprintf(p, sizeof p, "%s/out/tree/empty", dir);
  assert_int_equal(lstat(p, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(st.st_mode & 07777, 0700);
  snprintf(p, sizeof p, "%s/out/tree/link", dir);
  assert_int_equal(lstat(p, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  char target[64] = {0};
  assert_int_equal(readlink(p, target, sizeof target - 1), 4);
  assert_string_equal(target, "x.sh");
  sbx_buf_free(&tar);

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* A member escaping the destination is refused. */
static void test_tar_unsafe(void **state) {
  (void)state;
  /* one ustar header for "../evil" (a regular empty file) and the end blocks */
  static char blk[512 * 3];
  memset(blk, 0, sizeof blk);
  strcpy(blk, "../evil");
  memcpy(blk + 100, "0000644", 7);
  memcpy(blk + 108, "0000000", 7);
  memcpy(blk + 116, "0000000", 7);
  memcpy(blk + 124, "00000000000", 11);
  memcpy(blk + 136, "00000000000", 11);
  blk[156] = '0';
  memcpy(blk + 257, "ustar", 6);
  memcpy(blk + 263, "00", 2);
  memset(blk + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += (unsigned char)blk[i];
  snprintf(blk + 148, 8, "%06o", sum);
  char dir[] = "/tmp/sbx-client-tar-XXXXXX";
  assert_non_null(mkdtemp(dir));
  src s = {blk, sizeof blk, sizeof blk};
  sbx_error err;
  assert_true(sbxi_tar_unpack(from_buf, &s, dir, &err) < 0);
  char p[512];
  snprintf(p, sizeof p, "%s/../evil", dir);
  assert_int_not_equal(access(p, F_OK), 0);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_addr_forms),   cmocka_unit_test(test_addr_rejects),  cmocka_unit_test(test_header_values),
      cmocka_unit_test(test_claim_decode), cmocka_unit_test(test_error_kinds),   cmocka_unit_test(test_tar_roundtrip),
      cmocka_unit_test(test_tar_unsafe),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
