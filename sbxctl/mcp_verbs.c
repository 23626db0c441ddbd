/* sbxctl mcp: the tools' work. Each verb fills *out with the JSON object
 * of a successful result, or fails with err->msg worded for the agent
 * (the caller turns it into an isError result). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

#include "mcp.h"

static const char *arg_str(json_t *a, const char *k) { return json_string_value(json_object_get(a, k)); }

/* A sandbox handle from args' sandbox_id, freed by put_sandbox. */
static int get_sandbox(mcp_call *c, json_t *a, sbx_sandbox **s, bool *owned, sbx_error *err) {
  return mcp_sandbox(c, arg_str(a, "sandbox_id"), s, owned, err);
}
static void put_sandbox(sbx_sandbox *s, bool owned) {
  if (owned) sbx_sandbox_free(s);
}

int mcp_with_sandbox(mcp_call *c, json_t *a, mcp_sandbox_fn fn, json_t **out, sbx_error *err) {
  sbx_sandbox *s;
  bool owned;
  int rc = get_sandbox(c, a, &s, &owned, err);
  if (rc < 0) return rc;
  rc = fn(c, s, a, out, err);
  put_sandbox(s, owned);
  return rc;
}

/* The node's default template: its first pool's (needs the operator
 * token), else "host", the template every jail node has. */
static const char *node_template(mcp_call *c, char *buf, size_t n) {
  sbx_node_info info = {0};
  sbx_error err;
  snprintf(buf, n, "host");
  if (sbx_client_info(c->client, &info, &err) == 0 && info.npools > 0 && info.pools[0].key.template_[0])
    snprintf(buf, n, "%s", info.pools[0].key.template_);
  sbx_node_info_free(&info);
  return buf;
}

int mcp_create_sandbox(mcp_call *c, json_t *a, json_t **out, sbx_error *err) {
  char tbuf[256];
  sbx_claim_opts o = SBX_CLAIM_OPTS_INIT(
      .template_ = arg_str(a, "template"),
      .net = arg_str(a, "net"),
      .size = arg_str(a, "size"),
      .ttl_seconds = json_integer_value(json_object_get(a, "ttl_seconds")));
  if (!o.template_) o.template_ = c->default_template ? c->default_template : node_template(c, tbuf, sizeof tbuf);
  if (o.ttl_seconds <= 0) o.ttl_seconds = MCP_DEFAULT_TTL;
  sbx_sandbox *s;
  int rc = sbx_client_claim(c->client, &o, &s, err);
  if (rc < 0) {
    mcp_explain("create_sandbox", NULL, err);
    return rc;
  }
  json_t *res = json_pack("{s:s,s:s,s:s}", "sandbox_id", sbx_sandbox_id(s), "deadline", sbx_sandbox_deadline(s),
                          "template", o.template_);
  if (!mcp_registry_add(c->reg, s)) {
    /* shutdown began while the claim ran: nobody would release it later */
    sbx_error e2;
    sbx_sandbox_release(s, &e2);
    sbx_sandbox_free(s);
    json_decref(res);
    return sbx_err(err, SBX_E_BUSY, "create_sandbox: the server is shutting down");
  }
  fprintf(stderr, "sbxctl mcp: created %s\n", json_string_value(json_object_get(res, "sandbox_id")));
  *out = res;
  return 0;
}

/* ---- exec and logs: output captured into capped buffers ---- */
/* exec's own timeout_seconds: a thread kills the process when it passes. */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  sbx_sandbox *s;
  uint32_t pid;
  bool done, fired;
  struct timespec until; /* CLOCK_MONOTONIC */
} watchdog;

typedef struct {
  mcp_call *c;
  sbx_sandbox *s;
  sbx_buf out, errout;
  bool out_trunc, err_trunc;
  bool cancelled; /* the cap expired before started */
  watchdog *wd;   /* NULL: no timeout_seconds */
} capture;

static int cap_output(void *ud, sbx_stream st, const void *p, size_t n) {
  capture *cp = ud;
  sbx_buf *b = st == SBX_STREAM_STDERR ? &cp->errout : &cp->out;
  bool *tr = st == SBX_STREAM_STDERR ? &cp->err_trunc : &cp->out_trunc;
  size_t room = MCP_OUTPUT_CAP - b->len;
  if (n > room) {
    *tr = true;
    n = room;
  }
  /* past the cap the stream is still read (and dropped) so the process
   * is not blocked on a full pipe and its exit code arrives */
  if (n) sbx_buf_add(b, p, n, NULL);
  return 0;
}

static void cap_started(void *ud, uint32_t pid) {
  capture *cp = ud;
  if (!mcp_call_running(cp->c, cp->s, pid)) cp->cancelled = true;
  if (cp->wd) {
    pthread_mutex_lock(&cp->wd->lock);
    cp->wd->pid = pid;
    pthread_cond_signal(&cp->wd->cond);
    pthread_mutex_unlock(&cp->wd->lock);
  }
}

static void *watchdog_thread(void *arg) {
  watchdog *w = arg;
  pthread_mutex_lock(&w->lock);
  int rc = 0;
  while (!w->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&w->cond, &w->lock, &w->until);
  /* the kill is sent under the lock: exec cannot return and free s meanwhile */
  if (!w->done && w->pid) {
    sbx_error err;
    w->fired = sbx_sandbox_kill(w->s, w->pid, 9, &err) == 0;
  }
  pthread_mutex_unlock(&w->lock);
  return NULL;
}

/* exec's optional inputs: env as KEY=VALUE strings, stdin as a memfd. */
typedef struct {
  const char **env; /* NULL-terminated; the strings are in envbuf */
  char **envbuf;
  size_t nenv;
  int stdin_fd;
} exec_inputs;

static void inputs_free(exec_inputs *in) {
  for (size_t i = 0; i < in->nenv; i++) sbx_free(in->envbuf[i]);
  sbx_free(in->envbuf);
  sbx_free(in->env);
  if (in->stdin_fd >= 0) close(in->stdin_fd);
}

static int inputs_take(json_t *a, exec_inputs *in, sbx_error *err) {
  *in = (exec_inputs){.stdin_fd = -1};
  json_t *env = json_object_get(a, "env"), *v;
  const char *k;
  size_t n = json_object_size(env), i = 0;
  if (n) {
    in->env = sbx_calloc(n + 1, sizeof *in->env);
    in->envbuf = sbx_calloc(n, sizeof *in->envbuf);
  }
  json_object_foreach(env, k, v) {
    if (!*k || strchr(k, '=') || !json_is_string(v))
      return sbx_err(err, SBX_E_INVAL, "exec: env \"%s\": names are non-empty without '=', values strings", k);
    size_t kl = strlen(k), vl = strlen(json_string_value(v));
    char *e = sbx_malloc(kl + vl + 2);
    memcpy(e, k, kl);
    e[kl] = '=';
    memcpy(e + kl + 1, json_string_value(v), vl + 1);
    in->env[i] = in->envbuf[i] = e;
    in->nenv = ++i;
  }
  const char *input = arg_str(a, "stdin");
  if (input) { /* a memfd: the whole input is there before the process starts */
    in->stdin_fd = memfd_create("stdin", MFD_CLOEXEC);
    if (in->stdin_fd < 0 || sbxi_write_all(in->stdin_fd, input, strlen(input)) < 0 || lseek(in->stdin_fd, 0, SEEK_SET) < 0)
      return sbx_err_os(err, errno, "exec: stdin");
  }
  return 0;
}

static void capture_init(capture *cp, mcp_call *c, sbx_sandbox *s) {
  memset(cp, 0, sizeof *cp);
  cp->c = c;
  cp->s = s;
  sbx_buf_init(&cp->out, MCP_OUTPUT_CAP);
  sbx_buf_init(&cp->errout, MCP_OUTPUT_CAP);
}

static json_t *capture_json(capture *cp) {
  bool r1, r2;
  json_t *o = json_object();
  json_object_set_new(o, "stdout", mcp_json_text(cp->out.ptr ? cp->out.ptr : "", cp->out.len, &r1));
  json_object_set_new(o, "stderr", mcp_json_text(cp->errout.ptr ? cp->errout.ptr : "", cp->errout.len, &r2));
  json_object_set_new(o, "truncated", json_boolean(cp->out_trunc || cp->err_trunc));
  json_object_set_new(o, "stdout_truncated", json_boolean(cp->out_trunc));
  json_object_set_new(o, "stderr_truncated", json_boolean(cp->err_trunc));
  if (r1 || r2) json_object_set_new(o, "non_utf8_replaced", json_true());
  return o;
}

static void capture_free(capture *cp) {
  mcp_call_running(cp->c, NULL, 0);
  sbx_buf_free(&cp->out);
  sbx_buf_free(&cp->errout);
}

int mcp_exec(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  exec_inputs in;
  int rc = inputs_take(a, &in, err);
  if (rc < 0) {
    inputs_free(&in);
    return rc;
  }
  const char *argv[] = {"sh", "-c", arg_str(a, "command"), NULL};
  sbx_exec_opts eo = SBX_EXEC_OPTS_INIT(.argv = argv, .cwd = arg_str(a, "cwd"), .env = in.env);
  capture cp;
  capture_init(&cp, c, s);
  json_int_t secs = json_integer_value(json_object_get(a, "timeout_seconds"));
  watchdog wd = {.lock = PTHREAD_MUTEX_INITIALIZER, .s = s};
  pthread_t th;
  if (secs > 0) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wd.cond, &ca);
    pthread_condattr_destroy(&ca);
    clock_gettime(CLOCK_MONOTONIC, &wd.until);
    wd.until.tv_sec += secs;
    cp.wd = &wd;
    if (pthread_create(&th, NULL, watchdog_thread, &wd) != 0) cp.wd = NULL;
  }
  sbx_agent_exec_io io = {.on_output = cap_output, .on_started = cap_started, .ud = &cp, .stdin_fd = in.stdin_fd};
  int code = 0;
  rc = sbx_sandbox_exec(s, &eo, &io, &code, err);
  if (cp.wd) {
    pthread_mutex_lock(&wd.lock);
    wd.done = true;
    pthread_cond_signal(&wd.cond);
    pthread_mutex_unlock(&wd.lock);
    pthread_join(th, NULL);
  }
  if (secs > 0) pthread_cond_destroy(&wd.cond);
  if (rc < 0) {
    mcp_explain("exec in", sbx_sandbox_id(s), err);
  } else {
    *out = capture_json(&cp);
    json_object_set_new(*out, "exit_code", json_integer(code));
    json_object_set_new(*out, "timed_out", json_boolean(wd.fired));
  }
  capture_free(&cp);
  inputs_free(&in);
  return rc;
}

int mcp_logs(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  int rc;
  capture cp;
  capture_init(&cp, c, s);
  sbx_agent_exec_io io = {.on_output = cap_output, .ud = &cp, .stdin_fd = -1};
  int code = 0;
  rc = sbx_sandbox_logs(s, (uint32_t)json_integer_value(json_object_get(a, "pid")), &io, &code, err);
  if (rc < 0) {
    mcp_explain("logs in", sbx_sandbox_id(s), err);
  } else {
    *out = capture_json(&cp);
    json_object_set_new(*out, "exited", json_boolean(code != INT32_MIN));
    if (code != INT32_MIN) json_object_set_new(*out, "exit_code", json_integer(code));
  }
  capture_free(&cp);
  return rc;
}

int mcp_spawn(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  int rc;
  const char *argv[] = {"sh", "-c", arg_str(a, "command"), NULL};
  sbx_exec_opts eo = SBX_EXEC_OPTS_INIT(.argv = argv, .cwd = arg_str(a, "cwd"));
  uint32_t pid = 0;
  rc = sbx_sandbox_spawn(s, &eo, &pid, err);
  if (rc < 0) mcp_explain("spawn in", sbx_sandbox_id(s), err);
  else *out = json_pack("{s:I}", "pid", (json_int_t)pid);
  return rc;
}

int mcp_ps(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  int rc;
  sbx_wire_resp resp;
  rc = sbx_sandbox_ps(s, &resp, err);
  if (rc < 0) {
    mcp_explain("ps in", sbx_sandbox_id(s), err);
    return rc;
  }
  json_t *arr = json_array();
  for (size_t i = 0; i < resp.u.procs.len; i++) {
    const sbx_wire_proc_info *p = &resp.u.procs.items[i];
    json_t *av = json_array();
    for (size_t k = 0; k < p->argv.len; k++)
      json_array_append_new(av, mcp_json_text(p->argv.items[k], strlen(p->argv.items[k]), NULL));
    json_t *o = json_pack("{s:I,s:o,s:b,s:s,s:I}", "pid", (json_int_t)p->pid, "argv", av, "detached", p->detached,
                          "state", p->state == SBX_PROC_RUNNING ? "running" : "exited", "started_at_epoch_secs",
                          (json_int_t)p->started_at_epoch_secs);
    if (p->has_exit_code) json_object_set_new(o, "exit_code", json_integer(p->exit_code));
    json_array_append_new(arr, o);
  }
  sbx_wire_resp_free(&resp);
  *out = json_pack("{s:o}", "processes", arr);
  return 0;
}

int mcp_kill(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  int rc;
  json_t *sig = json_object_get(a, "signal");
  int signo = sig ? (int)json_integer_value(sig) : 9;
  uint32_t pid = (uint32_t)json_integer_value(json_object_get(a, "pid"));
  /* silkd accepts a kill of a pid it still tracks after the exit (and
   * signals nothing): ask first, so the agent learns nothing was sent */
  sbx_wire_resp resp;
  if ((rc = sbx_sandbox_ps(s, &resp, err)) < 0) {
    mcp_explain("kill in", sbx_sandbox_id(s), err);
    return rc;
  }
  const char *why = "no such pid";
  bool running = false;
  for (size_t i = 0; i < resp.u.procs.len; i++) {
    if (resp.u.procs.items[i].pid != pid) continue;
    running = resp.u.procs.items[i].state == SBX_PROC_RUNNING;
    why = "the process has already exited";
  }
  sbx_wire_resp_free(&resp);
  if (!running) {
    *out = json_pack("{s:I,s:i,s:b,s:s}", "pid", (json_int_t)pid, "signal", signo, "sent", 0, "reason", why);
    return 0;
  }
  rc = sbx_sandbox_kill(s, pid, signo, err);
  if (rc < 0) mcp_explain("kill in", sbx_sandbox_id(s), err);
  else *out = json_pack("{s:I,s:i,s:b}", "pid", (json_int_t)pid, "signal", signo, "sent", 1);
  return rc;
}

int mcp_write_file(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  int rc;
  json_t *content = json_object_get(a, "content");
  const char *path = arg_str(a, "path");
  size_t n = json_string_length(content);
  rc = sbx_sandbox_write_file(s, path, json_string_value(content), n, -1, err);
  if (rc < 0) mcp_explain("write_file in", sbx_sandbox_id(s), err);
  else *out = json_pack("{s:s,s:I}", "path", path, "bytes", (json_int_t)n);
  return rc;
}

int mcp_read_file(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  int rc;
  const char *path = arg_str(a, "path");
  sbx_wire_file_info fi;
  sbx_buf b = SBX_BUF_INIT(MCP_FILE_CAP);
  if ((rc = sbx_sandbox_stat(s, path, &fi, err)) < 0) {
    mcp_explain("read_file in", sbx_sandbox_id(s), err);
  } else if (fi.kind != SBX_FILE_FILE) {
    rc = sbx_err(err, SBX_E_INVAL, "read_file: %s is a %s, not a regular file%s", path,
                 fi.kind == SBX_FILE_DIR ? "directory" : fi.kind == SBX_FILE_SYMLINK ? "symlink" : "special file",
                 fi.kind == SBX_FILE_DIR ? " (use list_dir)" : "");
  } else if (fi.size > MCP_FILE_CAP) {
    rc = sbx_err(err, SBX_E_TOOBIG,
                 "read_file: %s is %llu bytes, over the 1 MiB limit (use exec with head, tail or grep)", path,
                 (unsigned long long)fi.size);
  } else if ((rc = sbx_sandbox_read_file(s, path, &b, err)) < 0) {
    if (rc == SBX_E_TOOBIG)
      sbx_err(err, SBX_E_TOOBIG, "read_file: %s grew over the 1 MiB limit while being read", path);
    else
      mcp_explain("read_file in", sbx_sandbox_id(s), err);
  } else {
    bool repaired;
    json_t *text = mcp_json_text(b.ptr ? b.ptr : "", b.len, &repaired);
    if (repaired || memchr(b.ptr ? b.ptr : "", 0, b.len)) {
      json_decref(text);
      rc = sbx_err(err, SBX_E_INVAL,
                   "read_file: %s is not UTF-8 text (%zu bytes); use exec with base64 or od to inspect it", path,
                   b.len);
    } else {
      *out = json_pack("{s:s,s:o,s:I}", "path", path, "content", text, "bytes", (json_int_t)b.len);
    }
  }
  sbx_buf_free(&b);
  return rc;
}

#define LIST_MAX 10000

typedef struct {
  json_t *arr;
  bool truncated;
} list_ud;

static int on_entry(void *ud, const sbx_wire_dir_entry *e) {
  list_ud *l = ud;
  if (json_array_size(l->arr) >= LIST_MAX) {
    l->truncated = true;
    return 0;
  }
  static const char *kinds[] = {"file", "dir", "symlink", "other"};
  json_t *o = json_object();
  json_object_set_new(o, "name", mcp_json_text(e->name, strlen(e->name), NULL));
  json_object_set_new(o, "type", json_string(e->kind <= SBX_FILE_OTHER ? kinds[e->kind] : "other"));
  json_object_set_new(o, "size", json_integer((json_int_t)e->size));
  json_array_append_new(l->arr, o);
  return 0;
}

int mcp_list_dir(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  int rc;
  const char *path = arg_str(a, "path");
  list_ud l = {.arr = json_array()};
  rc = sbx_sandbox_list_dir(s, path, on_entry, &l, err);
  if (rc < 0) {
    json_decref(l.arr);
    mcp_explain("list_dir in", sbx_sandbox_id(s), err);
  } else {
    *out = json_pack("{s:s,s:o,s:b}", "path", path, "entries", l.arr, "truncated", l.truncated);
  }
  return rc;
}

int mcp_release(mcp_call *c, json_t *a, json_t **out, sbx_error *err) {
  const char *id = arg_str(a, "sandbox_id");
  sbx_sandbox *s;
  bool owned;
  int rc = get_sandbox(c, a, &s, &owned, err);
  bool gone = rc == SBX_E_NOTFOUND || (rc < 0 && sbx_client_error_kind(err) == SBX_CLIENT_ERR_API && err->detail == 404);
  if (gone) {
    /* an unknown id counts as released, as sbxctl release does */
    *out = json_pack("{s:s,s:b}", "sandbox_id", id, "released", 1);
    return 0;
  }
  if (rc < 0) return rc;
  rc = sbx_sandbox_release(s, err);
  if (rc < 0) {
    mcp_explain("release", id, err);
  } else {
    mcp_registry_forget(c->reg, id);
    fprintf(stderr, "sbxctl mcp: released %s\n", id);
    *out = json_pack("{s:s,s:b}", "sandbox_id", id, "released", 1);
  }
  return rc;
}

int mcp_node_info(mcp_call *c, json_t *a, json_t **out, sbx_error *err) {
  (void)a;
  sbx_node_info info = {0};
  int rc = sbx_client_info(c->client, &info, err);
  if (rc < 0) {
    mcp_explain("node_info", NULL, err);
    return rc;
  }
  json_t *j = info.json ? json_loads(info.json, 0, NULL) : NULL;
  sbx_node_info_free(&info);
  if (!json_is_object(j)) {
    json_decref(j);
    return sbx_err(err, SBX_E_PROTO, "node_info: sandboxd answered something other than a JSON object");
  }
  *out = j;
  return 0;
}

int mcp_hibernate(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  int rc;
  rc = sbx_sandbox_hibernate(s, err);
  if (rc < 0 && sbx_client_error_kind(err) == SBX_CLIENT_ERR_API && (err->detail == 501 || err->detail == 405))
    sbx_err(err, SBX_E_UNSUPPORTED, "hibernate is not supported by this sandboxd yet; the sandbox keeps running");
  else if (rc < 0)
    mcp_explain("hibernate", sbx_sandbox_id(s), err);
  else
    *out = json_pack("{s:s,s:b}", "sandbox_id", sbx_sandbox_id(s), "hibernated", 1);
  return rc;
}

int mcp_unsupported(mcp_call *c, json_t *a, json_t **out, sbx_error *err) {
  (void)a;
  (void)out;
  return sbx_err(err, SBX_E_UNSUPPORTED,
                 "%s is not supported by this sandboxd yet (fork, checkpoints and promote are planned); nothing was "
                 "changed",
                 c->tool);
}

/* ---- git ---- */

int mcp_git_status(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  (void)c;
  sbx_wire_resp r;
  int rc = sbx_sandbox_git_status(s, arg_str(a, "path"), &r, err);
  if (rc < 0) {
    mcp_explain("git_status in", sbx_sandbox_id(s), err);
    return rc;
  }
  const sbx_resp_git_status *g = &r.u.git_status_result;
  json_t *files = json_array();
  for (size_t i = 0; i < g->files_len; i++)
    json_array_append_new(files, json_pack("{s:o,s:s,s:s}", "path",
                                           mcp_json_text(g->files[i].path, strlen(g->files[i].path), NULL), "staged",
                                           g->files[i].staged, "unstaged", g->files[i].unstaged));
  *out = json_pack("{s:o,s:I,s:I,s:o,s:b}", "branch", mcp_json_text(g->branch, strlen(g->branch), NULL), "ahead",
                   (json_int_t)g->ahead, "behind", (json_int_t)g->behind, "files", files, "truncated", g->truncated);
  sbx_wire_resp_free(&r);
  return 0;
}

/* The spec has no diff verb: `git diff` runs by exec, without a shell, with
 * every user value after `--` and no external diff or textconv program a
 * repository's config could name. */
int mcp_git_diff(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  json_t *files = json_object_get(a, "files");
  size_t nf = json_array_size(files), n = 0;
  const char **argv = sbx_calloc(nf + 16, sizeof *argv);
  argv[n++] = "git";
  argv[n++] = "--no-pager";
  argv[n++] = "-c";
  argv[n++] = "core.quotePath=false";
  argv[n++] = "-C";
  argv[n++] = arg_str(a, "path");
  argv[n++] = "diff";
  argv[n++] = "--no-ext-diff";
  argv[n++] = "--no-textconv";
  argv[n++] = "--no-color";
  if (json_is_true(json_object_get(a, "staged"))) argv[n++] = "--cached";
  argv[n++] = "--";
  for (size_t i = 0; i < nf; i++) {
    const char *f = json_string_value(json_array_get(files, i));
    if (!f) {
      sbx_free(argv);
      return sbx_err(err, SBX_E_INVAL, "git_diff: files must be strings");
    }
    argv[n++] = f;
  }
  sbx_exec_opts eo = SBX_EXEC_OPTS_INIT(.argv = argv);
  capture cp;
  capture_init(&cp, c, s);
  sbx_agent_exec_io io = {.on_output = cap_output, .on_started = cap_started, .ud = &cp, .stdin_fd = -1};
  int code = 0;
  int rc = sbx_sandbox_exec(s, &eo, &io, &code, err);
  if (rc < 0) {
    mcp_explain("git_diff in", sbx_sandbox_id(s), err);
  } else if (code != 0) {
    int n = (int)(cp.errout.len > 900 ? 900 : cp.errout.len);
    rc = sbx_err(err, SBX_E_REMOTE, "git_diff: git exited %d: %.*s", code, n, cp.errout.ptr ? cp.errout.ptr : "");
  } else {
    bool rep;
    *out = json_pack("{s:o,s:b}", "diff", mcp_json_text(cp.out.ptr ? cp.out.ptr : "", cp.out.len, &rep), "truncated",
                     cp.out_trunc);
  }
  capture_free(&cp);
  sbx_free(argv);
  return rc;
}

int mcp_git_commit(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  (void)c;
  const char *path = arg_str(a, "path"), *author = arg_str(a, "author");
  if (!author) author = "sbxctl mcp <mcp@sandbox.invalid>";
  json_t *files = json_object_get(a, "files");
  size_t nf = json_array_size(files);
  int rc = 0;
  if (json_is_true(json_object_get(a, "all")) || nf > 0) {
    const char **list = sbx_calloc(nf + 2, sizeof *list);
    for (size_t i = 0; i < nf; i++) list[i] = json_string_value(json_array_get(files, i));
    if (nf == 0) list[0] = ":/"; /* the whole work tree, from its top */
    for (size_t i = 0; i < nf; i++)
      if (!list[i]) rc = sbx_err(err, SBX_E_INVAL, "git_commit: files must be strings");
    if (rc == 0 && (rc = sbx_sandbox_git_add(s, path, list, err)) < 0)
      mcp_explain("git_commit in", sbx_sandbox_id(s), err);
    sbx_free(list);
    if (rc < 0) return rc;
  }
  char hash[80];
  rc = sbx_sandbox_git_commit(s, path, arg_str(a, "message"), author, hash, sizeof hash, err);
  if (rc < 0) mcp_explain("git_commit in", sbx_sandbox_id(s), err);
  else *out = json_pack("{s:s}", "hash", hash);
  return rc;
}
