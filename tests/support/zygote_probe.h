/* zygote_probe.h - find the jail driver's zygote from outside, as an
 * operator would: the child of this process whose command line is
 * "silkd --zygote ...". Shared by test_jail_zygote and bench/jail
 * (tests/support, a library both link). */
#ifndef SBX_TEST_ZYGOTE_PROBE_H
#define SBX_TEST_ZYGOTE_PROBE_H

#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* The zygote's pid; -1: none is running. */
pid_t zygote_pid(void);

#endif
