/* test_sandboxd_ops: what an operator reads from a real sandboxd (jail
 * driver, root). --check-config refuses a pool whose template does not
 * exist and warns about keys it accepts without acting on them; a pool
 * whose golden cannot be built shows why in /v1/info, and a claim of it
 * answers the cause; log_format "json" writes one JSON object per line,
 * with one access line per claim, release and failed claim; /metrics
 * passes an exposition-format check (and promtool's, when installed) and
 * carries the histogram, outcome, build and process series. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <ctype.h>
#include <jansson.h>

#include "sbxd_test.h"

#define ROOT "root-token-for-ops-test"
static const char *CONFIG = "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                            "\"api_token\":\"" ROOT "\",\"jail\":{\"cgroup_root\":\"@CGROUP@\"},"
                            "\"log_format\":\"json\","
                            "\"pools\":[{\"template\":\"host\",\"warm\":1},{\"template\":\"nosuch\",\"warm\":1}]}";
static struct sbxd_proc P;

static void pause_10ms(void) {
  struct timespec ts = {0, 10 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* ---- --check-config ---- */

static void test_check_config_missing_template(void **state) {
  char out[4096];
  assert_int_equal(sbxd_check_config("{\"data_dir\":\"/tmp/sbxd-ops-none\",\"pools\":[{\"template\":\"host\"},"
                                     "{\"template\":\"nosuch\",\"size\":\"medium\"}]}",
                                     out, sizeof out),
                   2);
  assert_non_null(strstr(out, "pools[1] (nosuch|none|medium): template \"nosuch\" does not exist under "
                              "/tmp/sbxd-ops-none/templates"));
  /* host is built in; a registered directory template passes. */
  char dir[] = "/tmp/sbxd-ops-tpl-XXXXXX", sub[256], cfg[512];
  assert_non_null(mkdtemp(dir));
  snprintf(sub, sizeof sub, "%s/mine", dir);
  assert_int_equal(mkdir(sub, 0755), 0);
  snprintf(sub, sizeof sub, "%s/mine/rootfs", dir);
  assert_int_equal(mkdir(sub, 0755), 0);
  snprintf(cfg, sizeof cfg, "{\"templates_dir\":\"%s\",\"pools\":[{\"template\":\"host\"},{\"template\":\"mine\"}]}",
           dir);
  assert_int_equal(sbxd_check_config(cfg, out, sizeof out), 0);
  assert_non_null(strstr(out, "config ok"));
  sbxd_rmrf(dir);
}

/* Keys taken and type-checked but not acted on warn at load, naming the
 * key; the load still passes. */
static void test_unacted_keys_warn(void **state) {
  char out[4096];
  assert_int_equal(sbxd_check_config("{\"pools\":[{\"template\":\"host\",\"egress\":{}}],"
                                     "\"api_token\":\"t\",\"tenants\":[{\"name\":\"a\",\"token\":\"ta\",\"egress\":{}}]}",
                                     out, sizeof out),
                   0);
  assert_non_null(strstr(out, "pools[0].egress is accepted but not acted on"));
  assert_non_null(strstr(out, "tenants[0].egress is accepted but not acted on"));
  assert_non_null(strstr(out, "config ok"));
  /* The lifecycle keys are acted on: no warning. */
  assert_int_equal(sbxd_check_config("{\"pools\":[{\"template\":\"host\",\"idle_hibernate_seconds\":60,"
                                     "\"archive_after_seconds\":120}],\"idle_hibernate_seconds\":30}",
                                     out, sizeof out),
                   0);
  assert_null(strstr(out, "not acted on"));
  assert_int_equal(sbxd_check_config("{\"log_format\":\"xml\"}", out, sizeof out), 2);
  assert_non_null(strstr(out, "log_format"));
}

/* ---- a daemon with a pool that cannot work ---- */

static json_t *get_json(const char *path) {
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "GET", path, ROOT, NULL, &r), 0);
  assert_int_equal(r.status, 200);
  json_t *v = json_loads(r.body, 0, NULL);
  http_resp_free(&r);
  assert_non_null(v);
  return v;
}

static json_t *pool_of(json_t *info, const char *tmpl) {
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(info, "pools"), i, p) {
    if (strcmp(json_string_value(json_object_get(json_object_get(p, "key"), "template")), tmpl) == 0) return p;
  }
  return NULL;
}

/* Until nosuch shows its last error and host has a warm sandbox (bounded). */
static json_t *wait_pools(void) {
  json_t *info = NULL;
  for (int i = 0; i < 3000; i++) {
    json_decref(info);
    if (i) pause_10ms();
    info = get_json("/v1/info");
    json_t *bad = pool_of(info, "nosuch"), *good = pool_of(info, "host");
    if (json_object_get(bad, "last_error") && json_integer_value(json_object_get(good, "warm")) >= 1) break;
  }
  return info;
}

/* One logged line as JSON; the readiness line is the only plain one. */
static json_t *log_lines(void) {
  sbxd_drain_log(&P);
  char path[320], line[8192];
  snprintf(path, sizeof path, "%s/daemon.log", P.dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  json_t *arr = json_array();
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "sandboxd: ready port=", 21) == 0) continue;
    json_error_t je;
    json_t *v = json_loads(line, 0, &je);
    if (!v) fprintf(stderr, "not JSON: %s", line);
    assert_non_null(v);
    assert_true(json_is_string(json_object_get(v, "time")));
    assert_true(json_is_string(json_object_get(v, "level")));
    assert_int_equal(json_integer_value(json_object_get(v, "pid")), P.pid);
    assert_true(json_is_string(json_object_get(v, "message")));
    json_array_append_new(arr, v);
  }
  fclose(f);
  return arr;
}

static json_t *find_line(json_t *lines, const char *message, const char *id) {
  size_t i;
  json_t *v;
  json_array_foreach(lines, i, v) {
    if (strcmp(json_string_value(json_object_get(v, "message")), message) != 0) continue;
    if (id && strcmp(json_string_value(json_object_get(v, "id")) ?: "", id) != 0) continue;
    return v;
  }
  return NULL;
}

/* ---- the exposition format (0.0.4), as a scraper reads it ---- */

struct family {
  char name[128], type[16];
};

static bool metric_name(const char **p, char *out, size_t cap) {
  size_t n = 0;
  if (!(isalpha((unsigned char)**p) || **p == '_' || **p == ':')) return false;
  while (isalnum((unsigned char)**p) || **p == '_' || **p == ':') {
    if (n + 1 < cap) out[n++] = **p;
    (*p)++;
  }
  out[n] = '\0';
  return true;
}

/* {name="value",...}: the labels in out (as written, for grouping), and
 * le's value in le when present. */
static bool labels(const char **p, char *out, size_t cap, char *le, size_t lecap) {
  assert_true(lecap >= 32);
  size_t n = 0;
  le[0] = '\0';
  out[0] = '\0';
  if (**p != '{') return true;
  (*p)++;
  while (**p != '}') {
    char lname[64];
    if (!metric_name(p, lname, sizeof lname) || **p != '=' || (*p)[1] != '"') return false;
    *p += 2;
    char val[256];
    size_t vn = 0;
    while (**p != '"') {
      if (!**p || **p == '\n') return false;
      if (**p == '\\') {
        (*p)++;
        if (**p != '\\' && **p != '"' && **p != 'n') return false;
      }
      if (vn + 1 < sizeof val) val[vn++] = **p;
      (*p)++;
    }
    val[vn] = '\0';
    (*p)++;
    if (strcmp(lname, "le") == 0) snprintf(le, lecap, "%.31s", val);
    else n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%s=%s,", lname, val);
    if (**p == ',') (*p)++;
    else if (**p != '}') return false;
  }
  (*p)++;
  return true;
}

/* Checks every line; returns the number of samples. Histograms: buckets
 * cumulative, +Inf equal to _count. Counters end in _total. */
static size_t check_exposition(const char *text) {
  struct family fam[256];
  size_t nfam = 0, samples = 0;
  char prev_series[512] = "";
  double prev_bucket = 0, inf_bucket = -1;
  for (const char *line = text; *line;) {
    const char *end = strchr(line, '\n');
    assert_non_null(end); /* every line ends in LF */
    char buf[1024];
    size_t len = (size_t)(end - line);
    assert_true(len < sizeof buf);
    memcpy(buf, line, len);
    buf[len] = '\0';
    line = end + 1;
    const char *p = buf;
    if (strncmp(p, "# HELP ", 7) == 0) continue;
    if (strncmp(p, "# TYPE ", 7) == 0) {
      p += 7;
      assert_true(nfam < 256);
      assert_true(metric_name(&p, fam[nfam].name, sizeof fam[nfam].name));
      assert_int_equal(*p++, ' ');
      snprintf(fam[nfam].type, sizeof fam[nfam].type, "%s", p);
      assert_true(!strcmp(p, "counter") || !strcmp(p, "gauge") || !strcmp(p, "histogram"));
      for (size_t i = 0; i < nfam; i++) assert_string_not_equal(fam[i].name, fam[nfam].name);
      if (!strcmp(p, "counter")) assert_non_null(strstr(fam[nfam].name, "_total"));
      nfam++;
      continue;
    }
    char name[128], lab[512], le[32];
    if (!metric_name(&p, name, sizeof name) || !labels(&p, lab, sizeof lab, le, sizeof le) || *p++ != ' ')
      fail_msg("bad sample line: %s", buf);
    char *vend;
    double v = strtod(p, &vend);
    if (vend == p || *vend) fail_msg("bad value: %s", buf);
    samples++;
    /* the sample belongs to the family declared last */
    assert_true(nfam > 0);
    const struct family *f = &fam[nfam - 1];
    if (strcmp(f->type, "histogram") == 0) {
      size_t fl = strlen(f->name);
      assert_memory_equal(name, f->name, fl);
      const char *suffix = name + fl;
      if (strcmp(suffix, "_bucket") == 0) {
        assert_true(le[0]);
        if (strcmp(prev_series, lab) != 0) prev_bucket = 0;
        assert_true(v >= prev_bucket);
        prev_bucket = v;
        snprintf(prev_series, sizeof prev_series, "%s", lab);
        if (strcmp(le, "+Inf") == 0) inf_bucket = v;
      } else if (strcmp(suffix, "_count") == 0) {
        assert_true(inf_bucket == v);
        inf_bucket = -1;
      } else {
        assert_string_equal(suffix, "_sum");
      }
    } else {
      assert_string_equal(name, f->name);
      assert_false(le[0]);
    }
  }
  return samples;
}

static char *metrics_text(void) {
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "GET", "/metrics", ROOT, NULL, &r), 0);
  assert_int_equal(r.status, 200);
  char *t = strdup(r.body);
  http_resp_free(&r);
  return t;
}

/* promtool from Debian's prometheus package, when it is installed. */
static void promtool_check(const char *text) {
  if (access("/usr/bin/promtool", X_OK) != 0) {
    fprintf(stderr, "promtool not installed: the exposition check above stands alone\n");
    return;
  }
  char path[320], cmd[700];
  snprintf(path, sizeof path, "%s/metrics.txt", P.dir);
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "/usr/bin/promtool check metrics < %s", path);
  int rc = system(cmd);
  assert_int_equal(rc, 0);
}

static void test_operator_view(void **state) {
  json_t *info = wait_pools();
  json_t *bad = pool_of(info, "nosuch");
  const char *why = json_string_value(json_object_get(bad, "last_error"));
  assert_non_null(why);
  assert_non_null(strstr(why, "golden build failed"));
  assert_non_null(strstr(why, "nosuch"));
  assert_true(json_is_string(json_object_get(bad, "last_error_at")));
  assert_null(json_object_get(pool_of(info, "host"), "last_error"));
  json_decref(info);

  /* The claim's answer names the cause. */
  struct http_resp r;
  assert_int_equal(sbxd_http(P.port, "POST", "/v1/claim", ROOT, "{\"template\":\"nosuch\"}", &r), 0);
  assert_int_equal(r.status, 500);
  assert_non_null(strstr(r.body, "provisioning failed"));
  assert_non_null(strstr(r.body, "no template \\\"nosuch\\\""));
  http_resp_free(&r);

  /* A warm claim, an exec and a release. */
  struct sbxd_claim c;
  sbxd_claim(&P, ROOT, &c);
  int st;
  json_t *ex = sbxd_exec(&P, &c, "{\"argv\":[\"/bin/true\"]}", &st);
  assert_int_equal(st, 200);
  json_decref(ex);
  ex = sbxd_exec(&P, &c, "{\"argv\":[\"/bin/false\"]}", &st);
  assert_int_equal(st, 200);
  json_decref(ex);
  char path[128];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/release", c.id);
  assert_int_equal(sbxd_status(P.port, "POST", path, c.token, NULL), 204);

  /* The log: JSON lines, one access line each. */
  json_t *lines = log_lines();
  json_t *cl = find_line(lines, "claim", c.id);
  assert_non_null(cl);
  assert_string_equal(json_string_value(json_object_get(cl, "key")), "host|none|small");
  assert_string_equal(json_string_value(json_object_get(cl, "tier")), "warm");
  assert_true(json_is_number(json_object_get(cl, "duration_ms")));
  assert_string_equal(json_string_value(json_object_get(cl, "level")), "info");
  json_t *rl = find_line(lines, "release", c.id);
  assert_non_null(rl);
  assert_true(json_is_number(json_object_get(rl, "held_seconds")));
  json_t *fl = find_line(lines, "claim failed", NULL);
  assert_non_null(fl);
  assert_string_equal(json_string_value(json_object_get(fl, "key")), "nosuch|none|small");
  assert_non_null(strstr(json_string_value(json_object_get(fl, "error")), "nosuch"));
  json_decref(lines);

  /* /metrics: well formed, with the new series. */
  char *m = metrics_text();
  assert_true(check_exposition(m) > 50);
  promtool_check(m);
  assert_non_null(strstr(m, "# TYPE sandboxd_claim_duration_seconds histogram\n"));
  assert_non_null(strstr(m, "sandboxd_claim_duration_seconds_count{tier=\"warm\"} 1\n"));
  assert_non_null(strstr(m, "sandboxd_claim_duration_seconds_bucket{tier=\"cold\",le=\"+Inf\"} 0\n"));
  assert_non_null(strstr(m, "sandboxd_execs_total{outcome=\"ok\"} 1\n"));
  assert_non_null(strstr(m, "sandboxd_execs_total{outcome=\"nonzero_exit\"} 1\n"));
  assert_non_null(strstr(m, "sandboxd_http_requests_total{code=\"5xx\"} 1\n"));
  assert_non_null(strstr(m, "sandboxd_build_info{version=\""));
  assert_non_null(strstr(m, "\"} 1\n"));
  static const char *const proc[] = {"\nprocess_cpu_seconds_total ", "\nprocess_resident_memory_bytes ",
                                     "\nprocess_open_fds ", "\nprocess_start_time_seconds "};
  for (size_t i = 0; i < sizeof proc / sizeof *proc; i++) {
    const char *at = strstr(m, proc[i]);
    assert_non_null(at);
    assert_true(strtod(at + strlen(proc[i]), NULL) > 0);
  }
  free(m);
}

/* The checker itself refuses what a scraper would. */
static void test_exposition_checker(void **state) {
  assert_int_equal(check_exposition("# TYPE a_total counter\na_total{x=\"1\"} 2\n"), 1);
  assert_int_equal(check_exposition("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
                                    "h_sum 3\nh_count 2\n"),
                   4);
}

static int setup(void **state) {
  if (geteuid() != 0) return 0;
  sbxd_prepare(&P, CONFIG);
  if (sbxd_start(&P) < 0) {
    sbxd_stop(&P, SIGKILL);
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  if (geteuid() != 0) return 0;
  int rc = sbxd_stop(&P, SIGTERM);
  sbxd_jail_cleanup(&P);
  return rc == 0 ? 0 : -1;
}

static void test_operator_view_root(void **state) {
  if (geteuid() != 0) {
    fprintf(stderr, "skipped: needs root\n");
    skip();
  }
  test_operator_view(state);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_check_config_missing_template),
      cmocka_unit_test(test_unacted_keys_warn),
      cmocka_unit_test(test_exposition_checker),
      cmocka_unit_test_setup_teardown(test_operator_view_root, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
