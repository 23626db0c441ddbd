/* silkd_client.c - the silkd test client (see silkd_client.h). */
#include "silkd_client.h"

#include "core/path.h"

const char *sc_bin_dir = SBX_BUILD_BIN_DIR;

int sc_rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(p);
}

void sc_rmrf(const char *path) { nftw(path, sc_rm_cb, 64, FTW_DEPTH | FTW_PHYS); }

int sc_try_connect(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (sbxi_path_fmt(sa.sun_path, sizeof sa.sun_path, NULL, "%s", path) < 0 ||
      connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Start silkd with up to two extra arguments (NULL for none); returns 0 or
 * -1. The daemon inherits the test's environment. */
int silkd_start_args(silkd_srv *s, const char *a1, const char *a2) {
  snprintf(s->dir, sizeof s->dir, "/tmp/silkd-test-XXXXXX");
  if (!mkdtemp(s->dir)) return -1;
  snprintf(s->sock, sizeof s->sock, "%s/silkd.sock", s->dir);
  char bin[512], listen[400], log[300];
  if (sbxi_path_fmt(bin, sizeof bin, NULL, "%s/silkd", sc_bin_dir) < 0) return -1;
  snprintf(listen, sizeof listen, "unix:%s", s->sock);
  snprintf(log, sizeof log, "%s/silkd.log", s->dir);
  s->pid = fork();
  if (s->pid == 0) {
    int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int nfd = open("/dev/null", O_RDONLY);
    dup2(nfd, 0);
    dup2(lfd, 2);
    setenv("SHELL", "/bin/bash", 1); /* pty_open's shell, whatever CI has */
    execl(bin, "silkd", "--listen", listen, a1, a2, (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 2000; i++) {
    int fd = sc_try_connect(s->sock);
    if (fd >= 0) {
      close(fd);
      return 0;
    }
    int st;
    if (waitpid(s->pid, &st, WNOHANG) == s->pid) return -1;
    usleep(5000);
  }
  return -1;
}

int silkd_start(silkd_srv *s) { return silkd_start_args(s, NULL, NULL); }

int silkd_stop(silkd_srv *s) {
  int st = -1;
  if (s->pid > 0) {
    kill(s->pid, SIGTERM);
    waitpid(s->pid, &st, 0);
  }
  if (getenv("SILKD_TEST_KEEP") == NULL) sc_rmrf(s->dir);
  return st;
}

sc *sc_open(const silkd_srv *s) {
  int fd = sc_try_connect(s->sock);
  if (fd < 0) return NULL;
  sc *c = sbx_calloc(1, sizeof *c);
  c->fd = fd;
  c->fr = sbx_frame_reader_new(0);
  c->buf = sbx_malloc(1 << 16);
  return c;
}

void sc_close(sc *c) {
  if (!c) return;
  close(c->fd);
  sbx_frame_reader_free(c->fr);
  sbx_free(c->buf);
  sbx_free(c);
}

int sc_send_raw(sc *c, const void *p, size_t n) {
  const char *s = p;
  while (n > 0) {
    ssize_t k = send(c->fd, s, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -1;
    s += k;
    n -= (size_t)k;
  }
  return 0;
}

int sc_sendf(sc *c, const char *fmt, ...) {
  char *line;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&line, fmt, ap);
  va_end(ap);
  if (n < 0) return -1;
  int rc = sc_send_raw(c, line, (size_t)n);
  free(line);
  return rc < 0 ? rc : sc_send_raw(c, "\n", 1);
}

int sc_send_bulk(sc *c, sbx_wire_bulk kind, const void *p, size_t n) {
  sbx_buf b = SBX_BUF_INIT(SBX_WIRE_FRAME_CAP + 1);
  int rc = sbx_wire_bulk_encode(&b, kind, p, n, NULL);
  if (rc == 0) rc = sc_send_raw(c, b.ptr, b.len);
  sbx_buf_free(&b);
  return rc;
}

int sc_recv_line(sc *c, char **line, size_t *len) {
  for (;;) {
    const char *l;
    size_t n;
    int r = sbx_frame_reader_next(c->fr, &l, &n, NULL);
    if (r < 0) return -1;
    if (r == 1) {
      *line = sbx_malloc(n + 1);
      memcpy(*line, l, n);
      (*line)[n] = 0;
      *len = n;
      return 1;
    }
    if (c->eof) return 0;
    struct pollfd pfd = {c->fd, POLLIN, 0};
    if (poll(&pfd, 1, SC_HANG_MS) <= 0) return -1;
    ssize_t k = read(c->fd, c->buf, 1 << 16);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      c->eof = true;
      sbx_frame_reader_finish(c->fr);
      continue;
    }
    sbx_frame_reader_feed(c->fr, c->buf, (size_t)k);
  }
}

int sc_recv(sc *c, sbx_wire_resp *r) {
  char *line;
  size_t len;
  int rc = sc_recv_line(c, &line, &len);
  if (rc != 1) return rc;
  sbx_error e;
  rc = sbx_wire_decode_resp(line, len, r, &e) == 0 ? 1 : -1;
  if (rc < 0) fprintf(stderr, "undecodable frame: %.200s (%s)\n", line, e.msg);
  sbx_free(line);
  return rc;
}

bool sc_closed(sc *c) {
  char *line;
  size_t len;
  int rc = sc_recv_line(c, &line, &len);
  if (rc == 1) {
    fprintf(stderr, "unexpected frame: %.200s\n", line);
    sbx_free(line);
  }
  return rc == 0;
}

void sc_result_free(sc_result *r) {
  sbx_buf_free(&r->out);
  sbx_buf_free(&r->err);
  sbx_buf_free(&r->data);
}

int sc_collect(sc *c, sc_result *res, const sbx_wire_type *finals) {
  memset(res, 0, sizeof *res);
  sbx_buf_init(&res->out, (size_t)1 << 34);
  sbx_buf_init(&res->err, (size_t)1 << 34);
  sbx_buf_init(&res->data, (size_t)1 << 34);
  res->final = SBX_RESP__COUNT;
  for (;;) {
    sbx_wire_resp r;
    int rc = sc_recv(c, &r);
    if (rc != 1) return rc;
    res->frames++;
    bool fin = r.type == SBX_RESP_ERROR;
    for (const sbx_wire_type *f = finals; *f != SBX_RESP__COUNT; f++) fin |= r.type == *f;
    switch (r.type) {
    case SBX_RESP_STDOUT: sbx_buf_add(&res->out, r.u.stdout_.data.ptr, r.u.stdout_.data.len, NULL); break;
    case SBX_RESP_STDERR: sbx_buf_add(&res->err, r.u.stderr_.data.ptr, r.u.stderr_.data.len, NULL); break;
    case SBX_RESP_DATA: sbx_buf_add(&res->data, r.u.data.data.ptr, r.u.data.data.len, NULL); break;
    case SBX_RESP_STARTED: res->pid = r.u.started.pid; break;
    case SBX_RESP_EXIT: res->code = r.u.exit.code; res->saw_exit = true; break;
    case SBX_RESP_ERROR:
      res->kind = r.u.error.kind;
      snprintf(res->msg, sizeof res->msg, "%s", r.u.error.message);
      break;
    default: break;
    }
    if (fin) res->final = r.type;
    sbx_wire_resp_free(&r);
    if (fin) return 1;
  }
}
const sbx_wire_type SC_FIN_EXIT[] = {SBX_RESP_EXIT, SBX_RESP__COUNT};
const sbx_wire_type SC_FIN_DONE[] = {SBX_RESP_DONE, SBX_RESP__COUNT};
const sbx_wire_type SC_FIN_ATTACH[] = {SBX_RESP_EXIT, SBX_RESP_DONE, SBX_RESP__COUNT};
const sbx_wire_type SC_FIN_NONE_OR_CREATED[] = {SBX_RESP_SESSION_CREATED, SBX_RESP__COUNT};

int sc_exec_sh(sc *c, const char *script, sc_result *res) {
  sbx_buf b = SBX_BUF_INIT(1 << 20);
  sbx_buf_adds(&b, "{\"v\":1,\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"", NULL);
  for (const char *p = script; *p; p++) {
    if (*p == '"' || *p == '\\') sbx_buf_addc(&b, '\\', NULL);
    if (*p == '\n') {
      sbx_buf_adds(&b, "\\n", NULL);
      continue;
    }
    sbx_buf_addc(&b, *p, NULL);
  }
  sbx_buf_adds(&b, "\"]}", NULL);
  int rc = sc_sendf(c, "%s", b.ptr);
  sbx_buf_free(&b);
  if (rc < 0) return rc;
  return sc_collect(c, res, SC_FIN_EXIT);
}

char *sc_json_str(const char *s) {
  sbx_buf b = SBX_BUF_INIT(1 << 20);
  sbx_buf_addc(&b, '"', NULL);
  for (const char *p = s; *p; p++) {
    if (*p == '"' || *p == '\\') sbx_buf_addc(&b, '\\', NULL);
    sbx_buf_addc(&b, *p, NULL);
  }
  sbx_buf_addc(&b, '"', NULL);
  return sbx_buf_steal(&b, NULL);
}
