/* Which accelerator QEMU gets, and the host TSC frequency for the guest.
 *
 * An openable /dev/kvm is not proof that KVM runs guests: a nested host can
 * expose one whose vCPUs never execute. So "usable" means a one-page
 * real-mode guest runs to its HLT. SBX_QEMU_ACCEL=kvm|tcg overrides. */
#include <cpuid.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "qemu.h"

static bool kvm_probe(void) {
  bool ok = false;
  int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC), vm = -1, cpu = -1;
  void *mem = MAP_FAILED;
  struct kvm_run *run = MAP_FAILED;
  long run_size = 0;
  if (kvm < 0 || ioctl(kvm, KVM_GET_API_VERSION, 0) != KVM_API_VERSION) goto out;
  if ((vm = ioctl(kvm, KVM_CREATE_VM, 0)) < 0) goto out;
  mem = mmap(NULL, 0x1000, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) goto out;
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
    if (ioctl(cpu, KVM_RUN, 0) < 0) goto out;
    if (run->exit_reason == KVM_EXIT_IO && run->io.port == 0x10 &&
        ((unsigned char *)run)[run->io.data_offset] == 0x2a) {
      saw_out = true;
      continue;
    }
    if (run->exit_reason == KVM_EXIT_HLT) {
      ok = saw_out;
      break;
    }
    break;
  }
out:
  if (run != MAP_FAILED) munmap(run, (size_t)run_size);
  if (mem != MAP_FAILED) munmap(mem, 0x1000);
  if (cpu >= 0) close(cpu);
  if (vm >= 0) close(vm);
  if (kvm >= 0) close(kvm);
  return ok;
}

bool qemu_kvm_works(void) {
  const char *force = getenv("SBX_QEMU_ACCEL");
  if (force && strcmp(force, "tcg") == 0) return false;
  if (force && strcmp(force, "kvm") == 0) return true;
  return kvm_probe();
}

/* The guest's early TSC calibration against the PIT hangs now and then on
 * microvm (about 1 boot in 9 here); handing it the frequency skips it.
 * CPUID 0x15 gives it exactly where the CPU reports it; otherwise the
 * kernel's own figure, "tsc: Refined TSC clocksource calibration", is not
 * readable unprivileged, so /proc/cpuinfo's MHz of CPU 0 is the fallback
 * (a constant TSC runs at the nominal frequency). */
unsigned long qemu_host_tsc_khz(void) {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, NULL) >= 0x15) {
    __cpuid(0x15, a, b, c, d);
    if (a && b && c) return (unsigned long)((unsigned long long)c * b / a / 1000);
  }
  FILE *f = fopen("/proc/cpuinfo", "re");
  if (!f) return 0;
  char line[256];
  unsigned long khz = 0;
  while (fgets(line, sizeof line, f)) {
    double mhz;
    if (sscanf(line, "cpu MHz : %lf", &mhz) == 1 || sscanf(line, "cpu MHz\t: %lf", &mhz) == 1) {
      khz = (unsigned long)(mhz * 1000.0 + 0.5);
      break;
    }
  }
  fclose(f);
  return khz;
}
