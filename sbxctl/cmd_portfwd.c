/* port-forward (kubectl's verb): listen on 127.0.0.1:LOCAL and relay each
 * accepted connection to 127.0.0.1:REMOTE in the sandbox through
 * sandboxd's port relay (GET /v1/sandboxes/{id}/ports/{port}, Upgrade:
 * tcp), one relay and one thread per connection, until interrupted. */
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/util.h"
#include "remote.h"

typedef struct {
  sbx_sandbox *s; /* shared: handles are thread-safe */
  uint16_t remote;
  int conn;
} fwd_job;

/* Copy both ways until both sides ended; a half-close is passed on. */
static void pump(int a, int b) {
  struct pollfd pf[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
  char buf[65536];
  int open_dirs = 2;
  while (open_dirs > 0) {
    if (poll(pf, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < 2; i++) {
      if (pf[i].fd < 0 || !pf[i].revents) continue;
      int to = i == 0 ? b : a;
      ssize_t n = read(pf[i].fd, buf, sizeof buf);
      if (n <= 0 || sbxi_write_all(to, buf, (size_t)n) < 0) {
        if (n < 0 || n > 0) return; /* an error: drop both */
        shutdown(to, SHUT_WR);
        pf[i].fd = -1;
        open_dirs--;
      }
    }
  }
}

static void *fwd_thread(void *arg) {
  fwd_job *j = arg;
  int fd = -1;
  sbx_buf pending = SBX_BUF_INIT(1 << 20);
  sbx_error err;
  if (sbx_sandbox_dial_port(j->s, j->remote, &fd, &pending, &err) < 0) {
    rfail("port-forward: port %u: %s", j->remote, err.msg); /* the listener stays */
  } else if (pending.len == 0 || sbxi_write_all(j->conn, pending.ptr, pending.len) == 0) {
    pump(j->conn, fd);
  }
  if (fd >= 0) close(fd);
  close(j->conn);
  sbx_buf_free(&pending);
  sbx_free(j);
  return NULL;
}

/* "LOCAL:REMOTE" or "PORT" (both the same); LOCAL 0 picks a free port. */
static bool parse_ports(const char *s, uint16_t *local, uint16_t *remote) {
  char *end;
  errno = 0;
  unsigned long l = strtoul(s, &end, 10), r;
  if (errno || end == s || l > 65535) return false;
  if (*end == ':') {
    const char *rs = end + 1;
    r = strtoul(rs, &end, 10);
    if (errno || end == rs || *end || r == 0 || r > 65535) return false;
  } else if (*end == 0 && l > 0) {
    r = l;
  } else {
    return false;
  }
  *local = (uint16_t)l;
  *remote = (uint16_t)r;
  return true;
}

static int listen_local(uint16_t port, uint16_t *bound) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 64) < 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  *bound = ntohs(sa.sin_port);
  return fd;
}

int cmd_port_forward(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {COMMON_LONGOPTS, {0, 0, 0, 0}};
  int c, rc;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1)
    if ((rc = common_opt(r, c, "port-forward")) >= 0) return rc;
  if (argc - optind != 2) return rusage("port-forward");
  uint16_t local, remote, bound;
  if (!parse_ports(argv[optind + 1], &local, &remote))
    return rbadopt("port-forward", "LOCAL:REMOTE", "ports such as 8080:80 (LOCAL 0 picks one)", argv[optind + 1]);
  sbx_sandbox *s;
  if (rsandbox(r, argv[optind], &s)) return EXIT_FAIL;
  int lfd = listen_local(local, &bound);
  if (lfd < 0) {
    sbx_sandbox_free(s);
    return rfail("port-forward: listen on 127.0.0.1:%u: %s", local, strerror(errno));
  }
  if (r->json) printf("{\"local\":\"127.0.0.1:%u\",\"remote\":%u}\n", bound, remote);
  else printf("Forwarding from 127.0.0.1:%u -> %u\n", bound, remote);
  fflush(stdout);
  for (;;) { /* until a signal ends the process */
    int conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE) continue;
      rc = rfail("port-forward: accept: %s", strerror(errno));
      break;
    }
    fwd_job *j = sbx_calloc(1, sizeof *j);
    *j = (fwd_job){s, remote, conn};
    pthread_t th;
    if (pthread_create(&th, NULL, fwd_thread, j) != 0) {
      close(conn);
      sbx_free(j);
      continue;
    }
    pthread_detach(th);
  }
  close(lfd);
  return rc; /* s stays: detached relays may still use it */
}
