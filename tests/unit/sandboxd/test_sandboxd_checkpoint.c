/* test_sandboxd_checkpoint: checkpoints (create, list, delete, branch, a
 * branch of a branch), tenant scoping, a damaged record, a kill -9 during
 * an export, the TTL sweep, promote with its content digest computed here
 * independently (coreutils' sha256sum over the spec's canonical stream),
 * the claim of a promoted key, and template delete. Real jails and silkd. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include <sys/mount.h>

#include "sbxd_test.h"

#define ROOT "root-token-for-checkpoint-test"
#define ACME "tenant-token-acme"
#define BETA "tenant-token-beta"
static const char *CONFIG =
    "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\",\"api_token\":\"" ROOT "\","
    "\"tenants\":[{\"name\":\"acme\",\"token\":\"" ACME "\"},{\"name\":\"beta\",\"token\":\"" BETA "\"}],"
    "\"checkpoint_ttl_hours\":1,\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"pools\":[]}";
static struct sbxd_proc P;

static int setup(void **state) {
  (void)state;
  if (geteuid() != 0) return 0;
  sbxd_prepare(&P, CONFIG);
  return sbxd_start(&P) < 0 ? -1 : 0;
}
/* The store on a 1 MiB tmpfs of the test's own, to fill it. */
static char small_store[300];
static int setup_full_disk(void **state) {
  (void)state;
  if (geteuid() != 0) return 0;
  char cfg[1024];
  snprintf(small_store, sizeof small_store, "/tmp/sbx-ck-full-%d", (int)getpid());
  mkdir(small_store, 0700);
  if (mount("tmpfs", small_store, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0700") < 0) return -1;
  snprintf(cfg, sizeof cfg,
           "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\",\"api_token\":\"" ROOT
           "\",\"checkpoint_dir\":\"%s\",\"jail\":{\"cgroup_root\":\"@CGROUP@\"},\"pools\":[]}",
           small_store);
  sbxd_prepare(&P, cfg);
  return sbxd_start(&P) < 0 ? -1 : 0;
}
static int teardown_full_disk(void **state);

static int teardown(void **state) {
  (void)state;
  if (geteuid() != 0) return 0;
  sbxd_stop(&P, SIGTERM);
  sbxd_jail_cleanup(&P);
  return 0;
}

static json_t *call(const char *method, const char *path, const char *token, const char *body, int *status) {
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, method, path, token, body, &r), 0);
  *status = r.status;
  json_t *v = r.body ? json_loads(r.body, 0, NULL) : NULL;
  if (r.status >= 500) fprintf(stderr, "%s %s: %d %s\n", method, path, r.status, r.body ? r.body : "");
  http_resp_free(&r);
  return v;
}

static void claim_as(const char *token, const char *tmpl, struct sbxd_claim *c, json_t **out) {
  char body[128];
  snprintf(body, sizeof body, "{\"template\":\"%s\"}", tmpl);
  int st;
  json_t *v = call("POST", "/v1/claim", token, body, &st);
  assert_int_equal(st, 200);
  snprintf(c->id, sizeof c->id, "%s", json_string_value(json_object_get(v, "id")));
  snprintf(c->token, sizeof c->token, "%s", json_string_value(json_object_get(v, "token")));
  if (out) *out = v;
  else json_decref(v);
}

static void sh(const struct sbxd_claim *c, const char *script, const char *want) {
  json_t *b = json_pack("{s:[s,s,s]}", "argv", "/bin/sh", "-c", script);
  char *body = json_dumps(b, JSON_COMPACT);
  json_decref(b);
  int st;
  json_t *v = sbxd_exec(&P, c, body, &st);
  free(body);
  assert_int_equal(st, 200);
  if (want && strcmp(json_string_value(json_object_get(v, "stdout")), want) != 0)
    fail_msg("%s: got [%s] want [%s]", script, json_string_value(json_object_get(v, "stdout")), want);
  json_decref(v);
}

/* checkpoint of c as token (node) with c's token as proof; its id */
static void checkpoint(const char *node, const struct sbxd_claim *c, const char *name, char *id, size_t cap) {
  char path[128], body[160];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/checkpoint", c->id);
  snprintf(body, sizeof body, "{\"token\":\"%s\",\"name\":\"%s\"}", c->token, name);
  int st;
  json_t *v = call("POST", path, node, body, &st);
  assert_int_equal(st, 200);
  json_t *rec = json_object_get(v, "checkpoint");
  assert_string_equal(json_string_value(json_object_get(rec, "sandbox_id")), c->id);
  assert_string_equal(json_string_value(json_object_get(rec, "name")), name);
  assert_string_equal(json_string_value(json_object_get(v, "keeps")), "filesystem");
  snprintf(id, cap, "%s", json_string_value(json_object_get(rec, "id")));
  json_decref(v);
}

static void branch(const char *node, const char *ck, struct sbxd_claim *c) {
  char path[128];
  snprintf(path, sizeof path, "/v1/checkpoints/%s/claim", ck);
  int st;
  json_t *v = call("POST", path, node, NULL, &st);
  assert_int_equal(st, 200);
  assert_string_equal(json_string_value(json_object_get(v, "from_checkpoint")), ck);
  snprintf(c->id, sizeof c->id, "%s", json_string_value(json_object_get(v, "id")));
  snprintf(c->token, sizeof c->token, "%s", json_string_value(json_object_get(v, "token")));
  json_decref(v);
  /* its row says where it came from (SandboxRow.from_checkpoint) */
  snprintf(path, sizeof path, "/v1/sandboxes/%s", c->id);
  v = call("GET", path, ROOT, NULL, &st);
  assert_int_equal(st, 200);
  assert_string_equal(json_string_value(json_object_get(v, "from_checkpoint")), ck);
  json_decref(v);
}

static size_t list_count(const char *token) {
  int st;
  json_t *v = call("GET", "/v1/checkpoints", token, NULL, &st);
  assert_int_equal(st, 200);
  size_t n = json_array_size(json_object_get(v, "checkpoints"));
  json_decref(v);
  return n;
}

static void test_checkpoint_branch_tree_and_scoping(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  struct sbxd_claim a, b, c;
  claim_as(ACME, "host", &a, NULL);
  sh(&a, "echo before > /root/f1", NULL);
  char ck1[32], ck2[32], path[128];
  /* bad input: no proof from a tenant, a bad name, a wrong proof */
  int st;
  snprintf(path, sizeof path, "/v1/sandboxes/%s/checkpoint", a.id);
  json_decref(call("POST", path, ACME, "{}", &st));
  assert_int_equal(st, 400);
  char body[160];
  snprintf(body, sizeof body, "{\"token\":\"%s\",\"name\":\"bad name!\"}", a.token);
  json_decref(call("POST", path, ACME, body, &st));
  assert_int_equal(st, 400);
  json_decref(call("POST", path, ACME, "{\"token\":\"0123456789abcdef0123456789abcdef\"}", &st));
  assert_int_equal(st, 404);
  checkpoint(ACME, &a, "first", ck1, sizeof ck1);
  sh(&a, "echo after > /root/f2", NULL);
  branch(ACME, ck1, &b);
  sh(&b, "cat /root/f1; test ! -e /root/f2 && echo ok", "before\nok\n");
  sh(&b, "echo branch > /root/f3", NULL);
  checkpoint(ACME, &b, "second", ck2, sizeof ck2);
  branch(ACME, ck2, &c);
  sh(&c, "cat /root/f1 /root/f3; test ! -e /root/f2 && echo ok", "before\nbranch\nok\n");
  /* listings: the owner sees both, newest first; another tenant none */
  int s2;
  json_t *v = call("GET", "/v1/checkpoints", ACME, NULL, &s2);
  json_t *arr = json_object_get(v, "checkpoints");
  assert_int_equal(json_array_size(arr), 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(arr, 0), "tenant")), "acme");
  assert_string_equal(json_string_value(json_object_get(json_array_get(arr, 0), "name")), "second");
  json_decref(v);
  assert_int_equal(list_count(BETA), 0);
  assert_int_equal(list_count(ROOT), 2);
  /* another tenant cannot delete it, but the id is a capability to branch */
  snprintf(path, sizeof path, "/v1/checkpoints/%s", ck1);
  assert_int_equal(sbxd_status(P.port, "DELETE", path, BETA, NULL), 404);
  struct sbxd_claim d;
  branch(BETA, ck1, &d);
  sh(&d, "cat /root/f1", "before\n");
  assert_int_equal(sbxd_status(P.port, "DELETE", path, ACME, NULL), 204);
  assert_int_equal(sbxd_status(P.port, "DELETE", path, ACME, NULL), 404);
  snprintf(path, sizeof path, "/v1/checkpoints/%s/claim", ck1);
  assert_int_equal(sbxd_status(P.port, "POST", path, ACME, NULL), 404);
  assert_int_equal(sbxd_status(P.port, "POST", "/v1/checkpoints/ck_zz/claim", ACME, NULL), 404);
  assert_int_equal(list_count(ACME), 1);
  /* the branch of the deleted record keeps running on its own copy */
  sh(&b, "cat /root/f1", "before\n");
}

static void test_damaged_record_and_ttl(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  struct sbxd_claim a;
  claim_as(ROOT, "host", &a, NULL);
  char ck[32], path[512];
  checkpoint(ROOT, &a, "x", ck, sizeof ck);
  snprintf(path, sizeof path, "%s/data/checkpoints/%s/export/layers", P.dir, ck);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("P \nL /nowhere", f); /* truncated */
  fclose(f);
  char url[128];
  snprintf(url, sizeof url, "/v1/checkpoints/%s/claim", ck);
  int st;
  json_t *v = call("POST", url, ROOT, NULL, &st);
  assert_int_equal(st, 500);
  assert_non_null(strstr(json_string_value(json_object_get(v, "error")), "damaged"));
  json_decref(v);
  assert_int_equal(sbxd_status(P.port, "GET", "/healthz", NULL, NULL), 200); /* keeps serving */
  /* TTL: a record older than checkpoint_ttl_hours goes at the next start */
  char ck2[32];
  checkpoint(ROOT, &a, "old", ck2, sizeof ck2);
  snprintf(path, sizeof path, "%s/data/checkpoints/%s/meta.json", P.dir, ck2);
  char text[2048];
  f = fopen(path, "r");
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  char *at = strstr(text, "\"created_at\":\"");
  assert_non_null(at);
  memcpy(at + 14, "2000", 4);
  f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  assert_int_equal(list_count(ROOT), 2);
  assert_int_equal(sbxd_stop(&P, SIGTERM), 0);
  assert_int_equal(sbxd_start(&P), 0);
  assert_int_equal(list_count(ROOT), 1);
}

static void test_kill9_mid_export_leaves_no_record(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  struct sbxd_claim a;
  claim_as(ROOT, "host", &a, NULL);
  sh(&a, "mkdir /root/many && cd /root/many && for i in $(seq 1 3000); do echo $i > f$i; done; "
         "dd if=/dev/urandom of=/root/big bs=1M count=64 2>/dev/null",
     NULL);
  int fd = sbxd_connect(P.port);
  char req[512];
  int n = snprintf(req, sizeof req,
                   "POST /v1/sandboxes/%s/checkpoint HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ROOT
                   "\r\nContent-Length: 2\r\n\r\n{}",
                   a.id);
  assert_int_equal(write_all_fd(fd, req, (size_t)n), 0);
  char store[320];
  snprintf(store, sizeof store, "%s/data/checkpoints", P.dir);
  bool seen = false;
  for (int i = 0; i < 5000 && !seen; i++) {
    DIR *d = opendir(store);
    struct dirent *de;
    while (d && (de = readdir(d))) seen |= strncmp(de->d_name, "ck_", 3) == 0;
    if (d) closedir(d);
    if (!seen) usleep(500);
  }
  assert_true(seen);
  assert_int_equal(sbxd_stop(&P, SIGKILL), 128 + SIGKILL);
  close(fd);
  assert_int_equal(sbxd_start(&P), 0);
  assert_int_equal(list_count(ROOT), 0);
  DIR *d = opendir(store);
  int left = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) left += de->d_name[0] != '.';
  if (d) closedir(d);
  assert_int_equal(left, 0);
  sh(&a, "echo alive", "alive\n"); /* the source was thawed by the restart's adoption or never frozen */
}

/* Entries of dir not starting with '.'; with only_dirs, directories only. */
static int entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) n += de->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

/* kill -9 while a promote writes its generation: after the restart the
 * template either does not exist (no pointer, no generation left) or is
 * whole (its pointer names the one generation left); the source lives. */
static void test_kill9_mid_promote_old_or_new(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  struct sbxd_claim a;
  claim_as(ROOT, "host", &a, NULL);
  sh(&a, "mkdir /root/many && cd /root/many && for i in $(seq 1 3000); do echo $i > f$i; done; "
         "dd if=/dev/urandom of=/root/big bs=1M count=64 2>/dev/null",
     NULL);
  int fd = sbxd_connect(P.port);
  char req[512], body[128];
  int bl = snprintf(body, sizeof body, "{\"token\":\"%s\",\"template\":\"half\"}", a.token);
  int n = snprintf(req, sizeof req,
                   "POST /v1/sandboxes/%s/promote HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ROOT
                   "\r\nContent-Length: %d\r\n\r\n%s",
                   a.id, bl, body);
  assert_int_equal(write_all_fd(fd, req, (size_t)n), 0);
  char root[320], tdir[640] = "";
  snprintf(root, sizeof root, "%s/data/promoted", P.dir);
  for (int i = 0; i < 5000 && !tdir[0]; i++) { /* until a generation directory exists */
    DIR *d = opendir(root);
    struct dirent *de;
    while (d && (de = readdir(d)))
      if (strncmp(de->d_name, "tp_", 3) == 0) {
        snprintf(tdir, sizeof tdir, "%s/%s", root, de->d_name);
        if (entries(tdir) == 0) tdir[0] = '\0';
      }
    if (d) closedir(d);
    if (!tdir[0]) usleep(500);
  }
  assert_true(tdir[0]);
  assert_int_equal(sbxd_stop(&P, SIGKILL), 128 + SIGKILL);
  close(fd);
  assert_int_equal(sbxd_start(&P), 0);
  char meta[700];
  snprintf(meta, sizeof meta, "%s/meta.json", tdir);
  json_t *m = json_load_file(meta, 0, NULL);
  if (m) { /* new: the pointer and its generation, nothing else */
    char gen[720];
    snprintf(gen, sizeof gen, "%s/%s", tdir, json_string_value(json_object_get(m, "gen")));
    assert_int_equal(access(gen, F_OK), 0);
    assert_int_equal(entries(tdir), 2);
    json_decref(m);
  } else { /* old: no generation is left behind */
    assert_int_equal(access(tdir, F_OK) == 0 ? entries(tdir) : 0, 0);
  }
  assert_int_equal(sbxd_count_sandboxes(&P), 1);
  sh(&a, "echo alive", "alive\n");
}

/* §4.17: the record as tar (meta.json, export/..., .record-complete last)
 * to root only; HEAD probes without a bearer. */
static void test_blob_streams_the_record(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  struct sbxd_claim a;
  claim_as(ROOT, "host", &a, NULL);
  sh(&a, "mkdir -p /root/deep/er && echo blob-kept > /root/deep/er/f && ln -s f /root/deep/er/l", NULL);
  char ck[40], path[128];
  checkpoint(ROOT, &a, "for-peers", ck, sizeof ck);
  snprintf(path, sizeof path, "/v1/checkpoints/%s/blob", ck);
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "GET", path, NULL, NULL, &r), 0);
  assert_int_equal(r.status, 401);
  http_resp_free(&r);
  assert_int_equal(sbxd_http(P.port, "HEAD", path, NULL, NULL, &r), 0);
  assert_int_equal(r.status, 200);
  http_resp_free(&r);
  assert_int_equal(sbxd_http(P.port, "HEAD", "/v1/checkpoints/ck_0123456789abcdef/blob", NULL, NULL, &r), 0);
  assert_int_equal(r.status, 404);
  http_resp_free(&r);
  assert_int_equal(sbxd_http(P.port, "GET", "/v1/checkpoints/ck_0123456789abcdef/blob", ROOT, NULL, &r), 0);
  assert_int_equal(r.status, 404);
  http_resp_free(&r);
  assert_int_equal(sbxd_http(P.port, "GET", path, ROOT, NULL, &r), 0);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.head, "application/x-tar"));
  char dir[320], tarf[400], cmd[4096];
  snprintf(dir, sizeof dir, "%s/blob", P.dir);
  snprintf(tarf, sizeof tarf, "%s/blob.tar", P.dir);
  FILE *f = fopen(tarf, "w");
  assert_non_null(f);
  assert_int_equal(fwrite(r.body, 1, r.body_len, f), r.body_len);
  fclose(f);
  http_resp_free(&r);
  /* the entries' order: meta.json first, the trailer last, no link */
  snprintf(cmd, sizeof cmd, "tar -tf %s | head -1 | grep -qx meta.json && tar -tf %s | tail -1 | grep -qx .record-complete"
           " && ! tar -tvf %s | grep -q '^l' && mkdir %s && tar -xf %s -C %s && cat %s/export/i0/u0/root/deep/er/f",
           tarf, tarf, tarf, dir, tarf, dir, dir);
  FILE *p = popen(cmd, "r");
  char out[64] = "";
  assert_non_null(fgets(out, sizeof out, p));
  assert_int_equal(pclose(p), 0);
  assert_string_equal(out, "blob-kept\n");
  char meta[400];
  snprintf(meta, sizeof meta, "%s/meta.json", dir);
  json_t *m = json_load_file(meta, 0, NULL);
  assert_string_equal(json_string_value(json_object_get(m, "id")), ck);
  json_decref(m);
}

static int teardown_full_disk(void **state) {
  int rc = teardown(state);
  umount2(small_store, MNT_DETACH);
  rmdir(small_store);
  return rc;
}

static void test_full_disk_leaves_no_half_record(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  struct sbxd_claim a;
  claim_as(ROOT, "host", &a, NULL);
  sh(&a, "head -c 4194304 /dev/urandom > /root/big", NULL);
  char path[128];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/checkpoint", a.id);
  int st;
  json_decref(call("POST", path, ROOT, "{}", &st));
  assert_int_equal(st, 500);
  assert_int_equal(list_count(ROOT), 0);
  DIR *d = opendir(small_store);
  int left = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) left += de->d_name[0] != '.';
  if (d) closedir(d);
  assert_int_equal(left, 0);
  sh(&a, "echo alive", "alive\n"); /* the source was thawed */
}

/* The canonical stream of §5.10, built here with find, sort and sha256sum. */
static void independent_digest(const char *root, char *out, size_t cap) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "cd '%s' && { printf 'sandbox-content-digest-v1\\n'; find . -type f -printf '%%P\\n' | LC_ALL=C sort | "
           "while IFS= read -r f; do s=$(stat -c %%s \"$f\"); printf '%%s\\n%%s\\n' \"$f\" \"$s\"; k=0; "
           "while [ $((k * 16777216)) -lt \"$s\" ]; do dd if=\"$f\" bs=16777216 skip=$k count=1 2>/dev/null | "
           "sha256sum | cut -d' ' -f1; k=$((k + 1)); done; done; } | sha256sum | cut -d' ' -f1",
           root);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char hex[80] = "";
  assert_non_null(fgets(hex, sizeof hex, p));
  pclose(p);
  hex[strcspn(hex, "\n")] = '\0';
  snprintf(out, cap, "sha256:%s", hex);
}

static void test_promote_digest_and_claim(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  struct sbxd_claim a;
  claim_as(ACME, "host", &a, NULL);
  sh(&a, "echo env > /root/env && dd if=/dev/urandom of=/root/big bs=1M count=20 2>/dev/null && : > /root/empty",
     NULL);
  char path[128], body[160];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/promote", a.id);
  snprintf(body, sizeof body, "{\"token\":\"%s\",\"template\":\"bad name\"}", a.token);
  int st;
  json_decref(call("POST", path, ACME, body, &st));
  assert_int_equal(st, 400);
  snprintf(body, sizeof body, "{\"token\":\"%s\",\"template\":\"my-env\"}", a.token);
  json_t *v = call("POST", path, ACME, body, &st);
  assert_int_equal(st, 200);
  char digest[80];
  snprintf(digest, sizeof digest, "%s", json_string_value(json_object_get(v, "content_digest")));
  assert_string_equal(json_string_value(json_object_get(json_object_get(v, "key"), "template")), "my-env");
  json_decref(v);
  /* the export's directory: the only generation under data/promoted */
  char cmd[512], gen[512] = "";
  snprintf(cmd, sizeof cmd, "ls -d %s/data/promoted/tp_*/*/ | head -1", P.dir);
  FILE *p = popen(cmd, "r");
  assert_non_null(fgets(gen, sizeof gen, p));
  pclose(p);
  gen[strcspn(gen, "\n")] = '\0';
  char want[96];
  independent_digest(gen, want, sizeof want);
  assert_string_equal(digest, want);
  /* a claim of the key clones from it and echoes the digest */
  struct sbxd_claim b;
  json_t *cr;
  claim_as(ACME, "my-env", &b, &cr);
  assert_string_equal(json_string_value(json_object_get(cr, "template_digest")), digest);
  json_decref(cr);
  sh(&b, "cat /root/env", "env\n");
  /* another tenant: not promoted for it, and it cannot take the name over */
  struct sbxd_claim o;
  claim_as(BETA, "host", &o, NULL);
  snprintf(path, sizeof path, "/v1/sandboxes/%s/promote", o.id);
  snprintf(body, sizeof body, "{\"token\":\"%s\",\"template\":\"my-env\"}", o.token);
  json_decref(call("POST", path, BETA, body, &st));
  assert_int_equal(st, 409);
  assert_int_equal(sbxd_status(P.port, "DELETE", "/v1/templates?template=my-env", BETA, NULL), 404);
  assert_int_equal(sbxd_status(P.port, "DELETE", "/v1/templates?template=bad%20name", ACME, NULL), 400);
  assert_int_equal(sbxd_status(P.port, "DELETE", "/v1/templates?template=my-env", ACME, NULL), 204);
  assert_int_equal(sbxd_status(P.port, "DELETE", "/v1/templates?template=my-env", ACME, NULL), 404);
  sh(&b, "cat /root/env", "env\n"); /* its claim runs on its own copy */
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_checkpoint_branch_tree_and_scoping, setup, teardown),
      cmocka_unit_test_setup_teardown(test_damaged_record_and_ttl, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kill9_mid_export_leaves_no_record, setup, teardown),
      cmocka_unit_test_setup_teardown(test_promote_digest_and_claim, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kill9_mid_promote_old_or_new, setup, teardown),
      cmocka_unit_test_setup_teardown(test_blob_streams_the_record, setup, teardown),
      cmocka_unit_test_setup_teardown(test_full_disk_leaves_no_half_record, setup_full_disk, teardown_full_disk),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
