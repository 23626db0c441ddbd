/* zygote.h - the jail zygote's entry point, for silkd (which runs it in
 * --zygote mode). No other project header is needed to include it.
 *
 * The zygote is silkd itself, started once per driver and already past its
 * C library's start-up; it clones each jail's pid 1 on request and that
 * child calls run(arg) in the finished jail instead of exec'ing silkd. See
 * docs/drivers.md (jail zygote) and docs/security.md. */
#ifndef SBX_JAIL_ZYGOTE_H
#define SBX_JAIL_ZYGOTE_H

/* Serves clone requests on fd (a SOCK_SEQPACKET socket to the driver)
 * until it reaches its end (0) or fails (-errno). Returns in the zygote
 * only; each child runs run(arg) and _exits with what it returns. */
int sbxi_jail_zygote_serve(int fd, int (*run)(void *arg), void *arg);

#endif
