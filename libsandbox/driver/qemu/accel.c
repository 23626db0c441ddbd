/* The host TSC frequency for the guest. (Whether KVM is usable is
 * ../kvm.c's probe, shared with the registry's "auto".) */
#include <cpuid.h>
#include <stdio.h>

#include "qemu.h"

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
