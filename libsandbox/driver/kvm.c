/* Is /dev/kvm usable for the qemu driver's guest (a stock Debian kernel)?
 *
 * Opening /dev/kvm proves little. This development host has one served by
 * kvm_pvm (a PVM hypervisor: no VMX/SVM, guests must be PVM-enabled
 * kernels): a toy real-mode guest runs to its HLT there, QEMU starts, and
 * the stock kernel never boots. So "usable" is checked in cheap steps, each
 * of which can only say no:
 *   1. no earlier golden build on this boot hung under KVM (the mark);
 *   2. /dev/kvm opens read-write and KVM_GET_API_VERSION is 12;
 *   3. it is backed by hardware virtualization: kvm_intel or kvm_amd is
 *      loaded (a PVM or other software backend is named and refused);
 *   4. the extensions QEMU refuses to start without are there, and
 *      KVM_CREATE_VM succeeds;
 *   5. a one-page real-mode guest runs to its HLT through KVM_RUN.
 * Steps 2-5 are done once per process (about a millisecond); the mark is
 * looked at every time since a golden build may leave it later. */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvm.h"

static bool run_toy_guest(int kvm, int vm) {
  bool ok = false;
  int cpu = -1;
  void *mem = mmap(NULL, 0x1000, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  struct kvm_run *run = MAP_FAILED;
  long run_size = 0;
  if (mem == MAP_FAILED) return false;
  /* mov $0x2a, %al; out %al, $0x10; hlt */
  static const unsigned char code[] = {0xb0, 0x2a, 0xe6, 0x10, 0xf4};
  memcpy(mem, code, sizeof code);
  struct kvm_userspace_memory_region region = {.slot = 0, .guest_phys_addr = 0x1000, .memory_size = 0x1000,
                                               .userspace_addr = (uint64_t)(uintptr_t)mem};
  if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0) goto out;
  if ((cpu = ioctl(vm, KVM_CREATE_VCPU, 0)) < 0) goto out;
  if ((run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0)) <= 0) goto out;
  run = mmap(NULL, (size_t)run_size, PROT_READ | PROT_WRITE, MAP_SHARED, cpu, 0);
  if (run == MAP_FAILED) goto out;
  struct kvm_sregs sregs;
  if (ioctl(cpu, KVM_GET_SREGS, &sregs) < 0) goto out;
  sregs.cs.base = 0;
  sregs.cs.selector = 0;
  if (ioctl(cpu, KVM_SET_SREGS, &sregs) < 0) goto out;
  struct kvm_regs regs = {.rip = 0x1000, .rflags = 0x2};
  if (ioctl(cpu, KVM_SET_REGS, &regs) < 0) goto out;
  bool saw_out = false;
  for (int i = 0; i < 4; i++) {
    if (ioctl(cpu, KVM_RUN, 0) < 0) break;
    if (run->exit_reason == KVM_EXIT_IO && run->io.port == 0x10 &&
        ((unsigned char *)run)[run->io.data_offset] == 0x2a) {
      saw_out = true;
      continue;
    }
    ok = run->exit_reason == KVM_EXIT_HLT && saw_out;
    break;
  }
out:
  if (run != MAP_FAILED) munmap(run, (size_t)run_size);
  munmap(mem, 0x1000);
  if (cpu >= 0) close(cpu);
  return ok;
}

static bool module_loaded(const char *name) {
  char p[64];
  snprintf(p, sizeof p, "/sys/module/%s", name);
  return access(p, F_OK) == 0;
}

static struct {
  pthread_once_t once;
  bool usable;
  char why[160];
} probe = {PTHREAD_ONCE_INIT, false, ""};

static void kvm_probe(void) {
  char *why = probe.why;
  size_t len = sizeof probe.why;
  int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC), vm = -1;
  if (kvm < 0) {
    snprintf(why, len, "/dev/kvm: %s", strerror(errno));
    return;
  }
  int api = ioctl(kvm, KVM_GET_API_VERSION, 0);
  if (api != KVM_API_VERSION) {
    snprintf(why, len, "/dev/kvm: API version %d, not %d", api, KVM_API_VERSION);
    goto out;
  }
  if (!module_loaded("kvm_intel") && !module_loaded("kvm_amd")) {
    if (module_loaded("kvm_pvm"))
      snprintf(why, len, "/dev/kvm is served by kvm_pvm, which boots only PVM-enabled guest kernels");
    else
      snprintf(why, len, "/dev/kvm is not backed by hardware virtualization (no kvm_intel or kvm_amd)");
    goto out;
  }
  /* What QEMU 7.2's kvm_init and the x86 target insist on, plus the
   * in-kernel irqchip microvm uses by default. */
  static const struct {
    int cap;
    const char *name;
  } caps[] = {
      {KVM_CAP_USER_MEMORY, "USER_MEMORY"}, {KVM_CAP_DESTROY_MEMORY_REGION_WORKS, "DESTROY_MEMORY_REGION_WORKS"},
      {KVM_CAP_JOIN_MEMORY_REGIONS_WORKS, "JOIN_MEMORY_REGIONS_WORKS"}, {KVM_CAP_SET_TSS_ADDR, "SET_TSS_ADDR"},
      {KVM_CAP_EXT_CPUID, "EXT_CPUID"}, {KVM_CAP_MP_STATE, "MP_STATE"}, {KVM_CAP_IRQCHIP, "IRQCHIP"},
  };
  for (size_t i = 0; i < sizeof caps / sizeof *caps; i++)
    if (ioctl(kvm, KVM_CHECK_EXTENSION, caps[i].cap) <= 0) {
      snprintf(why, len, "/dev/kvm lacks KVM_CAP_%s", caps[i].name);
      goto out;
    }
  if ((vm = ioctl(kvm, KVM_CREATE_VM, 0)) < 0) {
    snprintf(why, len, "KVM_CREATE_VM: %s", strerror(errno));
    goto out;
  }
  if (!run_toy_guest(kvm, vm)) {
    snprintf(why, len, "a one-page guest did not run to its HLT under /dev/kvm");
    goto out;
  }
  probe.usable = true;
  snprintf(why, len, "/dev/kvm runs guests (%s)", module_loaded("kvm_intel") ? "kvm_intel" : "kvm_amd");
out:
  if (vm >= 0) close(vm);
  close(kvm);
}

bool sbxi_kvm_usable(char *why, size_t len) {
  if (access(SBXI_KVM_BROKEN_MARK, F_OK) == 0) {
    if (why && len) snprintf(why, len, "a guest kernel hung under KVM earlier on this boot (%s)", SBXI_KVM_BROKEN_MARK);
    return false;
  }
  pthread_once(&probe.once, kvm_probe);
  if (why && len) snprintf(why, len, "%s", probe.why);
  return probe.usable;
}
