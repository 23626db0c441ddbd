/* test_pool: the pool manager and lease table of libsandbox/pool against a
 * fake provider (no driver): refill to target, LIFO, drain, retune,
 * backoff, capacity parking, the adaptive watermark, admission caps, the
 * workers' scheduling class. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include <sandbox/core.h>
#include <sandbox/pool.h>

#include "pool/secret.h"

struct fake {
  pthread_mutex_t mu;
  int made, destroyed, forgotten, prepared;
  int fail_next;          /* provision failures still to inject */
  const char *fail_msg;
  int prepare_fail;       /* prepare failures still to inject */
  intptr_t dead_upto;     /* instances 1..dead_upto have "died" */
};

static int f_prepare(void *ud, const sbx_pool_key *key, sbx_error *err) {
  struct fake *f = ud;
  pthread_mutex_lock(&f->mu);
  int fail = f->prepare_fail > 0 ? f->prepare_fail-- : 0;
  f->prepared++;
  pthread_mutex_unlock(&f->mu);
  return fail ? sbx_err(err, SBX_E_INTERNAL, "golden failed") : 0;
}

static int f_provision(void *ud, const sbx_pool_key *key, int probe_ms, void **inst, sbx_error *err) {
  struct fake *f = ud;
  usleep(2000); /* a lead time the watermark can measure */
  pthread_mutex_lock(&f->mu);
  if (f->fail_next > 0) {
    f->fail_next--;
    pthread_mutex_unlock(&f->mu);
    return sbx_err(err, SBX_E_OS, "%s", f->fail_msg ? f->fail_msg : "clone failed");
  }
  int n = ++f->made;
  pthread_mutex_unlock(&f->mu);
  *inst = (void *)(intptr_t)n;
  return 0;
}

static void f_destroy(void *ud, void *inst) {
  struct fake *f = ud;
  pthread_mutex_lock(&f->mu);
  f->destroyed++;
  pthread_mutex_unlock(&f->mu);
}

static void f_forget(void *ud, void *inst) {
  struct fake *f = ud;
  f->forgotten++;
}

static struct fake F;
static sbx_pool_mgr *M;

static bool f_alive(void *ud, void *inst) {
  struct fake *f = ud;
  return (intptr_t)inst > f->dead_upto;
}

static int setup(void **state) {
  memset(&F, 0, sizeof F);
  pthread_mutex_init(&F.mu, NULL);
  sbx_pool_provider p = SBX_POOL_PROVIDER_INIT(f_prepare, f_provision, f_destroy, f_forget, &F, f_alive);
  return sbx_pool_mgr_new(&p, 2, &M, NULL);
}

static int teardown(void **state) {
  sbx_pool_mgr_free(M);
  pthread_mutex_destroy(&F.mu);
  return 0;
}

static sbx_pool_key key(const char *t) {
  sbx_pool_key k;
  memset(&k, 0, sizeof k);
  snprintf(k.tmpl, sizeof k.tmpl, "%s", t);
  snprintf(k.net, sizeof k.net, "none");
  snprintf(k.size, sizeof k.size, "small");
  return k;
}

static sbx_pool_stat stat_of(const char *t) {
  sbx_pool_stat st[8];
  size_t n = sbx_pool_mgr_stats(M, st, 8);
  for (size_t i = 0; i < n && i < 8; i++)
    if (strcmp(st[i].key.tmpl, t) == 0) return st[i];
  sbx_pool_stat none = {.warm = -1};
  return none;
}

/* Run the loop until the pool is settled: nothing in flight. */
static void settle(void) {
  for (int i = 0; i < 100000; i++) {
    struct pollfd pf = {sbx_pool_mgr_fd(M), POLLIN, 0};
    if (poll(&pf, 1, 1) > 0) sbx_pool_mgr_dispatch(M);
    sbx_pool_stat st[8];
    size_t n = sbx_pool_mgr_stats(M, st, 8);
    bool busy = false;
    for (size_t k = 0; k < n; k++) busy |= st[k].refilling > 0 || st[k].preparing;
    if (!busy && poll(&pf, 1, 0) == 0 && i > 2) return;
  }
  fail_msg("pool did not settle");
}

static void set1(const char *t, int warm, int warm_max) {
  sbx_pool_conf c = SBX_POOL_CONF_INIT(.key = key(t), .warm = warm, .warm_max = warm_max);
  assert_int_equal(sbx_pool_mgr_set_pools(M, &c, 1, NULL), 0);
}

static void test_refill_and_lifo(void **state) {
  set1("host", 3, 0);
  settle();
  sbx_pool_stat st = stat_of("host");
  assert_int_equal(st.warm, 3);
  assert_int_equal(st.target, 3);
  assert_true(st.golden);
  assert_int_equal(F.prepared, 1);
  sbx_pool_key k = key("host");
  void *a, *b;
  assert_int_equal(sbx_pool_mgr_take(M, &k, &a), 0);
  assert_int_equal(sbx_pool_mgr_take(M, &k, &b), 0);
  /* LIFO: the most recently pushed comes out first. */
  assert_true((intptr_t)a > (intptr_t)b);
  settle(); /* the kick refilled */
  assert_int_equal(stat_of("host").warm, 3);
  sbx_pool_key other = key("other");
  void *x;
  assert_int_equal(sbx_pool_mgr_take(M, &other, &x), SBX_E_NOTFOUND);
  assert_false(sbx_pool_mgr_pooled(M, &other));
}

static void test_kick_delay(void **state) {
  sbx_pool_mgr_set_kick_delay(M, 3600ull * 1000000000ull);
  set1("host", 2, 0);
  settle();
  assert_int_equal(stat_of("host").warm, 2);
  sbx_pool_key k = key("host");
  void *a, *b;
  assert_int_equal(sbx_pool_mgr_take(M, &k, &a), 0);
  uint64_t due = sbx_pool_mgr_kick_due(M);
  assert_true(due > 0);
  assert_int_equal(sbx_pool_mgr_take(M, &k, &b), 0);
  assert_true(sbx_pool_mgr_kick_due(M) == due); /* merged */
  settle();
  assert_int_equal(stat_of("host").warm, 0); /* not yet */
  sbx_pool_mgr_kick(M);
  assert_int_equal(sbx_pool_mgr_kick_due(M), 0);
  settle();
  assert_int_equal(stat_of("host").warm, 2);
  /* A miss kicks at once: a claim is waiting. */
  for (int i = 0; i < 2; i++) assert_int_equal(sbx_pool_mgr_take(M, &k, &a), 0);
  sbx_pool_mgr_kick(M);
  settle();
  sbx_pool_mgr_set_draining(M, true);
  assert_int_equal(sbx_pool_mgr_take(M, &k, &a), SBX_E_NOTFOUND);
}

static void test_drain_and_retune(void **state) {
  set1("host", 2, 0);
  settle();
  sbx_pool_mgr_set_draining(M, true);
  assert_int_equal(stat_of("host").warm, 0);
  sbx_pool_mgr_tick(M, sbx_now_ns());
  settle();
  assert_int_equal(stat_of("host").warm, 0);
  assert_int_equal(F.destroyed, 2);
  sbx_pool_mgr_set_draining(M, false);
  settle();
  assert_int_equal(stat_of("host").warm, 2);
  /* Retune: host omitted (its warm ones destroyed), b added. */
  sbx_pool_conf c[2] = {SBX_POOL_CONF_INIT(.key = key("b"), .warm = 1),
                        SBX_POOL_CONF_INIT(.key = key("c"), .warm = 0)};
  assert_int_equal(sbx_pool_mgr_set_pools(M, c, 2, NULL), 0);
  settle();
  assert_int_equal(stat_of("host").warm, -1);
  assert_int_equal(stat_of("b").warm, 1);
  assert_int_equal(stat_of("c").warm, 0);
  assert_int_equal(F.destroyed, 4);
  /* Duplicate keys are refused and change nothing. */
  sbx_pool_conf dup[2] = {SBX_POOL_CONF_INIT(.key = key("d"), .warm = 1),
                          SBX_POOL_CONF_INIT(.key = key("d"), .warm = 1)};
  assert_int_equal(sbx_pool_mgr_set_pools(M, dup, 2, NULL), SBX_E_INVAL);
  assert_int_equal(stat_of("b").warm, 1);
}

static void test_backoff_and_capacity(void **state) {
  F.fail_next = 8;
  set1("host", 1, 0);
  /* Keep ticking until eight failures are counted. */
  for (int i = 0; i < 100 && stat_of("host").failures < 8; i++) {
    sbx_pool_mgr_tick(M, sbx_now_ns());
    settle();
  }
  assert_int_equal(stat_of("host").failures, 8);
  assert_int_equal(stat_of("host").warm, 0);
  /* Backed off: a kick right away starts nothing. */
  sbx_pool_mgr_kick(M);
  settle();
  assert_int_equal(stat_of("host").warm, 0);
  /* After the backoff, the next tick succeeds and resets the count. */
  usleep(300 * 1000);
  sbx_pool_mgr_tick(M, sbx_now_ns());
  settle();
  assert_int_equal(stat_of("host").warm, 1);
  assert_int_equal(stat_of("host").failures, 0);

  /* A full host parks refill for the whole node. */
  sbx_pool_key k = key("host");
  void *x;
  F.fail_next = 1;
  F.fail_msg = "clone: No space left on device";
  assert_int_equal(sbx_pool_mgr_take(M, &k, &x), 0);
  settle();
  const char *why;
  assert_true(sbx_pool_mgr_at_capacity(M, &why));
  assert_non_null(strstr(why, "No space"));
  sbx_pool_mgr_tick(M, sbx_now_ns());
  settle();
  assert_int_equal(stat_of("host").warm, 0);
}

static void test_prepare_retry(void **state) {
  F.prepare_fail = 1;
  set1("host", 1, 0);
  settle();
  assert_false(stat_of("host").golden);
  assert_int_equal(stat_of("host").warm, 0);
  /* Retried only after 30 s: a tick now does not rebuild. */
  sbx_pool_mgr_tick(M, sbx_now_ns());
  settle();
  assert_int_equal(F.prepared, 1);
  sbx_pool_mgr_tick(M, sbx_now_ns() + 31ull * 1000000000ull);
  settle();
  assert_true(stat_of("host").golden);
  assert_int_equal(stat_of("host").warm, 1);
}

struct prov_res {
  void *inst;
  int calls;
  char msg[64];
};

static void on_prov(void *arg, void *inst, const sbx_error *err) {
  struct prov_res *r = arg;
  r->inst = inst;
  r->calls++;
  if (!inst) snprintf(r->msg, sizeof r->msg, "%.*s", (int)sizeof r->msg - 1, err->msg);
}

static void test_watermark(void **state) {
  set1("host", 0, 4);
  settle();
  assert_int_equal(stat_of("host").target, 0);
  sbx_pool_key k = key("host");
  /* A miss still counts as demand, and its clone teaches the lead. */
  void *x;
  for (int i = 0; i < 50; i++) assert_int_equal(sbx_pool_mgr_take(M, &k, &x), SBX_E_NOTFOUND);
  struct prov_res r = {0};
  sbx_pool_mgr_provision(M, &k, 1000, on_prov, &r);
  for (int i = 0; i < 100000 && r.calls == 0; i++) {
    struct pollfd pf = {sbx_pool_mgr_fd(M), POLLIN, 0};
    if (poll(&pf, 1, 1) > 0) sbx_pool_mgr_dispatch(M);
  }
  assert_non_null(r.inst);
  uint64_t now = sbx_now_ns();
  sbx_pool_mgr_tick(M, now + 1100ull * 1000000ull);
  settle();
  /* rate = 15/s after one bin, lead > 0: the target grows at once. */
  assert_true(stat_of("host").target >= 1);
  assert_true(stat_of("host").target <= 4);
  int grown = stat_of("host").warm;
  assert_true(grown >= 1);
  /* Silence decays the rate; trimming waits for 60 s above target. */
  sbx_pool_mgr_tick(M, now + 4000ull * 1000000000ull);
  settle();
  assert_int_equal(stat_of("host").target, 0);
  assert_int_equal(stat_of("host").warm, grown);
  sbx_pool_mgr_tick(M, now + 4061ull * 1000000000ull);
  settle();
  assert_int_equal(stat_of("host").warm, 0);
}

static void test_shutdown_forgets_warm(void **state) {
  set1("host", 2, 0);
  settle();
  sbx_pool_mgr_free(M);
  assert_int_equal(F.forgotten, 2);
  assert_int_equal(F.destroyed, 0);
  sbx_pool_provider p = SBX_POOL_PROVIDER_INIT(f_prepare, f_provision, f_destroy, f_forget, &F, f_alive);
  assert_int_equal(sbx_pool_mgr_new(&p, 2, &M, NULL), 0);
}

static void test_provision_on_miss(void **state) {
  sbx_pool_key k = key("cold");
  struct prov_res r = {0};
  sbx_pool_mgr_provision(M, &k, 1000, on_prov, &r);
  for (int i = 0; i < 100000 && r.calls == 0; i++) {
    struct pollfd pf = {sbx_pool_mgr_fd(M), POLLIN, 0};
    if (poll(&pf, 1, 1) > 0) sbx_pool_mgr_dispatch(M);
  }
  assert_int_equal(r.calls, 1);
  assert_non_null(r.inst);
  F.fail_next = 1;
  memset(&r, 0, sizeof r);
  sbx_pool_mgr_provision(M, &k, 1000, on_prov, &r);
  for (int i = 0; i < 100000 && r.calls == 0; i++) {
    struct pollfd pf = {sbx_pool_mgr_fd(M), POLLIN, 0};
    if (poll(&pf, 1, 1) > 0) sbx_pool_mgr_dispatch(M);
  }
  assert_null(r.inst);
  assert_string_equal(r.msg, "clone failed");
}

/* Background jobs run lowered, urgent ones at normal priority, on the
 * same workers (the test runs as root: raising back needs CAP_SYS_NICE). */
struct sched_probe {
  int nice, policy;
  cpu_set_t cpus;
  bool done;
};

static void probe_work(void *arg) {
  struct sched_probe *p = arg;
  pid_t tid = (pid_t)syscall(SYS_gettid);
  errno = 0;
  p->nice = getpriority(PRIO_PROCESS, (id_t)tid);
  p->policy = sched_getscheduler(tid);
  sched_getaffinity(tid, sizeof p->cpus, &p->cpus);
}

static void probe_done(void *arg, bool cancelled) { ((struct sched_probe *)arg)->done = true; }

static void run_probe(struct sched_probe *p, bool urgent) {
  memset(p, 0, sizeof *p);
  sbx_pool_mgr_submit(M, probe_work, probe_done, p, urgent);
  for (int i = 0; i < 100000 && !p->done; i++) {
    struct pollfd pf = {sbx_pool_mgr_fd(M), POLLIN, 0};
    if (poll(&pf, 1, 1) > 0) sbx_pool_mgr_dispatch(M);
  }
  assert_true(p->done);
}

static void test_worker_sched(void **state) {
  struct sched_probe p;
  errno = 0;
  int inherited = getpriority(PRIO_PROCESS, 0);
  cpu_set_t all, spared;
  assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
  spared = all;
  if (CPU_COUNT(&all) >= 2) { /* the first allowed CPU is the one kept free */
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
      if (CPU_ISSET(cpu, &all)) {
        CPU_CLR(cpu, &spared);
        break;
      }
  }
  run_probe(&p, false);
  assert_int_equal(p.nice, inherited); /* default: left as started */
  assert_true(CPU_EQUAL(&p.cpus, &all));
  /* Relative to the nice the test was started with (scripts may run it
   * under `nice -n 5`): urgent jobs go back to that, not to nice 0. */
  sbx_pool_mgr_set_background(M, SBX_POOL_SCHED_NICE, false);
  for (int i = 0; i < 4; i++) { /* both workers, whichever takes the job */
    run_probe(&p, false);
    assert_int_equal(p.policy, SCHED_OTHER);
    assert_int_equal(p.nice, inherited + SBX_POOL_NICE > 19 ? 19 : inherited + SBX_POOL_NICE);
    assert_true(CPU_EQUAL(&p.cpus, &all));
    run_probe(&p, true);
    assert_int_equal(p.nice, inherited);
  }
  sbx_pool_mgr_set_background(M, SBX_POOL_SCHED_NICE, true);
  for (int i = 0; i < 4; i++) {
    run_probe(&p, false);
    assert_true(CPU_EQUAL(&p.cpus, &spared));
    run_probe(&p, true); /* a claim waiting on a clone may use every CPU */
    assert_true(CPU_EQUAL(&p.cpus, &all));
    assert_int_equal(p.nice, inherited);
  }
  sbx_pool_mgr_set_background(M, SBX_POOL_SCHED_IDLE, true);
  run_probe(&p, false);
  assert_int_equal(p.policy, SCHED_IDLE);
  assert_true(CPU_EQUAL(&p.cpus, &spared));
  run_probe(&p, true);
  assert_int_equal(p.policy, SCHED_OTHER);
  assert_int_equal(p.nice, inherited);
  assert_true(CPU_EQUAL(&p.cpus, &all));
}

static void test_leases(void **state) {
  sbx_lease_table *t = sbx_lease_table_new();
  sbx_error err;
  /* node cap 3, tenant cap 2: reservations count before commit. */
  assert_int_equal(sbx_lease_reserve(t, "acme", 3, 2, &err), 0);
  assert_int_equal(sbx_lease_reserve(t, "acme", 3, 2, &err), 0);
  assert_int_equal(sbx_lease_reserve(t, "acme", 3, 2, &err), SBX_E_BUSY);
  assert_int_equal(err.detail, SBX_LEASE_CAP_TENANT);
  assert_int_equal(sbx_lease_reserve(t, "", 3, 0, &err), 0);
  assert_int_equal(sbx_lease_reserve(t, "", 3, 0, &err), SBX_E_BUSY);
  assert_int_equal(err.detail, SBX_LEASE_CAP_NODE);
  sbx_lease proto = {0};
  snprintf(proto.tenant, sizeof proto.tenant, "acme");
  proto.claim_ref = "ref";
  sbx_lease *a, *b;
  assert_int_equal(sbx_lease_commit(t, &proto, true, &a, &err), 0);
  assert_int_equal(sbx_lease_commit(t, &proto, true, &b, &err), 0);
  assert_int_equal(strlen(a->id), 19);
  assert_memory_equal(a->id, "sb_", 3);
  assert_int_equal(strlen(a->token), 32);
  assert_string_not_equal(a->id, b->id);
  assert_string_not_equal(a->token, b->token);
  assert_string_equal(a->claim_ref, "ref");
  assert_ptr_not_equal(a->claim_ref, proto.claim_ref);
  assert_int_equal(sbx_lease_count_tenant(t, "acme"), 2);
  assert_int_equal(sbx_lease_reserve(t, "acme", 3, 2, &err), SBX_E_BUSY);
  sbx_lease_unreserve(t, ""); /* the root claim failed */
  assert_int_equal(sbx_lease_reserve(t, "", 3, 0, &err), 0);
  assert_ptr_equal(sbx_lease_find(t, a->id), a);
  sbx_lease_remove(t, a);
  assert_int_equal(sbx_lease_count(t), 1);
  assert_int_equal(sbx_lease_reserve(t, "acme", 0, 2, &err), 0); /* one lease left, so room for one more */
  assert_int_equal(sbx_lease_reserve(t, "acme", 0, 2, &err), SBX_E_BUSY);
  sbx_lease_table_free(t);
}

/* A warm instance that died in the stack is never handed out: take skips
 * it, the tick drops it, and refill replaces it. */
static void test_dead_warm_replaced(void **state) {
  set1("host", 3, 0);
  settle();
  sbx_pool_key k = key("host");
  /* Every warm one died: take passes over them and finds none. */
  F.dead_upto = F.made;
  void *a;
  assert_int_equal(sbx_pool_mgr_take(M, &k, &a), SBX_E_NOTFOUND);
  settle();
  assert_int_equal(F.destroyed, 3);
  assert_int_equal(stat_of("host").warm, 3); /* replaced */
  assert_int_equal(sbx_pool_mgr_take(M, &k, &a), 0);
  assert_true((intptr_t)a > F.dead_upto);
  sbx_pool_mgr_destroy(M, a);
  settle();
  /* They die in the stack: the tick drops them and refill makes them up. */
  int destroyed = F.destroyed;
  F.dead_upto = F.made;
  sbx_pool_mgr_tick(M, sbx_now_ns());
  settle();
  assert_int_equal(F.destroyed, destroyed + 3);
  assert_int_equal(stat_of("host").warm, 3);
  assert_int_equal(sbx_pool_mgr_take(M, &k, &a), 0);
  assert_true((intptr_t)a > F.dead_upto);
  sbx_pool_mgr_destroy(M, a);
  set1("host", 0, 0);
  settle();
}

static void test_secret_eq(void **state) {
  assert_true(sbxi_secret_eq("abc", "abc"));
  assert_false(sbxi_secret_eq("abc", "abd"));
  assert_false(sbxi_secret_eq("abc", "abcd"));
  assert_false(sbxi_secret_eq("", "a"));
  assert_true(sbxi_secret_eq("", ""));
  char h[33];
  assert_int_equal(sbxi_random_hex(h, 16, NULL), 0);
  assert_int_equal(strspn(h, "0123456789abcdef"), 32);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_refill_and_lifo, setup, teardown),
      cmocka_unit_test_setup_teardown(test_drain_and_retune, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kick_delay, setup, teardown),
      cmocka_unit_test_setup_teardown(test_backoff_and_capacity, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prepare_retry, setup, teardown),
      cmocka_unit_test_setup_teardown(test_watermark, setup, teardown),
      cmocka_unit_test_setup_teardown(test_shutdown_forgets_warm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_provision_on_miss, setup, teardown),
      cmocka_unit_test_setup_teardown(test_worker_sched, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dead_warm_replaced, setup, teardown),
      cmocka_unit_test(test_leases),
      cmocka_unit_test(test_secret_eq),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
