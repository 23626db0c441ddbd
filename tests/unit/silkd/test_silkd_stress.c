/* test_silkd_stress.c - backpressure and isolation (§5.2, issue 3):
 * 256 MiB through a slowly reading client arrives whole and in order with
 * silkd's memory bounded; 100 concurrent execs complete while another client
 * has stopped reading. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <endian.h>

#include "silkd_client.h"

static silkd_srv srv;
static char self[4096];

static int setup(void **state) { return silkd_start(&srv); }
static int teardown(void **state) {
  int st = silkd_stop(&srv);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Child mode: write n bytes of 8-byte big-endian counters to stdout. */
static int generate(uint64_t n) {
  static uint64_t buf[8192];
  uint64_t k = 0;
  while (n > 0) {
    for (size_t i = 0; i < 8192; i++) buf[i] = htobe64(k++);
    size_t chunk = n < sizeof buf ? (size_t)n : sizeof buf;
    const char *p = (const char *)buf;
    size_t left = chunk;
    while (left) {
      ssize_t w = write(1, p, left);
      if (w <= 0) return 1;
      p += w;
      left -= (size_t)w;
    }
    n -= chunk;
  }
  return 0;
}

static long vm_kib(pid_t pid, const char *key) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, strlen(key))) v = atol(line + strlen(key) + 1);
  if (f) fclose(f);
  return v;
}

static void test_256mib_slow_reader(void **state) {
  const uint64_t total = 256ull << 20;
  sc *c = sc_open(&srv);
  sc_sendf(c, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"%s\",\"--gen\",\"%llu\"]}", self, (unsigned long long)total);
  uint64_t got = 0, next = 0;
  uint8_t partial[8];
  size_t plen = 0;
  int code = -2;
  long frames = 0;
  for (;;) {
    sbx_wire_resp r;
    assert_int_equal(sc_recv(c, &r), 1);
    frames++;
    if (r.type == SBX_RESP_STDOUT) {
      const uint8_t *p = r.u.stdout_.data.ptr;
      size_t n = r.u.stdout_.data.len;
      got += n;
      for (size_t i = 0; i < n; i++) {
        partial[plen++] = p[i];
        if (plen == 8) {
          uint64_t v;
          memcpy(&v, partial, 8);
          if (be64toh(v) != next) fail_msg("out of order at %llu", (unsigned long long)next);
          next++;
          plen = 0;
        }
      }
      /* Read slowly for the first 32 MiB: the child must be paced. */
      if (got < (32u << 20)) usleep(2000);
    } else if (r.type == SBX_RESP_EXIT) {
      code = r.u.exit.code;
      sbx_wire_resp_free(&r);
      break;
    } else {
      assert_int_equal(r.type, SBX_RESP_STARTED);
    }
    sbx_wire_resp_free(&r);
  }
  assert_int_equal(code, 0);
  assert_int_equal(got, total);
  long hwm = vm_kib(srv.pid, "VmHWM:");
  fprintf(stderr, "silkd VmHWM after 256 MiB through a slow reader: %ld KiB (%ld frames)\n", hwm, frames);
#if defined(__SANITIZE_ADDRESS__)
  /* ASan's quarantine and shadow memory make RSS meaningless here. */
  assert_true(hwm > 0);
#else
  assert_true(hwm > 0 && hwm < 64 * 1024);
#endif
  sc_close(c);
}

static void test_100_concurrent_with_stuck_client(void **state) {
  /* A client that never reads while its exec floods output. */
  sc *stuck = sc_open(&srv);
  sc_sendf(stuck, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"yes\"]}");
  enum { N = 100 };
  sc *cs[N];
  for (int i = 0; i < N; i++) {
    cs[i] = sc_open(&srv);
    assert_non_null(cs[i]);
    sc_sendf(cs[i], "{\"v\":1,\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"head -c 100000 /dev/zero; echo conn-%d\"]}", i);
  }
  for (int i = 0; i < N; i++) {
    sc_result res;
    assert_int_equal(sc_collect(cs[i], &res, SC_FIN_EXIT), 1);
    assert_int_equal(res.final, SBX_RESP_EXIT);
    assert_int_equal(res.code, 0);
    char want[32];
    snprintf(want, sizeof want, "conn-%d\n", i);
    assert_int_equal(res.out.len, 100000 + strlen(want));
    assert_memory_equal(res.out.ptr + 100000, want, strlen(want));
    sc_result_free(&res);
    sc_close(cs[i]);
  }
  long rss = vm_kib(srv.pid, "VmRSS:");
  fprintf(stderr, "silkd VmRSS with one stuck streaming client: %ld KiB\n", rss);
  /* the stuck client's child is still running, paced by the full queue */
  sc *k = sc_open(&srv);
  sc_sendf(k, "{\"v\":1,\"op\":\"ps\"}");
  sbx_wire_resp r;
  assert_int_equal(sc_recv(k, &r), 1);
  assert_int_equal(r.type, SBX_RESP_PROCS);
  assert_int_equal(r.u.procs.len, 1);
  uint32_t pid = r.u.procs.items[0].pid;
  sbx_wire_resp_free(&r);
  sc_sendf(k, "{\"v\":1,\"op\":\"kill\",\"pid\":%u}", pid);
  sc_result res;
  assert_int_equal(sc_collect(k, &res, SC_FIN_DONE), 1);
  sc_result_free(&res);
  sc_close(k);
  /* draining the stuck client now yields everything up to exit 137 */
  assert_int_equal(sc_collect(stuck, &res, SC_FIN_EXIT), 1);
  assert_int_equal(res.final, SBX_RESP_EXIT);
  assert_int_equal(res.code, 137);
  sc_result_free(&res);
  sc_close(stuck);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--gen")) return generate(strtoull(argv[2], NULL, 10));
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 1;
  self[n] = 0;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_256mib_slow_reader),
      cmocka_unit_test(test_100_concurrent_with_stuck_client),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, setup, teardown);
}
