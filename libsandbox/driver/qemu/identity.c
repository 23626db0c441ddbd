/* A fresh identity for a clone, before anyone else talks to it.
 *
 * Every clone of a golden wakes up as the same machine: same hostname,
 * same machine-id, same kernel RNG state, a wall clock stuck at the moment
 * of the snapshot. One exec of the guest's sbx-identity fixes all four:
 * it credits the random bytes given on stdin and reseeds the CRNG at once,
 * so the first read of /dev/urandom already differs between clones. */
#include <errno.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <sandbox/agent.h>

#include "qemu.h"

static int os_random(void *buf, size_t n, sbx_error *err) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom((char *)buf + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return sbx_err_os(err, errno, "getrandom");
    got += (size_t)r;
  }
  return 0;
}

int qemu_identity(sbx_instance *s, const char *hostname, sbx_error *err) {
  unsigned char seed[64], mid[16];
  int rc = os_random(seed, sizeof seed, err);
  if (rc == 0) rc = os_random(mid, sizeof mid, err);
  if (rc < 0) return rc;
  /* machine-id(5): 32 lowercase hex, a version 4 UUID's bits */
  mid[6] = (unsigned char)((mid[6] & 0x0f) | 0x40);
  mid[8] = (unsigned char)((mid[8] & 0x3f) | 0x80);
  char mid_hex[33], now[32];
  for (size_t i = 0; i < sizeof mid; i++) snprintf(mid_hex + 2 * i, 3, "%02x", mid[i]);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(now, sizeof now, "%llu", (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);

  int fd = qemu_vm_agent_dial(s, err);
  if (fd < 0) return fd;
  sbx_agent *a = NULL;
  if ((rc = sbx_agent_open(fd, &a, err)) < 0) return rc;
  sbx_agent_set_timeout(a, 30000);
  const char *argv[] = {"/.sbx/sbx-identity", hostname, mid_hex, now, NULL};
  sbx_req_exec req = {0};
  req.argv.items = (const char **)argv;
  req.argv.len = 4;
  sbx_agent_exec_io io = {.stdin_data = seed, .stdin_len = sizeof seed, .stdin_fd = -1};
  int code = -1;
  rc = sbx_agent_exec(a, &req, &io, &code, err);
  sbx_agent_close(a);
  if (rc == 0 && code != 0) rc = sbx_err(err, SBX_E_REMOTE, "sbx-identity exited with %d", code);
  if (rc < 0) sbx_err_wrap(err, "identity of %s", s->hdr.id);
  return rc;
}
