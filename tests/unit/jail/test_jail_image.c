/* Jail images (fork, checkpoint, branch, promote): a file written before
 * a snapshot is in a sandbox restored from it, one written after is not; a
 * chain of images keeps every ancestor's files and deletions, also past
 * the depth where it is flattened, and outlives the images it came from;
 * a hibernated (frozen) jail's processes stop and continue; a damaged
 * image is refused. Real jails running the real silkd. */
#include <signal.h>
#include <sys/wait.h>

#include "jail_test.h"
#include "template/layers.h"

static jt T;
static char imgdir[128];

static int setup(void **state) {
  (void)state;
  snprintf(imgdir, sizeof imgdir, JT_STATE "/images-%d", (int)getpid());
  mkdir(JT_STATE, 0700);
  mkdir(imgdir, 0700);
  return jt_open(&T) < 0 ? -1 : 0;
}
static int teardown(void **state) {
  (void)state;
  jt_close(&T);
  int fd = open(JT_STATE, O_PATH | O_DIRECTORY);
  sbxi_rm_rf_at(fd, strrchr(imgdir, '/') + 1, NULL);
  close(fd);
  return 0;
}

static void img_path(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", imgdir, name); }

static sbx_instance *restore(const char *img, const char *id) {
  sbx_error err = {0};
  sbx_clone_spec spec;
  sbx_clone_spec_init(&spec);
  spec.id = id;
  sbx_instance *s = NULL;
  char p[256];
  img_path(p, sizeof p, img);
  if (sbx_sandbox_restore(T.drv, p, &spec, &s, &err) < 0) fail_msg("restore %s: %s", img, err.msg);
  return s;
}

static void snapshot(sbx_instance *s, const char *img) {
  sbx_error err = {0};
  char p[256];
  img_path(p, sizeof p, img);
  if (sbx_sandbox_snapshot(s, p, &err) < 0) fail_msg("snapshot %s: %s", img, err.msg);
}

static void sh_ok(sbx_instance *s, const char *script, const char *want) {
  sbx_agent *a = jt_agent(s);
  char out[4096];
  int code = jt_sh(a, script, out, sizeof out);
  sbx_agent_close(a);
  if (code != 0) fail_msg("%s: exit %d", script, code);
  if (want && strcmp(out, want) != 0) fail_msg("%s: got [%s], want [%s]", script, out, want);
}

static void destroy(sbx_instance *s) {
  sbx_error err = {0};
  assert_int_equal(sbx_sandbox_destroy(s, &err), 0);
}

static void test_keeps_declared(void **state) {
  (void)state;
  assert_string_equal(sbx_driver_pause_keeps(T.drv), "memory");
  assert_string_equal(sbx_driver_image_keeps(T.drv), "filesystem");
}

static void test_before_after_and_branch_of_branch(void **state) {
  (void)state;
  sbx_instance *a = jt_clone(&T, "img-a");
  sh_ok(a, "echo one > /root/before && mkdir -p /srv/d && echo x > /srv/d/f && rm -f /etc/hostname", NULL);
  snapshot(a, "ck1");
  sh_ok(a, "echo two > /root/after", NULL);
  sbx_instance *b = restore("ck1", "img-b");
  sh_ok(b, "cat /root/before /srv/d/f; test ! -e /root/after && test ! -e /etc/hostname && echo ok", "one\nx\nok\n");
  /* a branch of the branch sees both ancestors' files */
  sh_ok(b, "echo three > /root/b-only && rm /srv/d/f", NULL);
  snapshot(b, "ck2");
  sbx_instance *c = restore("ck2", "img-c");
  sh_ok(c, "cat /root/before /root/b-only; test ! -e /srv/d/f && test ! -e /root/after && echo ok",
        "one\nthree\nok\n");
  /* independent of each other */
  sh_ok(c, "echo c > /root/c-only", NULL);
  sh_ok(b, "test ! -e /root/c-only && echo ok", "ok\n");
  sh_ok(a, "test ! -e /root/b-only && echo ok", "ok\n");
  /* a restored sandbox runs on its own copy: its image can go meanwhile */
  int fd = open(imgdir, O_PATH | O_DIRECTORY);
  assert_int_equal(sbxi_rm_rf_at(fd, "ck2", NULL), 0);
  close(fd);
  sh_ok(c, "cat /root/before", "one\n");
  destroy(a);
  destroy(b);
  destroy(c);
  char p[256];
  snprintf(p, sizeof p, "%s/.images", T.run_dir);
  assert_int_equal(jt_count_dir(p), 0); /* the copies went with their sandboxes */
}

static void test_long_chain_flattened_and_self_contained(void **state) {
  (void)state;
  sbx_instance *s = jt_clone(&T, "chain-0");
  char img[32], id[32], prev[32] = "";
  for (int i = 1; i <= 6; i++) {
    char script[256];
    snprintf(script, sizeof script, "echo %d > /root/gen%d && rm -f /root/gen%d", i, i, i - 2);
    sh_ok(s, script, NULL);
    snprintf(img, sizeof img, "chain%d", i);
    snapshot(s, img);
    destroy(s);
    if (prev[0]) {
      /* an image outlives the one it came from */
      char p[256];
      img_path(p, sizeof p, prev);
      int fd = open(imgdir, O_PATH | O_DIRECTORY);
      assert_int_equal(sbxi_rm_rf_at(fd, prev, NULL), 0);
      close(fd);
    }
    snprintf(prev, sizeof prev, "%s", img);
    snprintf(id, sizeof id, "chain-%d", i);
    s = restore(img, id);
  }
  sh_ok(s, "cat /root/gen5 /root/gen6; ls /root | grep -c gen", "5\n6\n2\n");
  destroy(s);
}

static long read_counter(sbx_instance *s) {
  char p[128], buf[32] = "";
  snprintf(p, sizeof p, "/proc/%d/root/tmp/counter", (int)sbx_instance_pid(s));
  FILE *f = fopen(p, "r");
  if (!f) return -1;
  if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
  fclose(f);
  return atol(buf);
}

static void test_counter_frozen_while_hibernated(void **state) {
  (void)state;
  sbx_error err = {0};
  sbx_instance *s = jt_clone(&T, "img-count");
  sh_ok(s, "nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.n; mv /tmp/counter.n /tmp/counter; "
           "sleep 0.02; done' >/dev/null 2>&1 &",
        NULL);
  while (read_counter(s) < 3) usleep(20000);
  assert_false(sbx_sandbox_is_paused(s));
  assert_int_equal(sbx_sandbox_pause(s, &err), 0);
  assert_true(sbx_sandbox_is_paused(s));
  long c1 = read_counter(s);
  usleep(300000);
  assert_int_equal(read_counter(s), c1);
  /* an image of a hibernated jail leaves it hibernated */
  snapshot(s, "frozen");
  assert_true(sbx_sandbox_is_paused(s));
  usleep(100000);
  assert_int_equal(read_counter(s), c1);
  assert_int_equal(sbx_sandbox_resume(s, &err), 0);
  assert_false(sbx_sandbox_is_paused(s));
  for (int i = 0; i < 500 && read_counter(s) <= c1; i++) usleep(20000);
  assert_true(read_counter(s) > c1);
  /* processes do not carry over into an image: the file does */
  sbx_instance *r = restore("frozen", "img-count-r");
  char out[64];
  snprintf(out, sizeof out, "%ld\n", c1);
  sh_ok(r, "cat /tmp/counter 2>/dev/null || echo none", NULL);
  sh_ok(r, "pgrep -c sleep || true", "0\n");
  destroy(r);
  destroy(s);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_damaged_image_refused(void **state) {
  (void)state;
  sbx_error err = {0};
  sbx_instance *s = jt_clone(&T, "img-dmg");
  snapshot(s, "dmg");
  destroy(s);
  char p[256], m[300];
  img_path(p, sizeof p, "dmg");
  snprintf(m, sizeof m, "%s/layers", p);
  sbx_clone_spec spec;
  sbx_clone_spec_init(&spec);
  spec.id = "img-dmg2";
  sbx_instance *r = NULL;
  write_file(m, "P \nL /nonexistent"); /* truncated: no final newline */
  assert_int_equal(sbx_sandbox_restore(T.drv, p, &spec, &r, &err), SBX_E_PARSE);
  write_file(m, "garbage\n");
  assert_int_equal(sbx_sandbox_restore(T.drv, p, &spec, &r, &err), SBX_E_PARSE);
  write_file(m, "P \nL /nonexistent/layer\n");
  assert_int_equal(sbx_sandbox_restore(T.drv, p, &spec, &r, &err), SBX_E_NOTFOUND);
  unlink(m); /* an image without its commit pointer is not an image */
  assert_int_equal(sbx_sandbox_restore(T.drv, p, &spec, &r, &err), SBX_E_NOTFOUND);
  assert_null(r);
  /* an existing directory is never overwritten */
  s = jt_clone(&T, "img-dmg3");
  assert_int_equal(sbx_sandbox_snapshot(s, p, &err), SBX_E_OS);
  destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keeps_declared),
      cmocka_unit_test(test_before_after_and_branch_of_branch),
      cmocka_unit_test(test_long_chain_flattened_and_self_contained),
      cmocka_unit_test(test_counter_frozen_while_hibernated),
      cmocka_unit_test(test_damaged_image_refused),
  };
  return cmocka_run_group_tests_name("jail_image", tests, setup, teardown);
}
