/* tests/fuzz/fuzz_client.c - libFuzzer target for the client library's
 * decoding of what a node answers.
 *
 * Byte 0 picks the decoder, the rest is the answer:
 *   0  a claim answer (sbxi_client_parse_claim: a ClaimResult or a Redirect)
 *   1  a node info answer (node_info_parse: GET /v1/info, drain, pools)
 *   2  an API error body (http_api_error, with the status from byte 1)
 *   3  the answer to an agent or port upgrade, read from a socket
 *      (dial_read_upgrade over a socketpair the harness writes and
 *      half-closes: a 101 head and the bytes after it, or an error answer)
 * Checked: every decoder returns 0 or a negative sbx code with a message,
 * the fields it fills are terminated strings, and everything it allocates
 * is released by the matching free (LeakSanitizer sees the rest). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "client/client_priv.h"
#include "fuzz_util.h"

#define TERMINATED(field) (memchr((field), '\0', sizeof(field)) != NULL)

static void check_err(int rc, const sbx_error *err) {
  FUZZ_CHECK(rc <= 0, "decoder returned %d", rc);
  if (rc < 0) {
    FUZZ_CHECK(err->code == rc, "error code %d, rc %d", err->code, rc);
    FUZZ_CHECK(TERMINATED(err->msg) && err->msg[0], "an error without a message");
  }
}

static void claim(const char *p, size_t n) {
  sbxi_claim_result res;
  sbxi_redirect red;
  sbx_error err;
  int rc = sbxi_client_parse_claim(p, n, &res, &red, &err);
  check_err(rc, &err);
  if (rc == 0 && red.len > 0) {
    FUZZ_CHECK(res.id[0] == '\0', "a redirect with an id");
    for (size_t i = 0; i < red.len; i++) FUZZ_CHECK(red.addrs[i] != NULL, "redirect entry %zu is NULL", i);
  } else if (rc == 0) {
    FUZZ_CHECK(res.id[0] && res.token[0], "a claim result without id or token");
    FUZZ_CHECK(TERMINATED(res.id) && TERMINATED(res.token) && TERMINATED(res.deadline) &&
                   TERMINATED(res.owner_addr) && TERMINATED(res.template_digest) &&
                   TERMINATED(res.from_checkpoint),
               "a claim field is not terminated");
  }
  sbxi_redirect_free(&red);
}

static void node_info(const char *p, size_t n) {
  sbx_buf b = SBX_BUF_INIT(CLIENT_BODY_CAP);
  sbx_error err;
  FUZZ_CHECK(sbx_buf_add(&b, p, n, &err) == 0, "buf: %s", err.msg);
  sbx_node_info info;
  memset(&info, 0, sizeof info);
  int rc = node_info_parse(&b, "info", &info, &err);
  check_err(rc, &err);
  if (rc == 0) {
    FUZZ_CHECK(info.json != NULL, "node info without its JSON");
    FUZZ_CHECK(TERMINATED(info.at_capacity_reason), "at_capacity_reason not terminated");
    for (size_t i = 0; i < info.npools; i++)
      FUZZ_CHECK(TERMINATED(info.pools[i].key.template_) && TERMINATED(info.pools[i].key.net) &&
                     TERMINATED(info.pools[i].key.size),
                 "pool key %zu not terminated", i);
  }
  sbx_node_info_free(&info);
  sbx_buf_free(&b);
}

static void api_error(const char *p, size_t n) {
  long status = n ? 100 + (uint8_t)p[0] * 2 : 500;
  sbx_error err;
  int rc = http_api_error(&err, "claim", status, n ? p + 1 : NULL, n ? n - 1 : 0);
  FUZZ_CHECK(rc == SBX_E_REMOTE, "an API error is not SBX_E_REMOTE (%d)", rc);
  check_err(rc, &err);
  FUZZ_CHECK(err.detail == (int)status, "detail %d, status %ld", err.detail, status);
}

static void upgrade(const char *p, size_t n) {
  if (n > 200 * 1024) return; /* the socketpair must take it all at once */
  int sv[2];
  FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair: %s", strerror(errno));
  int sz = 512 * 1024;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
  size_t off = 0;
  while (off < n) {
    ssize_t w = send(sv[1], p + off, n - off, MSG_DONTWAIT);
    if (w <= 0) break; /* what does not fit is cut: still an answer */
    off += (size_t)w;
  }
  shutdown(sv[1], SHUT_WR);
  sbx_buf pending = SBX_BUF_INIT(AGENT_PENDING_CAP);
  sbx_error err;
  int rc = dial_read_upgrade(sv[0], "agent", 5000, &pending, &err);
  check_err(rc, &err);
  FUZZ_CHECK(pending.len <= off, "%zu bytes pending from a %zu-byte answer", pending.len, off);
  FUZZ_CHECK(rc == 0 || pending.len == 0, "bytes pending after a failed upgrade");
  sbx_buf_free(&pending);
  close(sv[0]);
  close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  const char *p = (const char *)data + 1;
  size_t n = size - 1;
  switch (data[0] & 3) {
  case 0: claim(p, n); break;
  case 1: node_info(p, n); break;
  case 2: api_error(p, n); break;
  default: upgrade(p, n); break;
  }
  return 0;
}
