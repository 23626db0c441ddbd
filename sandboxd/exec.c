/* exec.c - buffered exec through silkd (spec §4.20).
 *
 * One silkd connection per request: send the exec frame, half-close (the
 * end of input gives the child EOF on stdin, as there is no stdin here),
 * collect stdout/stderr until exit. The timeout, the 8 MiB cap and a
 * vanished client all kill the process through a second connection. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "sandboxd.h"

#define FRAME_MAX (8 * 1024 * 1024 + 1)
#define KILL_BUDGET_S 5

struct exec_op {
  struct exec_op *prev, *next;
  struct sbxd *d;
  struct http_req *req; /* NULL once answered or the client left */
  char id[SBX_LEASE_ID_LEN + 1];
  struct bufferevent *bev;
  struct event *timer;
  long pid; /* from started; 0 until then */
  bool kill_pending; /* answered; kill as soon as the pid is known */
  sbx_buf out, err;
};

static void list_add(struct sbxd *d, struct exec_op *op) {
  op->next = d->execs;
  if (d->execs) d->execs->prev = op;
  d->execs = op;
}

static void list_del(struct sbxd *d, struct exec_op *op) {
  if (op->prev) op->prev->next = op->next;
  else d->execs = op->next;
  if (op->next) op->next->prev = op->prev;
}

static void op_free(struct exec_op *op) {
  list_del(op->d, op);
  if (op->bev) bufferevent_free(op->bev);
  if (op->timer) event_free(op->timer);
  sbx_buf_free(&op->out);
  sbx_buf_free(&op->err);
  sbx_free(op);
}

/* ---- kill on a fresh connection, fire and forget ---- */

struct killer {
  struct bufferevent *bev;
  struct event *timer;
};

static void killer_free(struct killer *k) {
  bufferevent_free(k->bev);
  event_free(k->timer);
  sbx_free(k);
}

static void killer_read(struct bufferevent *bev, void *arg) { killer_free(arg); }
static void killer_event(struct bufferevent *bev, short what, void *arg) {
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) killer_free(arg);
}
static void killer_timeout(evutil_socket_t fd, short what, void *arg) { killer_free(arg); }

static void send_kill(struct sbxd *d, const char *id, long pid) {
  sbx_lease *l = sbx_lease_find(d->leases, id);
  if (!l || !l->inst || pid <= 0) return;
  int fd;
  sbx_error err;
  if (inst_connect(l->inst, &fd, &err) < 0) {
    sbx_warn("exec %s: kill %ld: %s", id, pid, err.msg);
    return;
  }
  evutil_make_socket_nonblocking(fd);
  struct killer *k = sbx_calloc(1, sizeof *k);
  k->bev = bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE);
  k->timer = evtimer_new(d->base, killer_timeout, k);
  bufferevent_setcb(k->bev, killer_read, NULL, killer_event, k);
  bufferevent_enable(k->bev, EV_READ | EV_WRITE);
  sbx_wire_req kill = {.op = SBX_OP_KILL, .u.kill = {.pid = (uint32_t)pid, .has_signal = true, .signal = 9}};
  frame_send(bufferevent_get_output(k->bev), &kill, &err); /* a kill frame always fits */
  struct timeval tv = {KILL_BUDGET_S, 0};
  evtimer_add(k->timer, &tv);
}

/* ---- the exec connection ---- */

/* Answer (if anyone still waits) and end the op. A kill before silkd has
 * said `started` cannot name a pid yet: the op then lives on, answered,
 * until the pid arrives (or the kill budget runs out). */
static void finish(struct exec_op *op, int status, json_t *body, bool kill) {
  if (op->req) metrics_exec(&op->d->m, status, body);
  if (op->req) reply_json(op->req, status, body);
  else json_decref(body);
  op->req = NULL;
  if (kill && op->pid <= 0 && !op->kill_pending) {
    op->kill_pending = true;
    struct timeval tv = {KILL_BUDGET_S, 0};
    evtimer_add(op->timer, &tv);
    return;
  }
  if (kill) send_kill(op->d, op->id, op->pid);
  op_free(op);
}

static void finish_error(struct exec_op *op, int status, const char *msg, bool kill) {
  finish(op, status, json_pack("{s:s}", "error", msg), kill);
}

/* Append a stdout or stderr payload to what the op collected, within the
 * output cap: 0, or -1 when the op is gone (answered 413). */
static int collect(struct exec_op *op, sbx_buf *dst, const sbx_wire_bytes *data) {
  sbx_error err;
  if (op->out.len + op->err.len + data->len > EXEC_OUTPUT_MAX || sbx_buf_add(dst, data->ptr, data->len, &err) < 0) {
    finish_error(op, 413, "exec output too large", true);
    return -1;
  }
  return 0;
}

/* Answered already: only the pid matters now, and the end of the command. */
static int handle_late(struct exec_op *op, const sbx_wire_resp *f) {
  if (f->type == SBX_RESP_STARTED) {
    op->pid = f->u.started.pid;
    send_kill(op->d, op->id, op->pid);
    op_free(op);
    return -1;
  }
  if (f->type == SBX_RESP_EXIT || f->type == SBX_RESP_ERROR) {
    op_free(op);
    return -1;
  }
  return 0;
}

/* One frame from silkd: 0 to read on, -1 when the op is gone. */
static int handle(struct exec_op *op, const sbx_wire_resp *f) {
  if (op->kill_pending) return handle_late(op, f);
  switch (f->type) {
  case SBX_RESP_STARTED: op->pid = f->u.started.pid; return 0;
  case SBX_RESP_STDOUT: return collect(op, &op->out, &f->u.stdout_.data);
  case SBX_RESP_STDERR: return collect(op, &op->err, &f->u.stderr_.data);
  case SBX_RESP_EXIT: {
    json_t *body = json_pack("{s:I,s:o,s:o}", "exit_code", (json_int_t)f->u.exit.code, "stdout",
                             json_string_lossy(op->out.ptr ? op->out.ptr : "", op->out.len), "stderr",
                             json_string_lossy(op->err.ptr ? op->err.ptr : "", op->err.len));
    finish(op, 200, body, false);
    return -1;
  }
  case SBX_RESP_ERROR: {
    bool bad = f->u.error.kind == SBX_ERR_BAD_REQUEST;
    const char *msg = f->u.error.message;
    finish_error(op, bad ? 400 : 502, msg ? msg : "guest error", !bad && op->pid > 0);
    return -1;
  }
  default: return 0; /* nothing exec answers with */
  }
}

static int handle_frame(struct exec_op *op, const char *line, size_t len) {
  sbx_wire_resp f;
  sbx_error err;
  if (sbx_wire_decode_resp(line, len, &f, &err) < 0) {
    finish_error(op, 502, "guest agent sent a malformed frame", true);
    return -1;
  }
  int rc = handle(op, &f);
  sbx_wire_resp_free(&f);
  return rc;
}

static void exec_read(struct bufferevent *bev, void *arg) {
  struct exec_op *op = arg;
  struct evbuffer *in = bufferevent_get_input(bev);
  const char *line;
  size_t len;
  int got;
  while ((got = frame_next(in, FRAME_MAX, &line, &len)) == 1) {
    if (handle_frame(op, line, len) < 0) return; /* op is gone */
    evbuffer_drain(in, len + 1);
  }
  if (got < 0) finish_error(op, 502, "guest agent frame too large", true);
}

static void exec_event(struct bufferevent *bev, short what, void *arg) {
  struct exec_op *op = arg;
  if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) return;
  if (op->kill_pending) op_free(op);
  else finish_error(op, 502, "guest agent unreachable", false);
}

static void exec_written(struct bufferevent *bev, void *arg) {
  /* The request is out: end the input so the child's stdin sees EOF. */
  shutdown(bufferevent_getfd(bev), SHUT_WR);
  bufferevent_setcb(bev, exec_read, NULL, exec_event, arg);
}

static void exec_timeout(evutil_socket_t fd, short what, void *arg) {
  struct exec_op *op = arg;
  if (op->kill_pending) op_free(op); /* the kill budget ran out */
  else finish_error(op, 504, "exec timed out", true);
}

static void exec_client_gone(void *arg) {
  struct exec_op *op = arg;
  /* The answer goes nowhere (the reply just frees the request); kill the
   * command. */
  finish_error(op, 499, "client gone", true);
}

static int bad(struct http_req *req, const char *msg) {
  reply_error(req, 400, msg);
  return -1;
}

/* The exec request of a validated body, encoded into frame: 0, or -1 when
 * it cannot be a frame (answered). The strings stay the body's. */
static int encode_exec(struct http_req *req, json_t *argv, json_t *cwd, json_t *env, sbx_buf *frame) {
  size_t argc = json_array_size(argv), envc = json_is_object(env) ? json_object_size(env) : 0;
  const char **av = sbx_calloc(argc, sizeof *av);
  sbx_wire_kv *kv = sbx_calloc(envc ? envc : 1, sizeof *kv);
  size_t i, n = 0;
  const char *k;
  json_t *v;
  json_array_foreach(argv, i, v) av[i] = json_string_value(v);
  if (envc) json_object_foreach(env, k, v) kv[n++] = (sbx_wire_kv){k, json_string_value(v)};
  sbx_wire_req r = {.op = SBX_OP_EXEC};
  r.u.exec.argv = (sbx_wire_strv){av, argc};
  r.u.exec.cwd = json_is_string(cwd) ? json_string_value(cwd) : NULL;
  r.u.exec.env = (sbx_wire_map){kv, envc, json_is_object(env)};
  sbx_error err;
  int rc = sbx_wire_encode_req(frame, &r, &err);
  sbx_free(av);
  sbx_free(kv);
  if (rc == SBX_E_TOOBIG) {
    reply_error(req, 413, "exec request too large");
    return -1;
  }
  return rc < 0 ? bad(req, err.msg) : 0;
}

/* A string member holding a NUL (\u0000), which no argv, cwd or env may
 * carry (silkd refuses it the same way, spec §1.6). */
static bool has_nul(json_t *s) { return json_is_string(s) && strlen(json_string_value(s)) != json_string_length(s); }

static int build_frame(struct http_req *req, json_t *body, sbx_buf *frame, json_int_t *timeout) {
  const char *k;
  json_t *v;
  json_object_foreach(body, k, v) {
    if (strcmp(k, "argv") && strcmp(k, "cwd") && strcmp(k, "env") && strcmp(k, "timeout_seconds")) {
      char msg[160];
      snprintf(msg, sizeof msg, "unknown field %.100s", k);
      return bad(req, msg);
    }
  }
  json_t *argv = json_object_get(body, "argv");
  if (!json_is_array(argv) || json_array_size(argv) == 0) return bad(req, "invalid argv: must be a non-empty array");
  size_t i;
  json_array_foreach(argv, i, v) {
    if (!json_is_string(v)) return bad(req, "invalid argv: must hold strings");
    if (i == 0 && json_string_length(v) == 0) return bad(req, "invalid argv: argv[0] must not be empty");
    if (has_nul(v)) return bad(req, "invalid argument: NUL byte in argv");
  }
  json_t *cwd = json_object_get(body, "cwd");
  if (cwd && !json_is_null(cwd) && !json_is_string(cwd)) return bad(req, "invalid cwd: must be a string");
  if (has_nul(cwd)) return bad(req, "invalid argument: NUL byte in cwd");
  json_t *env = json_object_get(body, "env");
  if (env && !json_is_null(env)) {
    if (!json_is_object(env)) return bad(req, "invalid env: must be an object of strings");
    json_object_foreach(env, k, v) {
      if (!json_is_string(v)) return bad(req, "invalid env: values must be strings");
      if (has_nul(v)) return bad(req, "invalid argument: NUL byte in env");
    }
  }
  json_t *t = json_object_get(body, "timeout_seconds");
  *timeout = 0;
  if (t && !json_is_null(t)) {
    if (!json_is_integer(t)) return bad(req, "invalid timeout_seconds: must be an integer");
    if (json_integer_value(t) < 0) return bad(req, "invalid timeout_seconds: must not be negative");
    *timeout = json_integer_value(t);
  }
  return encode_exec(req, argv, cwd, env, frame);
}

void h_exec(struct sbxd *d, struct http_req *req, const char *id) {
  sbx_lease *l = auth_sbx(d, req, id, false, "unknown sandbox");
  if (!l) return;
  json_t *body = decode_body(req, true);
  if (!body) return;
  sbx_buf frame = SBX_BUF_INIT(SBX_WIRE_FRAME_CAP + 1);
  json_int_t timeout;
  int rc = build_frame(req, body, &frame, &timeout);
  json_decref(body);
  if (rc < 0 || lease_touch(d, req, l) < 0) { /* a hibernated sandbox wakes (§5.6) */
    sbx_buf_free(&frame);
    return;
  }
  int fd = -1;
  sbx_error err;
  if (!l->inst || inst_connect(l->inst, &fd, &err) < 0) {
    if (l->inst) sbx_warn("exec %s: %s", l->id, err.msg);
    sbx_buf_free(&frame);
    reply_error(req, 502, "guest agent unreachable");
    return;
  }
  evutil_make_socket_nonblocking(fd);
  struct exec_op *op = sbx_calloc(1, sizeof *op);
  op->d = d;
  op->req = req;
  snprintf(op->id, sizeof op->id, "%s", l->id);
  sbx_buf_init(&op->out, EXEC_OUTPUT_MAX + 64);
  sbx_buf_init(&op->err, EXEC_OUTPUT_MAX + 64);
  list_add(d, op);
  op->bev = bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE);
  bufferevent_setcb(op->bev, exec_read, exec_written, exec_event, op);
  bufferevent_enable(op->bev, EV_READ | EV_WRITE);
  evbuffer_add(bufferevent_get_output(op->bev), frame.ptr, frame.len);
  sbx_buf_free(&frame);
  op->timer = evtimer_new(d->base, exec_timeout, op);
  if (timeout > 0) {
    struct timeval tv = {(time_t)timeout, 0};
    evtimer_add(op->timer, &tv);
  }
  req->on_close = exec_client_gone;
  req->on_close_arg = op;
}

void exec_shutdown(struct sbxd *d) {
  while (d->execs) {
    struct exec_op *op = d->execs;
    if (op->req) {
      op->req->on_close = NULL;
      reply_error(op->req, 502, "shutting down");
      op->req = NULL;
    }
    op_free(op);
  }
}
