/* The driver registry and the size tier table: pure lookups, no jail; and
 * the KVM probe behind "auto", checked against what the host shows. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cmocka.h>

#include <sandbox/driver.h>

#include "driver/driver_internal.h"
#include "driver/kvm.h"

static void test_tiers_match_spec(void **state) {
  (void)state;
  size_t n = 0;
  const sbx_size_tier *t = sbx_size_tiers(&n);
  assert_int_equal(n, 5);
  static const struct {
    const char *name;
    unsigned vcpus;
    uint64_t mib;
  } want[] = {{"small", 1, 512}, {"medium", 2, 1024}, {"large", 4, 4096}, {"xlarge", 4, 8192}, {"2xlarge", 8, 16384}};
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(t[i].name, want[i].name);
    assert_int_equal(t[i].vcpus, want[i].vcpus);
    assert_int_equal(t[i].mem_bytes, want[i].mib << 20);
    assert_true(t[i].pids_max > 0);
    assert_ptr_equal(sbx_size_tier_get(want[i].name), &t[i]);
  }
  /* names are exact and lowercase; free-form values are refused */
  assert_null(sbx_size_tier_get("Small"));
  assert_null(sbx_size_tier_get("512M"));
  assert_null(sbx_size_tier_get(""));
  assert_null(sbx_size_tier_get(NULL));
}

static void test_registry(void **state) {
  (void)state;
  sbx_error err = {0};
  const sbx_driver_ops *jail = sbx_driver_get("jail", &err);
  assert_non_null(jail);
  assert_string_equal(jail->name, "jail");
  const sbx_driver_ops *qemu = sbx_driver_get("qemu", &err);
  assert_non_null(qemu);
  assert_string_equal(qemu->name, "qemu");
  /* auto (and NULL) is qemu exactly where the KVM probe says yes */
  char why[160];
  const sbx_driver_ops *want = sbxi_kvm_usable(why, sizeof why) ? qemu : jail;
  assert_ptr_equal(sbx_driver_get("auto", &err), want);
  assert_ptr_equal(sbx_driver_get(NULL, &err), want);
  assert_null(sbx_driver_get("firecracker", &err));
  assert_int_equal(err.code, SBX_E_NOTFOUND);
  sbx_driver *d = NULL;
  assert_int_equal(sbx_driver_open("firecracker", NULL, &d, &err), SBX_E_NOTFOUND);
  assert_null(d);
}

static bool exists(const char *p) { return access(p, F_OK) == 0; }

/* The probe's answer follows the host's evidence: no usable /dev/kvm, no
 * hardware backend (kvm_intel/kvm_amd), or the mark of a kernel that hung
 * under KVM each mean no, and the reason says which. (This development
 * host: /dev/kvm opens, is served by kvm_pvm, and a stock kernel never
 * boots on it, so the answer here is no.) */
static void test_kvm_probe(void **state) {
  (void)state;
  char why[160] = "", again[160] = "";
  bool usable = sbxi_kvm_usable(why, sizeof why);
  fprintf(stderr, "kvm probe: %s: %s\n", usable ? "usable" : "not usable", why);
  assert_true(why[0] != '\0');
  assert_int_equal(sbxi_kvm_usable(again, sizeof again), usable); /* cached, same answer */
  assert_string_equal(why, again);
  assert_int_equal(sbxi_kvm_usable(NULL, 0), usable);
  int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd >= 0) close(fd);
  bool hw = exists("/sys/module/kvm_intel") || exists("/sys/module/kvm_amd");
  if (exists(SBXI_KVM_BROKEN_MARK)) {
    assert_false(usable);
    assert_non_null(strstr(why, SBXI_KVM_BROKEN_MARK));
  } else if (fd < 0) {
    assert_false(usable);
    assert_non_null(strstr(why, "/dev/kvm"));
  } else if (!hw) {
    assert_false(usable);
    if (exists("/sys/module/kvm_pvm")) assert_non_null(strstr(why, "kvm_pvm"));
  }
  if (usable) assert_true(fd >= 0 && hw);
}

static void test_clone_spec_defaults(void **state) {
  (void)state;
  sbx_clone_spec s;
  memset(&s, 0x5a, sizeof s);
  sbx_clone_spec_init(&s);
  assert_int_equal(s.struct_size, sizeof s);
  assert_null(s.id);
  assert_int_equal(s.net, SBX_NET_NONE);
  for (int i = 0; i < 3; i++) assert_int_equal(s.stdio[i], -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tiers_match_spec),
      cmocka_unit_test(test_registry),
      cmocka_unit_test(test_kvm_probe),
      cmocka_unit_test(test_clone_spec_defaults),
  };
  return cmocka_run_group_tests_name("driver_registry", tests, NULL, NULL);
}
