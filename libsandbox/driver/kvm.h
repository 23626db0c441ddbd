/* kvm.h - whether /dev/kvm can run the qemu driver's guest (kvm.c). */
#ifndef SBX_DRIVER_KVM_H
#define SBX_DRIVER_KVM_H

#include <stdbool.h>
#include <stddef.h>

/* A host whose /dev/kvm never booted a guest kernel is remembered here
 * until reboot (the qemu driver's golden build leaves it). */
#define SBXI_KVM_BROKEN_MARK "/run/sandbox-qemu.kvm-broken"

/* The probe of kvm.c (its steps, and why an openable /dev/kvm is not
 * enough); it runs once per process. why (may be NULL) receives the
 * reason, usable or not. */
bool sbxi_kvm_usable(char *why, size_t len);

#endif
