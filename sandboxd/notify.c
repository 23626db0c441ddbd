/* notify.c - the service manager's readiness protocol (sd_notify(3), "the
 * datagram protocol" of systemd's documentation): one AF_UNIX datagram of
 * newline-separated KEY=VALUE assignments sent to $NOTIFY_SOCKET, a path or
 * an abstract name written with a leading '@'. Implemented here rather than
 * linked from libsystemd: it is a dozen lines, and a node without systemd
 * (containers, tests) needs no extra library. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "notify.h"

static char notify_path[sizeof(((struct sockaddr_un *)0)->sun_path)];

void notify_init(void) {
  const char *p = getenv("NOTIFY_SOCKET");
  if (p && (p[0] == '/' || p[0] == '@') && strlen(p) < sizeof notify_path) {
    snprintf(notify_path, sizeof notify_path, "%s", p);
  } else if (p && *p) {
    sbx_warn("NOTIFY_SOCKET=%s is not an absolute path or @abstract name shorter than %zu; not notifying", p,
             sizeof notify_path);
  }
  unsetenv("NOTIFY_SOCKET");
}

void notify_send(const char *state) {
  static int warned;
  if (!notify_path[0]) return;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(notify_path);
  memcpy(sa.sun_path, notify_path, n);
  if (sa.sun_path[0] == '@') sa.sun_path[0] = '\0'; /* abstract: the length says where it ends */
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ssize_t w = -1;
  if (fd >= 0) {
    w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
    if (w < 0) w = -errno;
    close(fd);
  } else {
    w = -errno;
  }
  if (w < 0 && !warned++) sbx_warn("notify %s: %s", notify_path, strerror((int)-w));
}
