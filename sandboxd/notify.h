/* notify.h - readiness for a Type=notify systemd service (sd_notify(3)'s
 * datagram protocol, without libsystemd). */
#ifndef SANDBOXD_NOTIFY_H
#define SANDBOXD_NOTIFY_H

/* Take NOTIFY_SOCKET from the environment and remove it, so that nothing
 * sandboxd starts (jails, helpers) inherits the service manager's socket.
 * Call once, early. */
void notify_init(void);
/* Send one state datagram ("READY=1", "STOPPING=1", ...). A no-op when
 * sandboxd was not started with NOTIFY_SOCKET; a failure is logged once and
 * never stops the daemon. */
void notify_send(const char *state);

#endif
