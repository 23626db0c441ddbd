/* The agent channel's readiness probe (spec §5.1), shared by all drivers. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sandbox/core.h>
#include <sandbox/driver.h>

#define INFO_FRAME_MAX 4096

int sbx_ready_probe(int fd, int timeout_ms, sbx_error *err) {
  static const char req[] = "{\"v\":1,\"op\":\"info\"}\n";
  uint64_t deadline = sbx_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  ssize_t w;
  do w = send(fd, req, sizeof req - 1, MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  if (w != (ssize_t)(sizeof req - 1)) return sbx_err_os(err, w < 0 ? errno : EIO, "agent: send info");
  char buf[INFO_FRAME_MAX + 1];
  size_t len = 0;
  for (;;) {
    uint64_t now = sbx_now_ns();
    if (now >= deadline) return sbx_err(err, SBX_E_TIMEOUT, "agent: no info answer within %d ms", timeout_ms);
    struct pollfd pfd = {fd, POLLIN, 0};
    int pr = poll(&pfd, 1, (int)((deadline - now + 999999) / 1000000));
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return sbx_err_os(err, errno, "agent: poll");
    if (pr == 0) continue;
    ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sbx_err_os(err, errno, "agent: recv");
    if (n == 0) return sbx_err(err, SBX_E_PROTO, "agent: closed before answering info");
    len += (size_t)n;
    buf[len] = '\0';
    char *nl = memchr(buf, '\n', len);
    if (!nl && len >= INFO_FRAME_MAX) return sbx_err(err, SBX_E_TOOBIG, "agent: info frame over %d bytes", INFO_FRAME_MAX);
    if (!nl) continue;
    *nl = '\0';
    /* silkd writes the tag first (wire spec §1.9); a frame of another
     * type (an error) is not readiness. */
    if (strstr(buf, "\"type\":\"info\"") == NULL) return sbx_err(err, SBX_E_PROTO, "agent: answered %.200s", buf);
    return 0;
  }
}
