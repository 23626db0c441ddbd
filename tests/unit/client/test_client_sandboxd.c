/* The client and sbxctl against a real sandboxd (jail driver, real silkd):
 * claim, exec through the relay (codes, stderr, stdin), 100 MiB streamed
 * with bounded memory, connection reuse counted from the socket table,
 * control-plane verbs and typed API errors, sbxctl with remembered tokens,
 * cp round trip of a tree, shell on a pseudo-terminal, release. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

#include <cmocka.h>

#include "../sandboxd/sbxd_test.h"
#include "sbxctl_run.h"

#define ROOT "root-token-for-client-test"
static const char *CONFIG = "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                            "\"api_token\":\"" ROOT "\",\"pools\":[{\"template\":\"host\",\"warm\":1}],"
                            "\"jail\":{\"cgroup_root\":\"@CGROUP@\"}}";

static struct sbxd_proc P;
static char addr[64], state_dir[400];
static sbx_client *C;

#define ARGV(...) ((const char *const[]){__VA_ARGS__, NULL})
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static int setup(void **state) {
  (void)state;
  if (geteuid() != 0) {
    fprintf(stderr, "FATAL: the jail driver needs root\n");
    return -1;
  }
  sbxd_prepare(&P, CONFIG);
  if (sbxd_start(&P) < 0) {
    sbxd_dump_log(&P);
    return -1;
  }
  snprintf(addr, sizeof addr, "127.0.0.1:%d", P.port);
  snprintf(state_dir, sizeof state_dir, "%s/state", P.dir);
  setenv("XDG_STATE_HOME", state_dir, 1);
  setenv("SANDBOXD_ADDR", addr, 1);
  setenv("SANDBOXD_TOKEN", ROOT, 1);
  sbx_client_opts o = SBX_CLIENT_OPTS_INIT(.addr = addr, .token = ROOT);
  sbx_error err;
  return sbx_client_new(&o, &C, &err);
}

/* sandboxd leaves sandboxes running when it stops; sbxd_jail_cleanup
 * restarts it owning nothing, which destroys them, then removes the test's
 * own cgroup parent. */
static int teardown(void **state) {
  (void)state;
  sbx_client_free(C);
  int rc = sbxd_stop(&P, SIGTERM);
  sbxd_jail_cleanup(&P);
  return rc == 0 ? 0 : -1;
}

static sbx_sandbox *claim(void) {
  sbx_sandbox *s = NULL;
  sbx_error err;
  sbx_claim_opts o = SBX_CLAIM_OPTS_INIT(.template_ = "host", .ttl_seconds = 600, .claim_ref = "client-test");
  if (sbx_client_claim(C, &o, &s, &err) < 0) {
    sbxd_drain_log(&P);
    sbxd_dump_log(&P);
    fail_msg("claim: %s", err.msg);
  }
  return s;
}

static int collect(void *ud, sbx_stream st, const void *p, size_t n) {
  sbx_error err;
  return st == SBX_STREAM_STDOUT ? sbx_buf_add(ud, p, n, &err) : 0;
}

static void test_claim_exec_release(void **state) {
  (void)state;
  sbx_sandbox *s = claim();
  assert_true(strncmp(sbx_sandbox_id(s), "sb_", 3) == 0);
  assert_int_equal(strlen(sbx_sandbox_token(s)), 32);
  sbx_buf out = SBX_BUF_INIT(1 << 20), errb = SBX_BUF_INIT(1 << 20);
  sbx_error err;
  int code = -5;
  sbx_exec_opts o = SBX_EXEC_OPTS_INIT(.argv = ARGV("sh", "-c", "echo out; echo err >&2; exit 3"));
  if (sbx_sandbox_run(s, &o, &out, &errb, &code, &err) < 0) fail_msg("run: %s", err.msg);
  assert_int_equal(code, 3);
  assert_string_equal(out.ptr, "out\n");
  assert_string_equal(errb.ptr, "err\n");
  sbx_buf_reset(&out);
  sbx_exec_opts o2 = SBX_EXEC_OPTS_INIT(.argv = ARGV("cat"));
  sbx_agent_exec_io io = {
      .on_output = collect, .ud = &out, .stdin_data = "through the relay\n", .stdin_len = 18, .stdin_fd = -1};
  assert_int_equal(sbx_sandbox_exec(s, &o2, &io, &code, &err), 0);
  assert_int_equal(code, 0);
  assert_string_equal(out.ptr, "through the relay\n");

  /* control plane */
  assert_int_equal(sbx_sandbox_renew(s, 120, &err), 0);
  assert_true(strlen(sbx_sandbox_deadline(s)) >= 20);
  sbx_sandbox_row *rows = NULL;
  size_t n = 0;
  assert_int_equal(sbx_client_sandboxes(C, "client-test", &rows, &n, NULL, &err), 0);
  bool found = false;
  for (size_t i = 0; i < n; i++) found |= strcmp(rows[i].id, sbx_sandbox_id(s)) == 0;
  sbx_free(rows);
  assert_true(found);
  sbx_sandbox_row row;
  assert_int_equal(sbx_client_sandbox_info(C, sbx_sandbox_id(s), &row, NULL, &err), 0);
  assert_string_equal(row.key.template_, "host");
  sbx_node_info ni;
  assert_int_equal(sbx_client_info(C, &ni, &err), 0);
  assert_true(ni.npools >= 1);
  assert_true(ni.claimed >= 1);
  sbx_node_info_free(&ni);

  /* lookup finds the owner with the sandbox token alone */
  sbx_sandbox *again = NULL;
  assert_int_equal(sbx_client_lookup(C, sbx_sandbox_id(s), sbx_sandbox_token(s), &again, &err), 0);
  sbx_sandbox_free(again);
  /* a wrong token is an API error 404, never a crash or a hang */
  sbx_sandbox *wrong = NULL;
  assert_int_equal(sbx_client_attach(C, sbx_sandbox_id(s), "00000000000000000000000000000000", NULL, &wrong, &err),
                   0);
  sbx_exec_opts t = SBX_EXEC_OPTS_INIT(.argv = ARGV("true"));
  assert_int_equal(sbx_sandbox_run(wrong, &t, NULL, NULL, &code, &err), SBX_E_REMOTE);
  assert_int_equal(sbx_client_error_kind(&err), SBX_CLIENT_ERR_API);
  assert_int_equal(err.detail, 404);
  sbx_sandbox_free(wrong);

  assert_int_equal(sbx_sandbox_release(s, &err), 0);
  assert_int_equal(sbx_sandbox_release(s, &err), 0); /* 404 counts as released */
  assert_int_equal(sbx_sandbox_run(s, &t, NULL, NULL, &code, &err), SBX_E_REMOTE);
  assert_int_equal(err.detail, 404);
  sbx_sandbox_free(s);
  sbx_buf_free(&out);
  sbx_buf_free(&errb);
}

/* Sockets of this host whose remote end is the sandboxd port, in any state
 * (TIME_WAIT included): every upgrade is one more. */
static int sockets_to_port(int port) {
  int n = 0;
  const char *files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(files[i], "r");
    if (!f) continue;
    char line[512];
    while (fgets(line, sizeof line, f)) {
      char rem[128];
      unsigned rport;
      if (sscanf(line, "%*s %*s %127[0-9A-Fa-f]:%x", rem, &rport) == 2 && (int)rport == port) n++;
    }
    fclose(f);
  }
  return n;
}

static void test_reuse_through_relay(void **state) {
  (void)state;
  sbx_sandbox *s = claim();
  sbx_error err;
  int code;
  sbx_exec_opts o = SBX_EXEC_OPTS_INIT(.argv = ARGV("true"));
  assert_int_equal(sbx_sandbox_run(s, &o, NULL, NULL, &code, &err), 0); /* first dial, parked after */
  int before = sockets_to_port(P.port);
  uint64_t d0 = sbx_sandbox_dials(s);
  for (int i = 0; i < 100; i++) {
    if (sbx_sandbox_run(s, &o, NULL, NULL, &code, &err) < 0) fail_msg("exec %d: %s", i, err.msg);
    assert_int_equal(code, 0);
  }
  int grown = sockets_to_port(P.port) - before;
  uint64_t dials = sbx_sandbox_dials(s) - d0;
  if (dials > 1 || grown > 2)
    fail_msg("100 execs: %llu new dials, %d new sockets to sandboxd", (unsigned long long)dials, grown);
  assert_int_equal(sbx_sandbox_release(s, &err), 0);
  sbx_sandbox_free(s);
}

static int count(void *ud, sbx_stream st, const void *p, size_t n) {
  (void)st;
  (void)p;
  *(uint64_t *)ud += n;
  return 0;
}

static void test_100mib_through_relay(void **state) {
  (void)state;
  sbx_sandbox *s = claim();
  sbx_error err;
  uint64_t total = 0;
  int code = -5;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  long before = ru.ru_maxrss;
  sbx_exec_opts o = SBX_EXEC_OPTS_INIT(.argv = ARGV("head", "-c", "104857600", "/dev/zero"));
  sbx_agent_exec_io io = {.on_output = count, .ud = &total, .stdin_fd = -1};
  if (sbx_sandbox_exec(s, &o, &io, &code, &err) < 0) fail_msg("exec: %s", err.msg);
  assert_int_equal(code, 0);
  assert_int_equal(total, 104857600u);
  getrusage(RUSAGE_SELF, &ru);
  if (ru.ru_maxrss - before > 64 * 1024) fail_msg("peak RSS grew by %ld KiB", ru.ru_maxrss - before);
  assert_int_equal(sbx_sandbox_release(s, &err), 0);
  sbx_sandbox_free(s);
}

/* ---- sbxctl ---- */
static void test_sbxctl_lifecycle(void **state) {
  (void)state;
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("claim", "host", "--ttl", "600", "--ref", "sbxctl-test"), NULL, &r, NULL, NULL), 0);
  if (r.status != 0) fail_msg("claim: %s", r.err.ptr ? r.err.ptr : "");
  char id[64] = {0};
  sscanf(r.out.ptr, "%63s", id);
  run_result_free(&r);
  assert_true(strncmp(id, "sb_", 3) == 0);
  /* the token was remembered: no token needed from here on */
  unsetenv("SANDBOXD_TOKEN");
  assert_int_equal(run_sbxctl(ARGS("exec", id, "--", "sh", "-c", "cat; echo err >&2; exit 4"), "hi\n", &r, NULL, NULL),
                   0);
  assert_int_equal(r.status, 4);
  assert_string_equal(r.out.ptr, "hi\n");
  assert_string_equal(r.err.ptr, "err\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "renew", id, "--ttl", "300"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out.ptr, "deadline"));
  run_result_free(&r);
  setenv("SANDBOXD_TOKEN", ROOT, 1);
  assert_int_equal(run_sbxctl(ARGS("ls", "--ref", "sbxctl-test"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out.ptr, id));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "info"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out.ptr, "\"pools\""));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("info", id), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("pools"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out.ptr, "host"));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "drain"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out.ptr, "\"draining\":true"));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("claim"), NULL, &r, NULL, NULL), 0); /* 429 node draining */
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err.ptr, "429"));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("uncordon"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  /* a lifecycle verb the node may not have comes back as a clean API error
   * or works; either way one line, no crash */
  unsetenv("SANDBOXD_TOKEN");
  assert_int_equal(run_sbxctl(ARGS("release", id), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  /* forgotten with the release */
  assert_int_equal(run_sbxctl(ARGS("exec", id, "--", "true"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  run_result_free(&r);
  setenv("SANDBOXD_TOKEN", ROOT, 1);
}

/* pools set refuses what PUT /v1/pools refuses; pools show says when
 * pools.json overrides the config; the node says what it can do. */
static void test_sbxctl_pools_and_operator(void **state) {
  (void)state;
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("pools", "set", "-"), "{\"pools\":[{\"template\":\"host\",\"warmup\":[\"/x\"]}]}",
                              &r, NULL, NULL),
                   0);
  assert_int_equal(r.status, 1);
  assert_string_equal(r.err.ptr, "sbxctl: pools: -: pools[0].warmup: owned by the config file, not settable here\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("pools", "set", "-"), "{\"pools\":[{\"template\":\"host\",\"egress\":{}}]}", &r,
                              NULL, NULL),
                   0);
  assert_int_equal(r.status, 1);
  assert_string_equal(r.err.ptr, "sbxctl: pools: -: pools[0].egress: owned by the config file, not settable here\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("pools", "set", "-"), "{\"pools\":[{\"template\":\"host\",\"wram\":1}]}", &r,
                              NULL, NULL),
                   0);
  assert_int_equal(r.status, 1);
  assert_string_equal(r.err.ptr, "sbxctl: pools: -: pools[0].wram: unknown field\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("pools", "set", "-"), "{\"pools\":[{\"template\":\"host\",\"warm\":\"1\"}]}",
                              &r, NULL, NULL),
                   0);
  assert_int_equal(r.status, 1);
  assert_string_equal(r.err.ptr, "sbxctl: pools: -: pools[0].warm: must be an integer >= 0\n");
  run_result_free(&r);
  /* a file error names the file */
  assert_int_equal(run_sbxctl(ARGS("pools", "set", "/no/such/pools.json"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_int_equal(strncmp(r.err.ptr, "sbxctl: pools: /no/such/pools.json: ", 36), 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("pools"), NULL, &r, NULL, NULL), 0);
  assert_null(strstr(r.out.ptr, "override"));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("pools", "set", "-"), "{\"pools\":[{\"template\":\"host\",\"warm\":1}]}", &r,
                              NULL, NULL),
                   0);
  assert_int_equal(r.status, 0);
  assert_int_equal(strncmp(r.out.ptr, "pools: set through the API (data_dir/pools.json); they override the config file's "
                                      "pools\n", 88), 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "info"), NULL, &r, NULL, NULL), 0);
  assert_non_null(strstr(r.out.ptr, "\"driver\":\"jail\""));
  assert_non_null(strstr(r.out.ptr, "\"lifecycle\":true"));
  assert_non_null(strstr(r.out.ptr, "\"pools_source\":\"pools.json\""));
  run_result_free(&r);
  /* the operator token reaches a sandbox sbxctl never claimed where the
   * API lets it (renew, info, hibernate, wake, release); exec takes the
   * sandbox token (the agent relay is sbx-only) and says so */
  sbx_sandbox *s = claim();
  char id[64];
  snprintf(id, sizeof id, "%s", sbx_sandbox_id(s));
  assert_int_equal(run_sbxctl(ARGS("--token", ROOT, "exec", id, "echo op"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  char want_op[300];
  snprintf(want_op, sizeof want_op, "sbxctl: %s: unknown sandbox, or not reachable with this token", id);
  assert_int_equal(strncmp(r.err.ptr, want_op, strlen(want_op)), 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--token", ROOT, "renew", id, "--ttl", "300"), NULL, &r, NULL, NULL), 0);
  if (r.status != 0) fail_msg("operator renew: %s", r.err.ptr ? r.err.ptr : "");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--token", ROOT, "info", id), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--token", ROOT, "release", id), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  sbx_sandbox_free(s);
  /* a sandbox whose lease ended while sbxctl still has its token */
  assert_int_equal(run_sbxctl(ARGS("claim", "host", "--ttl", "600"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  sscanf(r.out.ptr, "%63s", id);
  run_result_free(&r);
  sbx_error err;
  char tok[256], own[512];
  assert_int_equal(state_get(id, tok, sizeof tok, own, sizeof own), 0);
  assert_int_equal(sbx_client_lookup(C, id, tok, &s, &err), 0);
  assert_int_equal(sbx_sandbox_release(s, &err), 0);
  sbx_sandbox_free(s);
  assert_int_equal(run_sbxctl(ARGS("exec", id, "true"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  char want[256];
  snprintf(want, sizeof want, "sbxctl: %s: expired: its lease ended or it was released elsewhere", id);
  assert_int_equal(strncmp(r.err.ptr, want, strlen(want)), 0);
  run_result_free(&r);
  assert_int_equal(state_forget(id), 0);
}

/* port-forward: once sbxctl says where it listens, a connection there
 * reaches the guest's upper-casing echo service; then SIGTERM ends it. */
struct pf_state {
  bool done;
  char got[64];
};

static void pf_on_output(pid_t pid, const sbx_buf *out, void *ud) {
  struct pf_state *st = ud;
  const char *p = out->ptr ? strstr(out->ptr, "Forwarding from 127.0.0.1:") : NULL;
  if (st->done || !p || !strchr(p, '\n')) return;
  st->done = true;
  int port = atoi(p + strlen("Forwarding from 127.0.0.1:"));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && write(fd, "hello", 5) == 5) {
    shutdown(fd, SHUT_WR);
    size_t got = 0;
    ssize_t n;
    while (got < sizeof st->got - 1 && (n = read(fd, st->got + got, sizeof st->got - 1 - got)) > 0) got += (size_t)n;
    st->got[got] = 0;
  }
  close(fd);
  kill(pid, SIGTERM);
}

static void test_sbxctl_port_forward(void **state) {
  (void)state;
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("claim", "host", "--ttl", "600"), NULL, &r, NULL, NULL), 0);
  char id[64] = {0};
  sscanf(r.out.ptr, "%63s", id);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("exec", id, "perl -e 'use Socket; socket(my $s, PF_INET, SOCK_STREAM, 0) or die; "
                                               "setsockopt($s, SOL_SOCKET, SO_REUSEADDR, 1); "
                                               "bind($s, sockaddr_in(8080, inet_aton(\"127.0.0.1\"))) or die; "
                                               "listen($s, 5) or die; exit 0 if fork; open STDIN, \"</dev/null\"; "
                                               "open STDOUT, \">/dev/null\"; open STDERR, \">/dev/null\"; "
                                               "accept(my $c, $s) or exit 1; my $b; while (sysread($c, $b, 65536)) "
                                               "{ $b =~ tr/a-z/A-Z/; syswrite($c, $b); } close $c;'; echo up"),
                              NULL, &r, NULL, NULL),
                   0);
  assert_string_equal(r.out.ptr, "up\n");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("port-forward", id, "x:80"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 2);
  assert_int_equal(strncmp(r.err.ptr, "sbxctl: LOCAL:REMOTE: expected ports such as 8080:80", 52), 0);
  run_result_free(&r);
  /* a claim that cannot be provisioned: the node's words, the verb once
   * (naming the missing template is sandboxd's to say) */
  assert_int_equal(run_sbxctl(ARGS("claim", "no-such-template"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_int_equal(strncmp(r.err.ptr, "sbxctl: claim: 500: ", 20), 0);
  assert_null(strstr(r.err.ptr, "claim: claim:"));
  run_result_free(&r);
  struct pf_state st = {0};
  assert_int_equal(run_sbxctl(ARGS("port-forward", id, "0:8080"), NULL, &r, pf_on_output, &st), 0);
  assert_true(st.done);
  assert_string_equal(st.got, "HELLO");
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("release", id), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
}

/* stdout of sh -c script in s */
static void out_of(sbx_sandbox *s, const char *script, char *buf, size_t cap) {
  sbx_buf out = SBX_BUF_INIT(1 << 20), errb = SBX_BUF_INIT(1 << 20);
  sbx_error err;
  int code = -1;
  sbx_exec_opts o = SBX_EXEC_OPTS_INIT(.argv = ARGV("sh", "-c", script));
  if (sbx_sandbox_run(s, &o, &out, &errb, &code, &err) < 0) fail_msg("run: %s", err.msg);
  snprintf(buf, cap, "%s", out.ptr ? out.ptr : "");
  sbx_buf_free(&out);
  sbx_buf_free(&errb);
}

/* The lifecycle calls of the C client, one per verb, on a real node. */
static void test_client_lifecycle(void **state) {
  (void)state;
  sbx_sandbox *s = claim();
  char out[256];
  sbx_error err;
  out_of(s, "echo parent > /root/p", out, sizeof out);
  assert_int_equal(sbx_sandbox_hibernate(s, &err), 0);
  assert_int_equal(sbx_sandbox_wake(s, &err), 0);
  sbx_fork_opts fo = SBX_FORK_OPTS_INIT(.count = 2);
  sbx_sandbox **kids = NULL;
  size_t n = 0;
  char *json = NULL;
  if (sbx_sandbox_fork(s, &fo, &kids, &n, &json, &err) < 0) fail_msg("fork: %s", err.msg);
  assert_int_equal(n, 2);
  assert_non_null(strstr(json, "\"keeps\":\"filesystem\""));
  sbx_free(json);
  for (size_t i = 0; i < n; i++) {
    out_of(kids[i], "cat /root/p", out, sizeof out);
    assert_string_equal(out, "parent\n");
    assert_int_equal(sbx_sandbox_release(kids[i], &err), 0);
    sbx_sandbox_free(kids[i]);
  }
  sbx_free(kids);
  fo.count = 100; /* past max_fork_count: a 400, nothing made */
  assert_int_equal(sbx_sandbox_fork(s, &fo, &kids, &n, NULL, &err), SBX_E_REMOTE);
  assert_int_equal(err.detail, 400);
  sbx_checkpoint ck;
  assert_int_equal(sbx_sandbox_checkpoint(s, "c1", &ck, NULL, &err), 0);
  assert_true(strncmp(ck.id, "ck_", 3) == 0);
  assert_string_equal(ck.sandbox_id, sbx_sandbox_id(s));
  sbx_checkpoint *list = NULL;
  assert_int_equal(sbx_client_checkpoints(C, &list, &n, NULL, &err), 0);
  bool found = false;
  for (size_t i = 0; i < n; i++) found |= strcmp(list[i].id, ck.id) == 0;
  sbx_free(list);
  assert_true(found);
  sbx_branch_opts bo = SBX_BRANCH_OPTS_INIT(.ttl_seconds = 120);
  sbx_sandbox *b = NULL;
  assert_int_equal(sbx_client_branch(C, ck.id, &bo, &b, NULL, &err), 0);
  out_of(b, "cat /root/p", out, sizeof out);
  assert_string_equal(out, "parent\n");
  assert_int_equal(sbx_sandbox_release(b, &err), 0);
  sbx_sandbox_free(b);
  assert_int_equal(sbx_client_checkpoint_delete(C, ck.id, &err), 0);
  assert_int_equal(sbx_client_checkpoint_delete(C, ck.id, &err), SBX_E_REMOTE);
  assert_int_equal(err.detail, 404);
  assert_int_equal(sbx_client_branch(C, "bad id!", &bo, &b, NULL, &err), SBX_E_INVAL);
  char digest[80];
  assert_int_equal(sbx_sandbox_promote(s, "client-env", digest, sizeof digest, NULL, &err), 0);
  assert_true(strncmp(digest, "sha256:", 7) == 0 && strlen(digest) == 71);
  assert_int_equal(sbx_client_template_delete(C, "client-env", NULL, NULL, &err), 0);
  assert_int_equal(sbx_sandbox_release(s, &err), 0);
  sbx_sandbox_free(s);
}

/* The sbxctl verbs: each with --json; help says what is kept. */
static void test_sbxctl_lifecycle_verbs(void **state) {
  (void)state;
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("claim", "host"), NULL, &r, NULL, NULL), 0);
  char id[64] = {0}, ck[64] = {0}, kid[64] = {0};
  sscanf(r.out.ptr, "%63s", id);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "hibernate", id), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out.ptr, "\"hibernated\":true"));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("wake", id), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("fork", id, "-n", "2"), NULL, &r, NULL, NULL), 0);
  if (r.status != 0) fail_msg("fork: %s", r.err.ptr ? r.err.ptr : "");
  sscanf(r.out.ptr, "%63s", kid);
  assert_true(strncmp(kid, "sb_", 3) == 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "fork", id, "--count", "1"), NULL, &r, NULL, NULL), 0);
  assert_non_null(strstr(r.out.ptr, "\"children\""));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("fork", id, "-n", "0"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 2); /* usage */
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("checkpoint", id, "--name", "viacli"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  sscanf(r.out.ptr, "%63s", ck);
  assert_true(strncmp(ck, "ck_", 3) == 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "checkpoints"), NULL, &r, NULL, NULL), 0);
  assert_non_null(strstr(r.out.ptr, ck));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "branch", ck), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out.ptr, "\"from_checkpoint\""));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("--json", "promote", id, "cli-env"), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out.ptr, "\"content_digest\":\"sha256:"));
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("rm-checkpoint", ck), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 0);
  run_result_free(&r);
  assert_int_equal(run_sbxctl(ARGS("rm-checkpoint", ck), NULL, &r, NULL, NULL), 0);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err.ptr, "404"));
  run_result_free(&r);
  static const char *const verbs[] = {"hibernate", "fork", "checkpoint", "branch"};
  for (size_t i = 0; i < 4; i++) {
    assert_int_equal(run_sbxctl(ARGS(verbs[i], "--help"), NULL, &r, NULL, NULL), 0);
    assert_int_equal(r.status, 0);
    assert_true(strstr(r.out.ptr, "kept") || strstr(r.out.ptr, "keeps") || strstr(r.out.ptr, "fresh processes"));
    run_result_free(&r);
  }
}

static int tree_check(const char *root) {
  char p[600], target[64] = {0};
  struct stat st;
  snprintf(p, sizeof p, "%s/tree/bin/run.sh", root);
  if (lstat(p, &st) || (st.st_mode & 07777) != 0751 || st.st_size != 10) return 1;
  snprintf(p, sizeof p, "%s/tree/private", root);
  if (lstat(p, &st) || !S_ISDIR(st.st_mode) || (st.st_mode & 07777) != 0700) return 2;
  snprintf(p, sizeof p, "%s/tree/empty/deeper", root);
  if (lstat(p, &st) || !S_ISDIR(st.st_mode)) return 3;
  snprintf(p, sizeof p, "%s/tree/link", root);
  if (lstat(p, &st) || !S_ISLNK(st.st_mode) || readlink(p, target, sizeof target - 1) != 10 ||
      strcmp(target, "bin/run.sh") != 0)
    return 4;
  snprintf(p, sizeof p, "%s/tree/dangling", root);
  if (lstat(p, &st) || !S_ISLNK(st.st_mode)) return 5;
  return 0;
}

static void test_sbxctl_cp_roundtrip(void **state) {
  (void)state;
  sbx_sandbox *s = claim();
  assert_int_equal(state_save(sbx_sandbox_id(s), sbx_sandbox_token(s), sbx_sandbox_owner(s)), 0);
  char src[400], dst[400], p[600], rdst[200];
  snprintf(src, sizeof src, "%s/src", P.dir);
  snprintf(dst, sizeof dst, "%s/back", P.dir);
  snprintf(p, sizeof p, "%s/tree/bin", src);
  mkdir(src, 0755);
  snprintf(p, sizeof p, "%s/tree", src);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/tree/bin", src);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/tree/private", src);
  mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/tree/empty", src);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/tree/empty/deeper", src);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/tree/bin/run.sh", src);
  FILE *f = fopen(p, "w");
  fputs("echo ran\n\n", f);
  fclose(f);
  chmod(p, 0751);
  snprintf(p, sizeof p, "%s/tree/link", src);
  assert_int_equal(symlink("bin/run.sh", p), 0);
  snprintf(p, sizeof p, "%s/tree/dangling", src);
  assert_int_equal(symlink("nowhere", p), 0);
  assert_int_equal(tree_check(src), 0);
  mkdir(dst, 0755);

  char up_src[600], remote[200], down_src[300];
  snprintf(up_src, sizeof up_src, "%s/tree", src);
  snprintf(rdst, sizeof rdst, "/tmp/cp-roundtrip-%d", (int)getpid());
  assert_int_equal(sbxi_path_fmt(remote, sizeof remote, NULL, "%s:%s/", sbx_sandbox_id(s), rdst), 0);
  sbx_error err;
  assert_int_equal(sbx_sandbox_mkdir(s, rdst, true, &err), 0);
  run_result r;
  assert_int_equal(run_sbxctl(ARGS("cp", up_src, remote), NULL, &r, NULL, NULL), 0);
  if (r.status != 0) fail_msg("cp up: %s", r.err.ptr ? r.err.ptr : "");
  run_result_free(&r);
  snprintf(down_src, sizeof down_src, "%s:%s/tree", sbx_sandbox_id(s), rdst);
  assert_int_equal(run_sbxctl(ARGS("cp", down_src, dst), NULL, &r, NULL, NULL), 0);
  if (r.status != 0) fail_msg("cp down: %s", r.err.ptr ? r.err.ptr : "");
  run_result_free(&r);
  int bad = tree_check(dst);
  if (bad) fail_msg("round trip lost check %d", bad);
  assert_int_equal(sbx_sandbox_remove(s, rdst, true, &err), 0);
  assert_int_equal(sbx_sandbox_release(s, &err), 0);
  state_forget(sbx_sandbox_id(s));
  sbx_sandbox_free(s);
}

/* sbxctl shell in a child on a pseudo-terminal: stty size shows the
 * window we set, exit N ends it with N. */
static void test_sbxctl_shell(void **state) {
  (void)state;
  sbx_sandbox *s = claim();
  assert_int_equal(state_save(sbx_sandbox_id(s), sbx_sandbox_token(s), sbx_sandbox_owner(s)), 0);
  struct winsize ws = {.ws_row = 33, .ws_col = 101};
  int master, errp[2];
  assert_int_equal(pipe(errp), 0); /* sbxctl's own errors, apart from the terminal */
  pid_t pid = forkpty(&master, NULL, NULL, &ws);
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(errp[1], 2);
    close(errp[0]);
    char *argv[] = {"sbxctl", "shell", (char *)sbx_sandbox_id(s), NULL};
    _exit(sbxctl_remote_main(3, argv));
  }
  close(errp[1]);
  sbx_buf seen = SBX_BUF_INIT(1 << 20);
  sbx_error err;
  bool asked = false, sized = false;
  char buf[4096];
  /* Event-driven, no deadline (ctest's timeout is the guard): the first
   * output is the prompt, then ask for the size, then exit once it shows. */
  for (;;) {
    struct pollfd pf = {master, POLLIN, 0};
    if (poll(&pf, 1, -1) < 0) continue;
    ssize_t k = read(master, buf, sizeof buf);
    if (k <= 0) break; /* EIO: the child closed the terminal */
    sbx_buf_add(&seen, buf, (size_t)k, &err);
    if (!asked) {
      assert_int_equal(write(master, "stty size\n", 10), 10);
      asked = true;
    }
    if (!sized && seen.ptr && strstr(seen.ptr, "33 101")) {
      sized = true;
      assert_int_equal(write(master, "exit 7\n", 7), 7);
    }
  }
  int st;
  waitpid(pid, &st, 0);
  close(master);
  char errs[1024] = {0};
  fcntl(errp[0], F_SETFL, O_NONBLOCK);
  if (read(errp[0], errs, sizeof errs - 1) < 0) errs[0] = 0;
  close(errp[0]);
  if (!sized)
    fail_msg("no '33 101' in the shell output: [%s], status %d, stderr: %s", seen.ptr ? seen.ptr : "", st, errs);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 7);
  sbx_buf_free(&seen);
  assert_int_equal(sbx_sandbox_release(s, &err), 0);
  state_forget(sbx_sandbox_id(s));
  sbx_sandbox_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_claim_exec_release), cmocka_unit_test(test_reuse_through_relay),
      cmocka_unit_test(test_100mib_through_relay), cmocka_unit_test(test_sbxctl_lifecycle),
      cmocka_unit_test(test_sbxctl_pools_and_operator), cmocka_unit_test(test_sbxctl_port_forward),
      cmocka_unit_test(test_sbxctl_cp_roundtrip), cmocka_unit_test(test_sbxctl_shell),
      cmocka_unit_test(test_client_lifecycle), cmocka_unit_test(test_sbxctl_lifecycle_verbs),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
