/* A blocking QMP client over the VM's Unix socket, with jansson.
 *
 * QMP interleaves asynchronous events with command replies; a reply is the
 * first object carrying "return" or "error", so events are read and
 * dropped. Every read is bounded in time and size: a wedged or hostile QEMU
 * never hangs or bloats the caller. */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../core/cleanup.h"
#include "qemu.h"

#define QMP_LINE_MAX (1u << 20)
#define QMP_TIMEOUT_MS 30000

struct qmp {
  int fd;
  sbx_buf in;
};

static int read_line(qmp *q, char **line, int timeout_ms, sbx_error *err) {
  uint64_t deadline = sbx_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  for (;;) {
    char *nl = q->in.ptr ? memchr(q->in.ptr, '\n', q->in.len) : NULL;
    if (nl) {
      size_t n = (size_t)(nl - q->in.ptr) + 1;
      *line = sbx_strndup(q->in.ptr, n);
      memmove(q->in.ptr, q->in.ptr + n, q->in.len - n);
      q->in.len -= n;
      q->in.ptr[q->in.len] = '\0';
      return 0;
    }
    uint64_t now = sbx_now_ns();
    if (now >= deadline) return sbx_err(err, SBX_E_TIMEOUT, "qmp: no reply");
    struct pollfd p = {q->fd, POLLIN, 0};
    int pr = poll(&p, 1, (int)((deadline - now) / 1000000ull) + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return sbx_err_os(err, errno, "qmp: poll");
    if (pr == 0) continue;
    char *where;
    int rc = sbx_buf_reserve(&q->in, 65536, &where, err);
    if (rc < 0) return rc;
    ssize_t r = read(q->fd, where, 65536);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return sbx_err_os(err, errno, "qmp: read");
    if (r == 0) return sbx_err(err, SBX_E_PROTO, "qmp: QEMU closed the monitor");
    sbx_buf_commit(&q->in, (size_t)r);
  }
}

/* The next object that is not an event. */
static int read_reply(qmp *q, json_t **out, sbx_error *err) {
  for (;;) {
    char *line = NULL;
    int rc = read_line(q, &line, QMP_TIMEOUT_MS, err);
    if (rc < 0) return rc;
    json_error_t je;
    json_t *j = json_loads(line, 0, &je);
    sbx_free(line);
    if (!j || !json_is_object(j)) {
      json_decref(j);
      return sbx_err(err, SBX_E_PROTO, "qmp: bad JSON from QEMU: %s", je.text);
    }
    if (json_object_get(j, "event")) {
      json_decref(j);
      continue;
    }
    *out = j;
    return 0;
  }
}

static int send_all(int fd, const char *s, size_t n, sbx_error *err) {
  while (n) {
    ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return sbx_err_os(err, errno, "qmp: send");
    s += w;
    n -= (size_t)w;
  }
  return 0;
}

int qmp_cmd(qmp *q, const char *cmd, const char *args, char **ret, sbx_error *err) {
  if (ret) *ret = NULL;
  sbxi_cleanup_buf sbx_buf b = SBX_BUF_INIT(QMP_LINE_MAX);
  int rc = sbx_buf_printf(&b, err, "{\"execute\":\"%s\"%s%s}\n", cmd, args ? ",\"arguments\":" : "",
                          args ? args : "");
  if (rc < 0 || (rc = send_all(q->fd, b.ptr, b.len, err)) < 0) return rc;
  json_t *j = NULL;
  if ((rc = read_reply(q, &j, err)) < 0) return rc;
  json_t *e = json_object_get(j, "error");
  if (e) {
    const char *desc = json_string_value(json_object_get(e, "desc"));
    rc = sbx_err(err, SBX_E_REMOTE, "qmp %s: %s", cmd, desc ? desc : "error");
  } else if (ret) {
    char *txt = json_dumps(json_object_get(j, "return"), JSON_COMPACT | JSON_ENCODE_ANY);
    *ret = sbx_strdup(txt ? txt : "{}");
    free(txt);
  }
  json_decref(j);
  return rc;
}

int qmp_status(qmp *q, char *buf, size_t len, sbx_error *err) {
  char *ret = NULL;
  int rc = qmp_cmd(q, "query-status", NULL, &ret, err);
  if (rc < 0) return rc;
  json_t *j = json_loads(ret, 0, NULL);
  const char *st = json_string_value(json_object_get(j, "status"));
  snprintf(buf, len, "%s", st ? st : "");
  json_decref(j);
  sbx_free(ret);
  return st ? 0 : sbx_err(err, SBX_E_PROTO, "qmp: query-status without status");
}

int qmp_connect(const char *path, int timeout_ms, qmp **out, sbx_error *err) {
  *out = NULL;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof sa.sun_path) return sbx_err(err, SBX_E_TOOBIG, "qmp socket path too long: %s", path);
  strcpy(sa.sun_path, path);
  /* QEMU creates the socket a little after it starts: retry until then. */
  uint64_t deadline = sbx_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  int fd = -1;
  for (;;) {
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return sbx_err_os(err, errno, "socket");
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) break;
    int e = errno;
    close(fd);
    if ((e != ENOENT && e != ECONNREFUSED) || sbx_now_ns() >= deadline)
      return sbx_err_os(err, e, "qmp: connect %s", path);
    usleep(2000);
  }
  qmp *q = sbx_calloc(1, sizeof *q);
  q->fd = fd;
  sbx_buf_init(&q->in, QMP_LINE_MAX);
  json_t *greet = NULL;
  int rc = read_reply(q, &greet, err);
  if (rc == 0 && !json_object_get(greet, "QMP")) rc = sbx_err(err, SBX_E_PROTO, "qmp: no greeting");
  json_decref(greet);
  if (rc == 0) rc = qmp_cmd(q, "qmp_capabilities", NULL, NULL, err);
  if (rc < 0) {
    qmp_close(q);
    return rc;
  }
  *out = q;
  return 0;
}

void qmp_close(qmp *q) {
  if (!q) return;
  close(q->fd);
  sbx_buf_free(&q->in);
  sbx_free(q);
}
