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
  evbuffer_add_printf(bufferevent_get_output(k->bev), "{\"v\":1,\"op\":\"kill\",\"pid\":%ld,\"signal\":9}\n", pid);
  struct timeval tv = {KILL_BUDGET_S, 0};
  evtimer_add(k->timer, &tv);
}

/* ---- the exec connection ---- */

/* Answer (if anyone still waits) and end the op. A kill before silkd has
 * said `started` cannot name a pid yet: the op then lives on, answered,
 * until the pid arrives (or the kill budget runs out). */
static void finish(struct exec_op *op, int status, json_t *body, bool kill) {
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

static int handle_frame(struct exec_op *op, const char *line, size_t len) {
  json_error_t je;
  json_t *f = json_loadb(line, len, 0, &je);
  if (!f || !json_is_object(f)) {
    json_decref(f);
    finish_error(op, 502, "guest agent sent a malformed frame", true);
    return -1;
  }
  const char *type = json_string_value(json_object_get(f, "type"));
  type = type ? type : "";
  int rc = 0;
  if (op->kill_pending) {
    /* Answered already; only the pid matters now. */
    if (strcmp(type, "started") == 0) {
      op->pid = (long)json_integer_value(json_object_get(f, "pid"));
      send_kill(op->d, op->id, op->pid);
      op_free(op);
      rc = -1;
    } else if (strcmp(type, "exit") == 0 || strcmp(type, "error") == 0) {
      op_free(op);
      rc = -1;
    }
  } else if (strcmp(type, "started") == 0) {
    op->pid = (long)json_integer_value(json_object_get(f, "pid"));
  } else if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
    const char *b64 = json_string_value(json_object_get(f, "data"));
    size_t bl = b64 ? json_string_length(json_object_get(f, "data")) : 0;
    sbx_buf *dst = type[3] == 'o' ? &op->out : &op->err;
    char *w;
    size_t got = 0;
    sbx_error err;
    if (op->out.len + op->err.len + sbx_b64_decoded_max(bl) > EXEC_OUTPUT_MAX + 3 ||
        sbx_buf_reserve(dst, sbx_b64_decoded_max(bl) + 1, &w, &err) < 0) {
      finish_error(op, 413, "exec output too large", true);
      rc = -1;
    } else if (sbx_b64_decode(w, b64 ? b64 : "", bl, &got, &err) < 0) {
      finish_error(op, 502, "guest agent sent bad base64", true);
      rc = -1;
    } else {
      sbx_buf_commit(dst, got);
      if (op->out.len + op->err.len > EXEC_OUTPUT_MAX) {
        finish_error(op, 413, "exec output too large", true);
        rc = -1;
      }
    }
  } else if (strcmp(type, "exit") == 0) {
    json_t *body = json_pack("{s:I,s:o,s:o}", "exit_code", json_integer_value(json_object_get(f, "code")), "stdout",
                             json_string_lossy(op->out.ptr ? op->out.ptr : "", op->out.len), "stderr",
                             json_string_lossy(op->err.ptr ? op->err.ptr : "", op->err.len));
    finish(op, 200, body, false);
    rc = -1;
  } else if (strcmp(type, "error") == 0) {
    const char *kind = json_string_value(json_object_get(f, "kind"));
    const char *msg = json_string_value(json_object_get(f, "message"));
    bool bad = kind && strcmp(kind, "bad_request") == 0;
    finish_error(op, bad ? 400 : 502, msg ? msg : "guest error", !bad && op->pid > 0);
    rc = -1;
  }
  json_decref(f);
  return rc;
}

static void exec_read(struct bufferevent *bev, void *arg) {
  struct exec_op *op = arg;
  struct evbuffer *in = bufferevent_get_input(bev);
  for (;;) {
    struct evbuffer_ptr nl = evbuffer_search(in, "\n", 1, NULL);
    if (nl.pos < 0) {
      if (evbuffer_get_length(in) > FRAME_MAX) finish_error(op, 502, "guest agent frame too large", true);
      return;
    }
    size_t len = (size_t)nl.pos;
    char *line = (char *)evbuffer_pullup(in, (ssize_t)len + 1);
    int rc = handle_frame(op, line, len);
    if (rc < 0) return; /* op is gone */
    evbuffer_drain(in, len + 1);
  }
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

static int build_frame(struct http_req *req, json_t *body, json_t **frame, json_int_t *timeout) {
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
  }
  json_t *cwd = json_object_get(body, "cwd");
  if (cwd && !json_is_null(cwd) && !json_is_string(cwd)) return bad(req, "invalid cwd: must be a string");
  json_t *env = json_object_get(body, "env");
  if (env && !json_is_null(env)) {
    if (!json_is_object(env)) return bad(req, "invalid env: must be an object of strings");
    json_object_foreach(env, k, v) if (!json_is_string(v)) return bad(req, "invalid env: values must be strings");
  }
  json_t *t = json_object_get(body, "timeout_seconds");
  *timeout = 0;
  if (t && !json_is_null(t)) {
    if (!json_is_integer(t)) return bad(req, "invalid timeout_seconds: must be an integer");
    if (json_integer_value(t) < 0) return bad(req, "invalid timeout_seconds: must not be negative");
    *timeout = json_integer_value(t);
  }
  *frame = json_pack("{s:i,s:s,s:O}", "v", 1, "op", "exec", "argv", argv);
  if (cwd && json_is_string(cwd)) json_object_set(*frame, "cwd", cwd);
  if (env && json_is_object(env)) json_object_set(*frame, "env", env);
  return 0;
}

void h_exec(struct sbxd *d, struct http_req *req, const char *id) {
  sbx_lease *l = auth_sbx(d, req, id, false, "unknown sandbox");
  if (!l) return;
  json_t *body = decode_body(req, true);
  if (!body) return;
  json_t *frame = NULL;
  json_int_t timeout;
  int rc = build_frame(req, body, &frame, &timeout);
  json_decref(body);
  if (rc < 0 || lease_touch(d, req, l) < 0) return; /* a hibernated sandbox wakes (§5.6) */
  int fd = -1;
  sbx_error err;
  if (!l->inst || inst_connect(l->inst, &fd, &err) < 0) {
    if (l->inst) sbx_warn("exec %s: %s", l->id, err.msg);
    json_decref(frame);
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
  char *s = json_dumps(frame, JSON_COMPACT);
  json_decref(frame);
  evbuffer_add(bufferevent_get_output(op->bev), s, strlen(s));
  evbuffer_add(bufferevent_get_output(op->bev), "\n", 1);
  free(s);
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
