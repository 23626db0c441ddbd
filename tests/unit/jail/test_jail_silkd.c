/* Jails with the real silkd as pid 1: clone -> ready, exec through the
 * agent channel, and silkd surviving what its children do to the limits. */
#include <sys/sysmacros.h>

#include <sandbox/agent.h>

#include "jail_test.h"

extern int sbxi_rm_rf_at(int dirfd, const char *name, sbx_error *err);

static jt T;

static int setup(void **state) {
  (void)state;
  if (access(SBX_BUILD_BIN_DIR "/silkd", X_OK) != 0) {
    fprintf(stderr, "silkd not built at %s\n", SBX_BUILD_BIN_DIR "/silkd");
    return -1; /* fail, not skip: CI builds silkd */
  }
  return jt_open(&T) < 0 ? -1 : 0;
}
static int teardown(void **state) {
  (void)state;
  jt_close(&T);
  return 0;
}

static void assert_info(sbx_agent *a) {
  sbx_error err = {0};
  sbx_resp_info info;
  char version[64];
  assert_int_equal(sbx_agent_info(a, &info, version, sizeof version, &err), 0);
  assert_int_equal(info.proto, 2);
}

static void test_exec_through_silkd(void **state) {
  (void)state;
  sbx_instance *s = jt_clone(&T, "sk-exec");
  sbx_agent *a = jt_agent(s);
  char out[4096];
  assert_int_equal(jt_sh(a, "echo hello; hostname; cat /proc/1/comm; exit 7", out, sizeof out), 7);
  assert_string_equal(out, "hello\nsk-exec\nsilkd\n");
  sbx_agent_close(a);
  sbx_error err = {0};
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

/* find, replace and watch served by the jail's silkd: a symlink inside
 * the searched or watched tree leads nowhere (here to the sandbox's own
 * /etc and /tmp), and replace refuses a symlink before touching a file. */
struct jail_watch {
  sbx_agent *other; /* makes the changes while the watch runs */
  char seen[4096];
};

static void jw_ready(void *ud) {
  struct jail_watch *w = ud;
  char out[256];
  assert_int_equal(jt_sh(w->other, "echo x > /tmp/outside.txt; mkdir /work/t/newdir; echo y > /work/t/newdir/in.txt",
                         out, sizeof out),
                   0);
}

static int jw_event(void *ud, const sbx_resp_event *ev) {
  struct jail_watch *w = ud;
  size_t l = strlen(w->seen);
  snprintf(w->seen + l, sizeof w->seen - l, "%s\n", ev->path);
  return strcmp(ev->path, "/work/t/newdir/in.txt") == 0;
}

static int jf_match(void *ud, const sbx_resp_match *m) {
  size_t l = strlen(ud);
  snprintf((char *)ud + l, 4096 - l, "%s:%llu\n", m->file, (unsigned long long)m->line);
  return 0;
}

static void test_find_replace_watch_in_jail(void **state) {
  (void)state;
  sbx_instance *s = jt_clone(&T, "sk-find");
  sbx_agent *a = jt_agent(s);
  char out[4096];
  assert_int_equal(jt_sh(a, "mkdir -p /work/t && cd /work/t && echo 'root:x:0:0 in the tree' > mine.txt && "
                            "ln -s /etc etc && ln -s /etc/passwd passwd && ln -s / up && ln -s /tmp tmp",
                         out, sizeof out),
                   0);
  char got[4096] = "";
  sbx_find_opts fo = SBX_FIND_OPTS_INIT(.path = "/work/t", .pattern = "^root:", .on_match = jf_match, .ud = got);
  sbx_error err = {0};
  assert_int_equal(sbx_agent_find(a, &fo, &err), 0);
  assert_string_equal(got, "/work/t/mine.txt:1\n");
  const char *files[] = {"/work/t/mine.txt", "/work/t/passwd"};
  sbx_replace_opts ro = SBX_REPLACE_OPTS_INIT(.files = files, .nfiles = 2, .pattern = "root", .replacement = "toor");
  assert_int_equal(sbx_agent_replace(a, &ro, &err), SBX_E_REMOTE);
  assert_int_equal(err.detail, SBX_ERR_BAD_REQUEST);
  assert_int_equal(jt_sh(a, "head -c 4 /work/t/mine.txt; head -c 4 /etc/passwd", out, sizeof out), 0);
  assert_string_equal(out, "rootroot");
  ro.nfiles = 1;
  assert_int_equal(sbx_agent_replace(a, &ro, &err), 0);
  assert_int_equal(jt_sh(a, "head -c 4 /work/t/mine.txt", out, sizeof out), 0);
  assert_string_equal(out, "toor");
  struct jail_watch w = {.other = jt_agent(s)};
  sbx_watch_opts wo = SBX_WATCH_OPTS_INIT(.path = "/work/t", .recursive = true, .on_ready = jw_ready,
                                          .on_event = jw_event, .ud = &w);
  assert_int_equal(sbx_agent_watch(a, &wo, &err), 0); /* unusable now: the watch was left running */
  assert_null(strstr(w.seen, "outside"));
  assert_non_null(strstr(w.seen, "/work/t/newdir\n"));
  sbx_agent_close(w.other);
  sbx_agent_close(a);
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

static void test_silkd_survives_oom_and_fork_bomb(void **state) {
  (void)state;
  sbx_instance *s = jt_clone(&T, "sk-limits");
  sbx_agent *a = jt_agent(s);
  char out[4096];
  assert_int_equal(jt_sh(a, "exec python3 -c 'b=[]\nwhile True: b.append(bytearray(32<<20))'", out, sizeof out),
                   137);
  assert_info(a);
  int code = jt_sh(a,
                 "python3 -c '\n"
                 "import os,errno,signal\n"
                 "kids=[]\n"
                 "while True:\n"
                 "  try: pid=os.fork()\n"
                 "  except OSError as e: err=errno.errorcode[e.errno]; break\n"
                 "  if pid==0: os.execv(\"/bin/sleep\",[\"sleep\",\"1000\"])\n"
                 "  kids.append(pid)\n"
                 "for k in kids: os.kill(k,signal.SIGKILL)\n"
                 "for k in kids: os.waitpid(k,0)\n"
                 "print(err)\n"
                 "'",
                 out, sizeof out);
  assert_int_equal(code, 0);
  assert_string_equal(out, "EAGAIN\n");
  assert_info(a);
  sbx_agent_close(a);
  sbx_error err = {0};
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

/* Whether this process may lower an OOM score (CAP_SYS_RESOURCE): the
 * driver then exempts pid 1 from the OOM killer. */
static bool can_exempt_from_oom(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long eff = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "CapEff: %llx", &eff) == 1) break;
  if (f) fclose(f);
  return (eff >> 24) & 1; /* CAP_SYS_RESOURCE */
}

/* silkd answers, the sandbox's own OOM scores are as the driver set them
 * (pid 1 exempt where the host could, every workload back at 0), and a
 * write that fits the layer works again once the big file is gone. */
static void assert_usable_after_big_write(sbx_instance *s) {
  sbx_agent *a = jt_agent(s);
  assert_info(a);
  char out[4096], want[64];
  assert_int_equal(jt_sh(a, "cat /proc/1/oom_score_adj /proc/self/oom_score_adj; rm -f /big /tmp/big; "
                            "head -c 1M /dev/zero > /small && wc -c < /small",
                         out, sizeof out),
                   0);
  snprintf(want, sizeof want, "%s\n0\n1048576\n", can_exempt_from_oom() ? "-1000" : "0");
  assert_string_equal(out, want);
  sbx_agent_close(a);
}

/* 700 MiB into a small sandbox (512 MiB, its writable layer charged to
 * memory) from inside, by a plain writer, to / and to /tmp: each gets
 * ENOSPC before the memory limit, and nothing is killed. */
static void test_big_write_gets_enospc(void **state) {
  (void)state;
  sbx_instance *s = jt_clone(&T, "sk-enospc");
  sbx_agent *a = jt_agent(s);
  char out[4096];
  assert_int_equal(jt_sh(a,
                         "for f in /big /tmp/big; do head -c 700M /dev/zero > $f 2>/dev/null; echo $f $?; "
                         "rm -f $f; done",
                         out, sizeof out),
                   0);
  assert_string_equal(out, "/big 1\n/tmp/big 1\n");
  sbx_agent_close(a);
  assert_usable_after_big_write(s);
  sbx_error err = {0};
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

/* A ustar header for one regular file of size bytes. */
static void tar_header(char h[512], const char *name, unsigned long long size) {
  memset(h, 0, 512);
  snprintf(h, 100, "%s", name);
  snprintf(h + 100, 8, "%07o", 0644);
  snprintf(h + 108, 8, "%07o", 0);
  snprintf(h + 116, 8, "%07o", 0);
  snprintf(h + 124, 12, "%011llo", size);
  snprintf(h + 136, 12, "%011o", 0);
  h[156] = '0';
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += (unsigned char)h[i];
  snprintf(h + 148, 8, "%06o", sum);
}

/* The push of the hardening issue: 700 MiB through fs_push into a small
 * sandbox. The push fails (ENOSPC), silkd, which writes the files itself,
 * survives, and the sandbox stays usable. */
static void test_big_push_fails_silkd_survives(void **state) {
  (void)state;
  sbx_instance *s = jt_clone(&T, "sk-bigpush");
  sbx_agent *a = jt_agent(s);
  const unsigned long long size = 700ull << 20;
  sbx_error err = {0};
  sbx_wire_req r = {.op = SBX_OP_FS_PUSH};
  r.u.fs_push.dest = "/";
  assert_int_equal(sbx_agent_send(a, &r, &err), 0);
  static char chunk[1 << 20];
  tar_header(chunk, "big", size);
  int rc = sbx_agent_upload_write(a, chunk, 512, &err);
  memset(chunk, 0, sizeof chunk);
  for (unsigned long long sent = 0; rc == 0 && sent < size + 1024; sent += sizeof chunk)
    rc = sbx_agent_upload_write(a, chunk, sizeof chunk, &err);
  if (rc == 0) rc = sbx_agent_upload_end(a, &err);
  assert_true(rc < 0);
  assert_non_null(strstr(err.msg, "No space left on device"));
  sbx_agent_close(a);
  assert_usable_after_big_write(s);
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

/* silkd is static in a normal build but dynamic under the sanitizers; a
 * root of its own then needs silkd's loader and libraries at the same paths. */
static void add_silkd_deps(const char *root) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "ldd %s 2>/dev/null | grep -o '/[^ ]*' | while read -r f; do cp --parents -L \"$f\" %s; done; true",
           SBX_BUILD_BIN_DIR "/silkd", root);
  assert_int_equal(system(cmd), 0);
}

/* A directory template with nothing but one file: silkd is exec'd from the
 * host through an fd, so even an empty root gets a working agent. */
static void test_directory_template(void **state) {
  (void)state;
  sbx_error err = {0};
  char root[128];
  snprintf(root, sizeof root, JT_STATE "/dirtpl-%d", (int)getpid());
  mkdir(root, 0755);
  char file[192];
  snprintf(file, sizeof file, "%s/hello.txt", root);
  FILE *f = fopen(file, "w");
  fputs("from the template\n", f);
  fclose(f);
  add_silkd_deps(root);
  /* a device node the template carries: /dev/null's numbers, so that if it
   * did open, nothing would be harmed */
  char node[192];
  snprintf(node, sizeof node, "%s/disk", root);
  assert_int_equal(mknod(node, S_IFCHR | 0666, makedev(1, 3)), 0);
  char name[64];
  snprintf(name, sizeof name, "dirtpl-%d", (int)getpid());
  sbx_template_spec ts = SBX_TEMPLATE_SPEC_INIT(.name = name, .path = root);
  sbx_template *t = NULL;
  assert_int_equal(sbx_template_prepare(T.drv, &ts, &t, &err), 0);
  sbx_golden *g = NULL;
  assert_int_equal(sbx_golden_build(T.drv, t, NULL, &g, &err), 0);
  sbx_clone_spec spec;
  sbx_clone_spec_init(&spec);
  spec.id = "sk-dir";
  sbx_instance *s = NULL;
  assert_int_equal(sbx_sandbox_clone(T.drv, g, &spec, &s, &err), 0);
  sbx_agent *a = jt_agent(s);
  sbx_buf b = SBX_BUF_INIT(4096);
  assert_int_equal(sbx_agent_read_file(a, "/hello.txt", &b, &err), 0);
  assert_string_equal(b.ptr, "from the template\n");
  sbx_buf_free(&b);
  assert_int_equal(sbx_agent_write_file(a, "/hello.txt", "changed\n", 8, -1, &err), 0);
  sbx_wire_file_info fi;
  assert_int_equal(sbx_agent_stat(a, "/etc/shadow", &fi, &err), SBX_E_REMOTE);
  /* the template's device node exists but cannot be opened (nodev, and the
   * devices cgroup); the jail's own /dev/null works (test_jail_isolation's
   * scripts redirect to it) */
  sbx_buf b2 = SBX_BUF_INIT(4096);
  assert_int_equal(sbx_agent_stat(a, "/disk", &fi, &err), 0);
  assert_int_equal(sbx_agent_read_file(a, "/disk", &b2, &err), SBX_E_REMOTE);
  assert_non_null(strstr(err.msg, "ermission denied"));
  sbx_buf_free(&b2);
  sbx_agent_close(a);
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
  /* the template itself is untouched */
  char buf[64] = "";
  f = fopen(file, "r");
  assert_non_null(fgets(buf, sizeof buf, f));
  fclose(f);
  assert_string_equal(buf, "from the template\n");
  sbx_golden_release(T.drv, g);
  sbx_template_release(T.drv, t);
  int rfd = open(JT_STATE, O_PATH | O_DIRECTORY);
  assert_int_equal(sbxi_rm_rf_at(rfd, strrchr(root, '/') + 1, &err), 0);
  close(rfd);
  int tfd = open(JT_STATE "/templates", O_PATH | O_DIRECTORY);
  char reg[96];
  snprintf(reg, sizeof reg, "%s/rootfs", name);
  unlinkat(tfd, reg, 0);
  unlinkat(tfd, name, AT_REMOVEDIR);
  close(tfd);
}

static void make_tar(const char *path, const char *members_py) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "python3 -c '\n"
           "import tarfile,io\n"
           "t=tarfile.open(\"%s\",\"w:gz\")\n"
           "def f(n,data=b\"\",**kw):\n"
           "  i=tarfile.TarInfo(n); i.size=len(data); [setattr(i,k,v) for k,v in kw.items()]\n"
           "  t.addfile(i,io.BytesIO(data))\n"
           "%s\n"
           "t.close()'",
           path, members_py);
  assert_int_equal(system(cmd), 0);
}

static void test_archive_template(void **state) {
  (void)state;
  sbx_error err = {0};
  char tar[128], name[64];
  snprintf(tar, sizeof tar, JT_STATE "/tpl-%d.tar.gz", (int)getpid());
  snprintf(name, sizeof name, "tar-%d", (int)getpid());
  make_tar(tar, "f(\"./etc\",type=tarfile.DIRTYPE,mode=0o755)\n"
                "f(\"./etc/motd\",b\"hello from tar\\n\",mode=0o644)\n"
                "f(\"./etc/motd.link\",type=tarfile.SYMTYPE,linkname=\"motd\")\n"
                "f(\"./etc/motd.hard\",type=tarfile.LNKTYPE,linkname=\"./etc/motd\")\n"
                "f(\"./dev/console\",type=tarfile.CHRTYPE,devmajor=5,devminor=1)");
  sbx_template_spec ts = SBX_TEMPLATE_SPEC_INIT(.name = name, .archive = tar);
  sbx_template *t = NULL;
  assert_int_equal(sbx_template_prepare(T.drv, &ts, &t, &err), 0);
  char rootfs[256];
  snprintf(rootfs, sizeof rootfs, JT_STATE "/templates/%s/rootfs", name);
  add_silkd_deps(rootfs);
  sbx_golden *g = NULL;
  assert_int_equal(sbx_golden_build(T.drv, t, NULL, &g, &err), 0);
  sbx_clone_spec spec;
  sbx_clone_spec_init(&spec);
  spec.id = "sk-tar";
  sbx_instance *s = NULL;
  assert_int_equal(sbx_sandbox_clone(T.drv, g, &spec, &s, &err), 0);
  sbx_agent *a = jt_agent(s);
  sbx_buf b = SBX_BUF_INIT(4096);
  assert_int_equal(sbx_agent_read_file(a, "/etc/motd.link", &b, &err), 0);
  assert_string_equal(b.ptr, "hello from tar\n");
  sbx_buf_reset(&b);
  assert_int_equal(sbx_agent_read_file(a, "/etc/motd.hard", &b, &err), 0);
  assert_string_equal(b.ptr, "hello from tar\n");
  sbx_buf_free(&b);
  sbx_agent_close(a);
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
  sbx_golden_release(T.drv, g);
  sbx_template_release(T.drv, t);

  /* unsafe archives are refused whole and leave no template */
  char bad[64];
  snprintf(bad, sizeof bad, "bad-%d", (int)getpid());
  sbx_template_spec bs = SBX_TEMPLATE_SPEC_INIT(.name = bad, .archive = tar);
  make_tar(tar, "f(\"ok\",b\"x\")\nf(\"../evil\",b\"x\")");
  assert_int_equal(sbx_template_prepare(T.drv, &bs, &t, &err), SBX_E_PARSE);
  assert_non_null(strstr(err.msg, "../evil"));
  make_tar(tar, "f(\"esc\",type=tarfile.SYMTYPE,linkname=\"/tmp\")\nf(\"esc/pwned\",b\"x\")");
  assert_true(sbx_template_prepare(T.drv, &bs, &t, &err) < 0);
  assert_int_equal(err.os_errno, ELOOP);
  assert_int_not_equal(access("/tmp/pwned", F_OK), 0);
  char p[256];
  snprintf(p, sizeof p, JT_STATE "/templates/%s", bad);
  assert_int_not_equal(access(p, F_OK), 0);

  unlink(tar);
  int tfd = open(JT_STATE "/templates", O_PATH | O_DIRECTORY);
  assert_int_equal(sbxi_rm_rf_at(tfd, name, &err), 0);
  close(tfd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exec_through_silkd),
      cmocka_unit_test(test_find_replace_watch_in_jail),
      cmocka_unit_test(test_silkd_survives_oom_and_fork_bomb),
      cmocka_unit_test(test_big_write_gets_enospc),
      cmocka_unit_test(test_big_push_fails_silkd_survives),
      cmocka_unit_test(test_directory_template),
      cmocka_unit_test(test_archive_template),
  };
  return cmocka_run_group_tests_name("jail_silkd", tests, setup, teardown);
}
