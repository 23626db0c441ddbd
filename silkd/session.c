/* session.c - persistent bash sessions (§5.4).
 *
 * Each command is followed by a printf of a fresh 128-bit marker; output up
 * to the marker is the command's stdout, the number after it is $?. Code in
 * the session cannot guess the marker, so it cannot end its own command.
 * The shell's stdout is read all the time (between commands too, to discard
 * background noise), and never more than one command runs per session.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "silkd.h"

#define MARK_LEN (7 + 32 + 2) /* __SILK_ + hex + __ */
#define AFTER_MAX (64 * 1024)
#define IDLE_SECS 1800
#define IDLE_CHECK_SECS 60

struct session;

struct scmd {
  struct scmd *next;
  struct session *s;
  struct conn *c; /* NULL once the client is gone (or for init) */
  bool is_init;
  struct conn *create_conn; /* init: who gets session_created */
  char *script;
  char mark[MARK_LEN + 1];
  bool after; /* marker seen, reading up to its LF */
  char pend[MARK_LEN];
  size_t pend_len;
  char *tail; /* bytes after the marker */
  size_t tail_len;
};

struct session {
  struct session *next;
  char *id;
  bool registered;
  pid_t pid;
  struct fdwriter *in;
  int out_fd;
  struct event *out_ev;
  bool paused;
  uint64_t last_active_ns;
  struct scmd *cur, *queue;
};

static struct session *sessions;
static struct event *idle_timer;

size_t session_count(void) {
  size_t n = 0;
  for (struct session *s = sessions; s; s = s->next) n++;
  return n;
}

static struct session *session_find(const char *id) {
  for (struct session *s = sessions; s; s = s->next)
    if (!strcmp(s->id, id)) return s;
  return NULL;
}

static void unregister(struct session *s) {
  if (!s->registered) return;
  for (struct session **ps = &sessions; *ps; ps = &(*ps)->next)
    if (*ps == s) {
      *ps = s->next;
      break;
    }
  s->registered = false;
}

static void kill_group(struct session *s) {
  if (s->pid > 1) kill(-s->pid, SIGKILL);
}

static void scmd_free(struct scmd *m) {
  sbx_free(m->script);
  sbx_free(m->tail);
  sbx_free(m);
}

static const struct rpc_ops scmd_ops;

static void cmd_start(struct session *s);

/* End the current command with code, or with the shell-death error. */
static void cmd_end(struct session *s, struct scmd *m, bool died, int code) {
  s->cur = NULL;
  s->last_active_ns = sbx_now_ns();
  if (m->is_init) {
    struct conn *c = m->create_conn;
    if (died) {
      conn_send_error(c, SBX_ERR_INTERNAL, "session create: shell exited");
    } else if (session_find(s->id)) {
      conn_send_error(c, SBX_ERR_BAD_REQUEST, "session create: session id already exists");
      kill_group(s);
    } else {
      s->registered = true;
      s->next = sessions;
      sessions = s;
      sbx_wire_resp r = {.type = SBX_RESP_SESSION_CREATED, .u.session_created.id = s->id};
      conn_send_resp(c, &r);
    }
    conn_rpc_done(c);
  } else if (m->c) {
    if (died) conn_send_error(m->c, SBX_ERR_INTERNAL, "session: shell exited");
    else conn_send_exit(m->c, code);
    conn_rpc_done(m->c);
  }
  scmd_free(m);
}

static void session_free(struct session *s) {
  unregister(s);
  kill_group(s);
  if (s->cur) cmd_end(s, s->cur, true, -1);
  while (s->queue) {
    struct scmd *m = s->queue;
    s->queue = m->next;
    cmd_end(s, m, true, -1);
  }
  event_free(s->out_ev);
  close(s->out_fd);
  fdwriter_free(s->in);
  sbx_free(s->id);
  sbx_free(s);
}

static void emit(struct session *s, struct scmd *m, const char *p, size_t n) {
  if (n == 0 || !m->c) return;
  conn_send_bulk(m->c, SBX_BULK_STDOUT, p, n);
  if (conn_out_len(m->c) >= SILKD_OUT_HIGH && !s->paused) {
    s->paused = true;
    event_del(s->out_ev);
    conn_want_writable(m->c);
  }
}

static bool after_marker(struct session *s, struct scmd *m, const char *p, size_t n) {
  size_t room = AFTER_MAX - m->tail_len;
  if (n > room) n = room;
  if (!m->tail) m->tail = sbx_malloc(AFTER_MAX + 1);
  memcpy(m->tail + m->tail_len, p, n);
  m->tail_len += n;
  char *nl = memchr(m->tail, '\n', m->tail_len);
  if (!nl && m->tail_len < AFTER_MAX) return false;
  if (nl) *nl = 0;
  else m->tail[m->tail_len] = 0;
  char *str = m->tail, *end;
  while (*str == ' ' || *str == '\t' || *str == '\r') str++;
  errno = 0;
  long v = strtol(str, &end, 10);
  while (*end == ' ' || *end == '\t' || *end == '\r') end++;
  int code = (end == str || *end || errno || v < INT32_MIN || v > INT32_MAX) ? -1 : (int)v;
  cmd_end(s, m, false, code);
  return true;
}

static void on_shell_out(evutil_socket_t fd, short what, void *arg) {
  struct session *s = arg;
  char buf[SILKD_PIECE + MARK_LEN];
  struct scmd *m = s->cur;
  size_t off = 0;
  if (m && !m->after) {
    memcpy(buf, m->pend, m->pend_len);
    off = m->pend_len;
  }
  ssize_t n = read(s->out_fd, buf + off, SILKD_PIECE);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    session_free(s); /* the shell died: every command fails */
    return;
  }
  if (!m) return; /* between commands: discarded */
  if (m->after) {
    if (after_marker(s, m, buf, (size_t)n)) cmd_start(s);
    return;
  }
  size_t len = off + (size_t)n;
  char *hit = memmem(buf, len, m->mark, MARK_LEN);
  if (hit) {
    size_t before = (size_t)(hit - buf);
    if (!m->is_init) emit(s, m, buf, before);
    m->after = true;
    m->pend_len = 0;
    if (after_marker(s, m, hit + MARK_LEN, len - before - MARK_LEN)) cmd_start(s);
    return;
  }
  /* Hold back only a tail that could be the start of the marker, so plain
   * output is never delayed. */
  size_t keep = len < MARK_LEN - 1 ? len : MARK_LEN - 1;
  while (keep > 0 && memcmp(buf + len - keep, m->mark, keep) != 0) keep--;
  if (!m->is_init) emit(s, m, buf, len - keep);
  memcpy(m->pend, buf + len - keep, keep);
  m->pend_len = keep;
}

static void cmd_start(struct session *s) {
  if (s->cur || !s->queue) return;
  struct scmd *m = s->queue;
  s->queue = m->next;
  m->next = NULL;
  s->cur = m;
  if (s->paused) {
    s->paused = false;
    event_add(s->out_ev, NULL);
  }
  size_t n = strlen(m->script);
  fdwriter_write(s->in, m->script, n);
}

static int make_marker(char mark[MARK_LEN + 1]) {
  uint8_t rnd[16];
  size_t got = 0;
  while (got < sizeof rnd) {
    ssize_t k = getrandom(rnd + got, sizeof rnd - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    got += (size_t)k;
  }
  char *p = mark + sprintf(mark, "__SILK_");
  for (size_t i = 0; i < 16; i++) p += sprintf(p, "%02x", rnd[i]);
  sprintf(p, "__");
  return 0;
}

static void quote(sbx_buf *b, const char *s) {
  sbx_buf_addc(b, '\'', NULL);
  for (; *s; s++) {
    if (*s == '\'') sbx_buf_adds(b, "'\\''", NULL);
    else sbx_buf_addc(b, *s, NULL);
  }
  sbx_buf_addc(b, '\'', NULL);
}

static struct scmd *scmd_new(struct session *s, const char *body, bool wrap) {
  struct scmd *m = sbx_calloc(1, sizeof *m);
  m->s = s;
  if (make_marker(m->mark) < 0) {
    sbx_free(m);
    return NULL;
  }
  sbx_buf b = SBX_BUF_INIT(SIZE_MAX / 2);
  if (wrap) sbx_buf_printf(&b, NULL, "{ %s ; } </dev/null\n", body);
  else sbx_buf_adds(&b, body, NULL);
  sbx_buf_printf(&b, NULL, "printf '%s %%s\\n' \"$?\"\n", m->mark);
  m->script = sbx_buf_steal(&b, NULL);
  return m;
}

static void enqueue(struct session *s, struct scmd *m) {
  struct scmd **pp = &s->queue;
  while (*pp) pp = &(*pp)->next;
  *pp = m;
  cmd_start(s);
}

/* ---- RPC glue for exec-in-session ---- */

static void scmd_writable(void *rpc) {
  struct scmd *m = rpc;
  struct session *s = m->s;
  if (s->paused && s->cur == m) {
    s->paused = false;
    event_add(s->out_ev, NULL);
  }
}

static void scmd_abort(void *rpc) {
  struct scmd *m = rpc;
  struct session *s = m->s;
  struct conn *c = m->c;
  m->c = NULL;
  if (s->cur == m) {
    /* Keep reading to the marker so the next command starts clean. */
    scmd_writable(m);
  } else {
    for (struct scmd **pp = &s->queue; *pp; pp = &(*pp)->next)
      if (*pp == m) {
        *pp = m->next;
        scmd_free(m);
        break;
      }
  }
  conn_rpc_done(c);
}

static const struct rpc_ops scmd_ops = {.mode = SBX_INPUT_NONE, .writable = scmd_writable, .abort = scmd_abort};

static void create_abort(void *rpc) {
  struct scmd *m = rpc;
  /* session_created will go nowhere; still finish init. */
  (void)m;
}
static const struct rpc_ops create_ops = {.mode = SBX_INPUT_NONE, .abort = create_abort};

void session_exec(struct conn *c, sbx_wire_req *req) {
  struct session *s = session_find(req->u.exec.session);
  if (!s) {
    conn_send_error(c, SBX_ERR_NOT_FOUND, "no such session");
    return;
  }
  sbx_buf line = SBX_BUF_INIT(SIZE_MAX / 2);
  for (size_t i = 0; i < req->u.exec.argv.len; i++) {
    if (i) sbx_buf_addc(&line, ' ', NULL);
    quote(&line, req->u.exec.argv.items[i]);
  }
  struct scmd *m = scmd_new(s, line.ptr, true);
  sbx_buf_free(&line);
  if (!m) {
    conn_send_error(c, SBX_ERR_INTERNAL, "session: no entropy for the marker");
    return;
  }
  m->c = c;
  conn_rpc_begin(c, &scmd_ops, m);
  enqueue(s, m);
}

static bool env_name_ok(const char *k) {
  if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || *k == '_')) return false;
  for (k++; *k; k++)
    if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || (*k >= '0' && *k <= '9') || *k == '_'))
      return false;
  return true;
}

void verb_session_create(struct conn *c, sbx_wire_req *req) {
  sbx_req_session_create *q = &req->u.session_create;
  for (size_t i = 0; i < q->env.len; i++) {
    if (!env_name_ok(q->env.items[i].key)) {
      conn_send_error(c, SBX_ERR_BAD_REQUEST, "session create: invalid env name \"%s\"", q->env.items[i].key);
      return;
    }
  }
  char gen[64];
  const char *id = q->id;
  if (!id || !*id) {
    snprintf(gen, sizeof gen, "sess-%d-%llu", (int)silkd.pid, (unsigned long long)silkd_next_id());
    id = gen;
  }
  if (session_find(id)) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "session create: session id already exists");
    return;
  }
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (devnull < 0 || pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
    conn_send_error(c, SBX_ERR_INTERNAL, "session create: %s (os error %d)", strerror(errno), errno);
    if (devnull >= 0) close(devnull);
    for (int i = 0; i < 2; i++) {
      if (in[i] >= 0) close(in[i]);
      if (out[i] >= 0) close(out[i]);
    }
    return;
  }
  const char *argv[] = {silkd_shell(), NULL};
  struct spawn_opts o = {.argv = argv, .envp = env_build(NULL, NULL, NULL), .fd0 = in[0], .fd1 = out[1], .fd2 = devnull,
                         .new_pgrp = true};
  pid_t pid;
  sbx_error e;
  int rc = spawn_child(&o, &pid, &e);
  envp_free(o.envp);
  close(in[0]);
  close(out[1]);
  close(devnull);
  if (rc < 0) {
    close(in[1]);
    close(out[0]);
    conn_send_error(c, SBX_ERR_INTERNAL, "session create: %s", e.msg);
    return;
  }
  struct session *s = sbx_calloc(1, sizeof *s);
  s->id = sbx_strdup(id);
  s->pid = pid;
  s->in = fdwriter_new(in[1], NULL, NULL);
  s->out_fd = out[0];
  set_nonblock(out[0]);
  s->out_ev = event_new(silkd.base, out[0], EV_READ | EV_PERSIST, on_shell_out, s);
  event_add(s->out_ev, NULL);
  s->last_active_ns = sbx_now_ns();

  sbx_buf init = SBX_BUF_INIT(SIZE_MAX / 2);
  sbx_buf_adds(&init, "exec 2>&1\n", NULL);
  if (q->cwd && *q->cwd) {
    sbx_buf_adds(&init, "cd ", NULL);
    quote(&init, q->cwd);
    sbx_buf_adds(&init, " || exit 1\n", NULL);
  }
  for (size_t i = 0; i < q->env.len; i++) {
    sbx_buf_printf(&init, NULL, "export %s=", q->env.items[i].key);
    quote(&init, q->env.items[i].value);
    sbx_buf_addc(&init, '\n', NULL);
  }
  struct scmd *m = scmd_new(s, init.ptr, false);
  sbx_buf_free(&init);
  if (!m) {
    conn_send_error(c, SBX_ERR_INTERNAL, "session create: no entropy for the marker");
    session_free(s);
    return;
  }
  m->is_init = true;
  m->create_conn = c;
  conn_rpc_begin(c, &create_ops, m);
  enqueue(s, m);
}

void verb_session_list(struct conn *c, sbx_wire_req *req) {
  size_t n = session_count(), i = 0;
  const char **ids = sbx_calloc(n ? n : 1, sizeof *ids);
  for (struct session *s = sessions; s; s = s->next) ids[i++] = s->id;
  for (size_t a = 1; a < n; a++) /* insertion sort by bytes */
    for (size_t b = a; b > 0 && strcmp(ids[b - 1], ids[b]) > 0; b--) {
      const char *t = ids[b];
      ids[b] = ids[b - 1];
      ids[b - 1] = t;
    }
  sbx_wire_resp r = {.type = SBX_RESP_SESSIONS, .u.sessions.sessions = {ids, n}};
  conn_send_resp(c, &r);
  sbx_free(ids);
}

void verb_session_rm(struct conn *c, sbx_wire_req *req) {
  struct session *s = session_find(req->u.session_rm.id);
  if (!s) {
    conn_send_error(c, SBX_ERR_NOT_FOUND, "no such session");
    return;
  }
  /* The shell's EOF frees it and fails a running command. */
  unregister(s);
  kill_group(s);
  conn_send_simple(c, SBX_RESP_DONE);
}

static void on_idle_check(evutil_socket_t fd, short what, void *arg) {
  uint64_t now = sbx_now_ns();
  for (struct session *s = sessions, *next; s; s = next) {
    next = s->next;
    if (!s->cur && !s->queue && now - s->last_active_ns >= (uint64_t)IDLE_SECS * 1000000000u) {
      sbx_info("session %s idle for %d s: removed", s->id, IDLE_SECS);
      unregister(s);
      kill_group(s);
    }
  }
}

void session_init(void) {
  idle_timer = event_new(silkd.base, -1, EV_PERSIST, on_idle_check, NULL);
  struct timeval tv = {IDLE_CHECK_SECS, 0};
  event_add(idle_timer, &tv);
}

void session_kill_all(void) {
  for (struct session *s = sessions; s; s = s->next) kill_group(s);
}
