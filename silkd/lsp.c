/* lsp.c - the LSP broker (§5.12): start the language server an image's
 * manifest names, then relay raw bytes between one lsp_request and the
 * server's stdio. The stream is never parsed: the client does the
 * Content-Length framing. A server serves one stream (single-shot) and is
 * killed when it ends; one nobody attaches to is reaped after
 * silkd_lsp_ttl_secs.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "silkd.h"

#define LSP_MANIFEST_CAP (64 * 1024)
#define LSP_ARGV_MAX 256

unsigned silkd_lsp_ttl_secs = 300;

struct lsp {
  char id[32];
  pid_t pid;
  bool reaped;
  bool in_table;
  bool attached; /* ever: a server serves one stream */
  int in_fd, out_fd; /* parent ends of the server's stdin and stdout */
  struct event *ttl;
  struct lsp_rpc *rpc;  /* the attached lsp_request */
  struct conn *stop_c;  /* an lsp_stop waiting for the reap */
  struct lsp *next;
};

struct lsp_rpc {
  struct conn *c;
  struct lsp *l;
  struct fdwriter *in;
  struct event *rev;
  bool input_closed;
};

static struct lsp *servers;
static uint64_t next_id;

static struct lsp *lsp_find(const char *id) {
  for (struct lsp *l = servers; l; l = l->next)
    if (strcmp(l->id, id) == 0) return l;
  return NULL;
}

static void lsp_unlink(struct lsp *l) {
  if (!l->in_table) return;
  for (struct lsp **p = &servers; *p; p = &(*p)->next) {
    if (*p == l) {
      *p = l->next;
      break;
    }
  }
  l->in_table = false;
}

/* Freed once out of the table, with no stream and no stop waiting, and
 * reaped (the child watch points at it until then). */
static void lsp_maybe_free(struct lsp *l) {
  if (l->in_table || l->rpc || l->stop_c || !l->reaped) return;
  if (l->ttl) event_free(l->ttl);
  if (l->in_fd >= 0) close(l->in_fd);
  if (l->out_fd >= 0) close(l->out_fd);
  sbx_free(l);
}

/* Kill the server's process group; it led one since its spawn. */
static void lsp_kill(struct lsp *l) {
  if (!l->reaped && l->pid > 1) kill(-l->pid, SIGKILL);
}

static void lsp_remove(struct lsp *l) {
  lsp_kill(l);
  lsp_unlink(l);
  if (l->ttl) event_del(l->ttl);
  lsp_maybe_free(l);
}

void lsp_kill_all(void) {
  for (struct lsp *l = servers; l; l = l->next) lsp_kill(l);
}

static void on_reaped(void *arg, pid_t pid, int status) {
  struct lsp *l = arg;
  l->reaped = true;
  if (l->stop_c) {
    struct conn *c = l->stop_c;
    l->stop_c = NULL;
    conn_send_simple(c, SBX_RESP_DONE);
    conn_rpc_done(c);
  }
  lsp_maybe_free(l);
}

static void on_ttl(evutil_socket_t fd, short what, void *arg) {
  struct lsp *l = arg;
  if (l->attached) return;
  sbx_info("lsp %s: not attached within %u s, killed", l->id, silkd_lsp_ttl_secs);
  lsp_remove(l);
}

/* ---- lsp_start ---- */

static bool language_valid(const char *lang) {
  return *lang && !strchr(lang, '/') && !strchr(lang, '\\') && !strstr(lang, "..");
}

static const char *lsp_dir(void) {
  const char *d = getenv("SILKD_LSP_DIR");
  return d && *d ? d : "/etc/silkd/lsp.d";
}

/* The manifest's words as a NULL-terminated argv in *words (one block:
 * free it alone), or false when it is missing, unreadable, empty, or not
 * a regular file (O_NOFOLLOW: a symlink is refused too). */
static bool manifest_argv(const char *path, char ***words) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st;
  char *text = NULL;
  ssize_t len = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= LSP_MANIFEST_CAP) {
    text = sbx_malloc(LSP_MANIFEST_CAP + 1);
    len = read(fd, text, LSP_MANIFEST_CAP);
  }
  close(fd);
  if (len <= 0) {
    sbx_free(text);
    return false;
  }
  text[len] = 0;
  char **argv = sbx_calloc(LSP_ARGV_MAX + 1, sizeof *argv + 0);
  size_t n = 0;
  for (char *save = NULL, *w = strtok_r(text, " \t\n\r\f\v", &save); w && n < LSP_ARGV_MAX;
       w = strtok_r(NULL, " \t\n\r\f\v", &save))
    argv[n++] = sbx_strdup(w);
  sbx_free(text);
  if (n == 0) {
    sbx_free(argv);
    return false;
  }
  *words = argv;
  return true;
}

static void argv_free(char **argv) {
  for (size_t i = 0; argv && argv[i]; i++) sbx_free(argv[i]);
  sbx_free(argv);
}

void verb_lsp_start(struct conn *c, sbx_wire_req *req) {
  const char *lang = req->u.lsp_start.language;
  const char *dir = lsp_dir();
  char path[4096];
  char **argv = NULL;
  int n = snprintf(path, sizeof path, "%s/%s", dir, lang);
  if (!language_valid(lang) || n < 0 || (size_t)n >= sizeof path || !manifest_argv(path, &argv)) {
    conn_send_error(c, SBX_ERR_NOT_FOUND, "no language server for \"%s\"; a flavor image provides %s/%s", lang, dir,
                    lang);
    return;
  }
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  int nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
  struct spawn_opts o = {.argv = (const char *const *)argv, .cwd = req->u.lsp_start.root, .new_pgrp = true};
  sbx_error se = {0};
  pid_t pid;
  int rc = -1;
  o.envp = env_inherit();
  if (nul >= 0 && pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0) {
    o.fd0 = in[0];
    o.fd1 = out[1];
    o.fd2 = nul;
    rc = spawn_child(&o, &pid, &se);
  } else {
    se.os_errno = errno;
  }
  envp_free(o.envp);
  argv_free(argv);
  if (nul >= 0) close(nul);
  if (in[0] >= 0) close(in[0]);
  if (out[1] >= 0) close(out[1]);
  if (rc < 0) {
    if (in[1] >= 0) close(in[1]);
    if (out[0] >= 0) close(out[0]);
    int e = se.os_errno;
    conn_send_error(c, e == ENOENT ? SBX_ERR_NOT_FOUND : SBX_ERR_INTERNAL,
                    "spawn language server: %s (os error %d)", strerror(e), e);
    return;
  }
  struct lsp *l = sbx_calloc(1, sizeof *l);
  snprintf(l->id, sizeof l->id, "lsp-%llu", (unsigned long long)++next_id);
  l->pid = pid;
  l->in_fd = in[1];
  l->out_fd = out[0];
  set_nonblock(l->out_fd);
  l->in_table = true;
  l->next = servers;
  servers = l;
  child_watch(pid, on_reaped, l);
  l->ttl = evtimer_new(silkd.base, on_ttl, l);
  struct timeval tv = {(time_t)silkd_lsp_ttl_secs, 0};
  event_add(l->ttl, &tv);
  sbx_wire_resp r = {.type = SBX_RESP_LSP_STARTED};
  r.u.lsp_started.server_id = l->id;
  conn_send_resp(c, &r);
}

/* ---- lsp_request: ready -> data* -> done, fed ---- */

/* The stream's end, for any reason: the server is killed and removed. */
static void rpc_end(struct lsp_rpc *x) {
  struct conn *c = x->c;
  struct lsp *l = x->l;
  event_free(x->rev);
  fdwriter_free(x->in); /* closes the server's stdin */
  l->in_fd = -1;
  l->rpc = NULL;
  sbx_free(x);
  lsp_remove(l);
  conn_rpc_done(c);
}

static void close_input(struct lsp_rpc *x) {
  if (x->input_closed) return;
  x->input_closed = true;
  fdwriter_close_when_done(x->in);
  conn_pause_input(x->c, false);
}

static void on_server_out(evutil_socket_t fd, short what, void *arg) {
  struct lsp_rpc *x = arg;
  static uint8_t buf[SILKD_BULK];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n < 0) {
    conn_send_error(x->c, SBX_ERR_INTERNAL, "read lsp stdout: %s (os error %d)", strerror(errno), errno);
    rpc_end(x);
    return;
  }
  if (n == 0) {
    conn_send_simple(x->c, SBX_RESP_DONE);
    rpc_end(x);
    return;
  }
  if (!conn_send_bulk(x->c, SBX_BULK_DATA, buf, (size_t)n)) {
    event_del(x->rev); /* abort follows */
    return;
  }
  if (conn_out_len(x->c) >= SILKD_OUT_HIGH) {
    event_del(x->rev);
    conn_want_writable(x->c);
  }
}

static void rpc_writable(void *rpc) {
  struct lsp_rpc *x = rpc;
  event_add(x->rev, NULL);
}

static void stdin_drained(void *arg, int err) {
  struct lsp_rpc *x = arg;
  conn_pause_input(x->c, false);
}

static void rpc_input(void *rpc, sbx_wire_op op, const uint8_t *d, size_t n) {
  struct lsp_rpc *x = rpc;
  if (x->input_closed) return;
  if (op != SBX_OP_DATA) { /* data_end, and any other continuation frame */
    close_input(x);
    return;
  }
  if (fdwriter_write(x->in, d, n) > SILKD_STDIN_HIGH) conn_pause_input(x->c, true);
}

static void rpc_input_end(void *rpc) { close_input(rpc); }

static void rpc_abort(void *rpc) { rpc_end(rpc); }

static const struct rpc_ops lsp_rpc_ops = {
    .mode = SBX_INPUT_FED,
    .input = rpc_input,
    .input_end = rpc_input_end,
    .writable = rpc_writable,
    .abort = rpc_abort,
};

void verb_lsp_request(struct conn *c, sbx_wire_req *req) {
  struct lsp *l = lsp_find(req->u.lsp_request.server_id);
  if (!l) {
    conn_send_error(c, SBX_ERR_NOT_FOUND, "no such lsp server");
    return;
  }
  if (l->attached) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "lsp server already attached");
    return;
  }
  l->attached = true;
  event_del(l->ttl);
  struct lsp_rpc *x = sbx_calloc(1, sizeof *x);
  x->c = c;
  x->l = l;
  x->in = fdwriter_new(l->in_fd, stdin_drained, x);
  x->rev = event_new(silkd.base, l->out_fd, EV_READ | EV_PERSIST, on_server_out, x);
  l->rpc = x;
  conn_send_simple(c, SBX_RESP_READY);
  event_add(x->rev, NULL);
  conn_rpc_begin(c, &lsp_rpc_ops, x);
}

/* ---- lsp_stop: done once the server is reaped ---- */

static void stop_abort(void *rpc) {
  struct lsp *l = rpc;
  struct conn *c = l->stop_c;
  l->stop_c = NULL;
  conn_rpc_done(c);
  lsp_maybe_free(l);
}

static const struct rpc_ops lsp_stop_ops = {.mode = SBX_INPUT_NONE, .abort = stop_abort};

void verb_lsp_stop(struct conn *c, sbx_wire_req *req) {
  struct lsp *l = lsp_find(req->u.lsp_stop.server_id);
  if (!l) {
    conn_send_error(c, SBX_ERR_NOT_FOUND, "no such lsp server");
    return;
  }
  /* An attached stream reads EOF once the server is dead and ends with
   * done on its own connection. */
  lsp_kill(l);
  lsp_unlink(l);
  event_del(l->ttl);
  if (l->reaped) {
    conn_send_simple(c, SBX_RESP_DONE);
    lsp_maybe_free(l);
    return;
  }
  l->stop_c = c;
  conn_rpc_begin(c, &lsp_stop_ops, l);
}
