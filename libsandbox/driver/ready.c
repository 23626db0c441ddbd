/* The agent channel's readiness probe (spec §5.1), shared by all drivers:
 * an info request, answered by an info frame. Split in a send and a read
 * step too, so that a driver can keep several probes in flight. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sandbox/core.h>
#include <sandbox/driver.h>

#include "driver_internal.h"

int sbxi_ready_send(int fd, sbx_error *err) {
  static const char req[] = "{\"v\":1,\"op\":\"info\"}\n";
  ssize_t w;
  do w = send(fd, req, sizeof req - 1, MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  if (w != (ssize_t)(sizeof req - 1)) return sbx_err_os(err, w < 0 ? errno : EIO, "agent: send info");
  return 0;
}

int sbxi_ready_recv(int fd, struct sbxi_ready_buf *b, sbx_error *err) {
  ssize_t n;
  do n = recv(fd, b->buf + b->len, sizeof b->buf - 1 - b->len, MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  if (n < 0) return sbx_err_os(err, errno, "agent: recv");
  if (n == 0) return sbx_err(err, SBX_E_PROTO, "agent: closed before answering info");
  b->len += (size_t)n;
  b->buf[b->len] = '\0';
  char *nl = memchr(b->buf, '\n', b->len);
  if (!nl && b->len >= SBXI_INFO_FRAME_MAX)
    return sbx_err(err, SBX_E_TOOBIG, "agent: info frame over %d bytes", SBXI_INFO_FRAME_MAX);
  if (!nl) return 0;
  *nl = '\0';
  /* silkd writes the tag first (wire spec §1.9); a frame of another type
   * (an error) is not readiness. */
  if (strstr(b->buf, "\"type\":\"info\"") == NULL) return sbx_err(err, SBX_E_PROTO, "agent: answered %.200s", b->buf);
  return 1;
}

int sbx_ready_probe(int fd, int timeout_ms, sbx_error *err) {
  uint64_t deadline = sbx_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  int rc = sbxi_ready_send(fd, err);
  if (rc < 0) return rc;
  struct sbxi_ready_buf b;
  b.len = 0;
  for (;;) {
    uint64_t now = sbx_now_ns();
    if (now >= deadline) return sbx_err(err, SBX_E_TIMEOUT, "agent: no info answer within %d ms", timeout_ms);
    struct pollfd pfd = {fd, POLLIN, 0};
    int pr = poll(&pfd, 1, (int)((deadline - now + 999999) / 1000000));
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return sbx_err_os(err, errno, "agent: poll");
    if (pr == 0) continue;
    rc = sbxi_ready_recv(fd, &b, err);
    if (rc != 0) return rc < 0 ? rc : 0;
  }
}
