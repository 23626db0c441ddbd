/* The sandbox handle and its agent verbs. Each verb borrows a connection
 * (conn_get), runs one RPC on it and gives it back (conn_put), which parks
 * it only if the RPC ended cleanly on its final frame. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client/client_priv.h"

int sandbox_new(sbx_client *c, const char *id, const char *token, const char *owner, sbx_sandbox **out,
                sbx_error *err) {
  int rc;
  if ((rc = sbx_client_check_header_value("sandbox id", id, id ? strlen(id) : 0, err)) < 0 ||
      (rc = sbx_client_check_header_value("sandbox token", token, token ? strlen(token) : 0, err)) < 0)
    return rc;
  for (const char *p = id; *p; p++) { /* it becomes a path segment */
    if (*p == '/' || *p == '?' || *p == '#' || *p == '%' || *p == ' ')
      return sbx_err(err, SBX_E_INVAL, "sandbox id: bad character");
  }
  sbx_addr a;
  if ((rc = sbx_addr_parse(owner, &c->entry, &a, err)) < 0) return rc;
  sbx_sandbox *s = sbx_calloc(1, sizeof *s);
  s->client = c;
  s->id = sbx_strdup(id);
  s->token = sbx_strdup(token);
  s->owner = a;
  sbx_addr_origin(&a, s->owner_origin, sizeof s->owner_origin);
  pthread_mutex_init(&s->lock, NULL);
  *out = s;
  return 0;
}

void sbx_sandbox_free(sbx_sandbox *s) {
  if (!s) return;
  conn_drop_all(s);
  pthread_mutex_destroy(&s->lock);
  sbx_free(s->id);
  sbx_free(s->token);
  sbx_free(s);
}

void sbx_sandbox_close_idle(sbx_sandbox *s) { conn_drop_all(s); }

const char *sbx_sandbox_id(const sbx_sandbox *s) { return s->id; }
const char *sbx_sandbox_token(const sbx_sandbox *s) { return s->token; }
const char *sbx_sandbox_owner(const sbx_sandbox *s) { return s->owner_origin; }
const char *sbx_sandbox_deadline(const sbx_sandbox *s) { return s->deadline; }
uint64_t sbx_sandbox_dials(const sbx_sandbox *s) { return __atomic_load_n(&s->dials, __ATOMIC_RELAXED); }

/* ---- processes ---- */
int env_to_map(const char *const *env, sbx_wire_map *map, sbx_wire_kv **kv, sbx_error *err) {
  *kv = NULL;
  memset(map, 0, sizeof *map);
  if (!env) return 0;
  size_t n = 0;
  while (env[n]) n++;
  *kv = sbx_calloc(n ? n : 1, sizeof **kv);
  for (size_t i = 0; i < n; i++) {
    const char *eq = strchr(env[i], '=');
    if (!eq || eq == env[i]) {
      sbx_free(*kv);
      *kv = NULL;
      return sbx_err(err, SBX_E_INVAL, "env %s: KEY=VALUE expected", env[i]);
    }
    /* the key is cut in place of a copy: keys live in one arena-free block */
    (*kv)[i].key = sbx_strndup(env[i], (size_t)(eq - env[i]));
    (*kv)[i].value = eq + 1;
  }
  map->items = *kv;
  map->len = n;
  map->present = true;
  return 0;
}

static void kv_free(sbx_wire_kv *kv, size_t n) {
  for (size_t i = 0; kv && i < n; i++) sbx_free((void *)kv[i].key);
  sbx_free(kv);
}

int exec_req_from_opts(const sbx_exec_opts *opts, sbx_req_exec *req, sbx_wire_kv **kv, sbx_error *err) {
  memset(req, 0, sizeof *req);
  *kv = NULL;
  sbx_exec_opts copy;
  const sbx_exec_opts *o = &copy;
  int rc = sbxi_opts_load(&copy, sizeof copy, opts, SBXI_SIZE_TO(sbx_exec_opts, session), "exec options", err);
  if (rc < 0) return rc;
  if (!opts || !o->argv || !o->argv[0] || !o->argv[0][0]) return sbx_err(err, SBX_E_INVAL, "exec: empty argv");
  size_t argc = 0;
  while (o->argv[argc]) argc++;
  req->argv.items = (const char **)o->argv;
  req->argv.len = argc;
  req->cwd = o->cwd;
  req->user = o->user;
  req->session = o->session;
  return env_to_map(o->env, &req->env, kv, err);
}

int sbx_sandbox_exec(sbx_sandbox *s, const sbx_exec_opts *opts, const sbx_agent_exec_io *io, int *exit_code,
                     sbx_error *err) {
  sbx_req_exec req;
  sbx_wire_kv *kv;
  int rc = exec_req_from_opts(opts, &req, &kv, err);
  if (rc < 0) return rc;
  sbx_agent_exec_io noio = {.stdin_fd = -1};
  sbx_agent *a;
  if ((rc = conn_get(s, &a, err)) == 0) {
    rc = sbx_agent_exec(a, &req, io ? io : &noio, exit_code, err);
    conn_put(s, a);
  }
  kv_free(kv, req.env.len);
  return rc;
}

typedef struct {
  sbx_buf *out, *errout;
  sbx_error *err;
} run_ctx;

static int run_collect(void *ud, sbx_stream st, const void *p, size_t n) {
  run_ctx *c = ud;
  sbx_buf *b = st == SBX_STREAM_STDOUT ? c->out : c->errout;
  return b ? sbx_buf_add(b, p, n, c->err) : 0;
}

int sbx_sandbox_run(sbx_sandbox *s, const sbx_exec_opts *opts, sbx_buf *out, sbx_buf *errout, int *exit_code,
                    sbx_error *err) {
  run_ctx c = {out, errout, err};
  sbx_agent_exec_io io = {.on_output = run_collect, .ud = &c, .stdin_fd = -1};
  return sbx_sandbox_exec(s, opts, &io, exit_code, err);
}

int sbx_sandbox_run_check(sbx_sandbox *s, const sbx_exec_opts *opts, sbx_buf *out, sbx_buf *errout,
                          sbx_error *err) {
  int code = 0;
  int rc = sbx_sandbox_run(s, opts, out, errout, &code, err);
  if (rc < 0) return rc;
  if (code != 0) {
    rc = sbx_err(err, SBX_E_REMOTE, "%s: exit code %d", opts->argv[0], code);
    if (err) err->detail = SBX_CLIENT_EXIT_DETAIL(code);
  }
  return rc;
}

static void note_pid(void *ud, uint32_t pid) { *(uint32_t *)ud = pid; }

int sbx_sandbox_spawn(sbx_sandbox *s, const sbx_exec_opts *opts, uint32_t *pid, sbx_error *err) {
  sbx_req_exec req;
  sbx_wire_kv *kv;
  int rc = exec_req_from_opts(opts, &req, &kv, err);
  if (rc < 0) return rc;
  if (req.session) {
    kv_free(kv, req.env.len);
    return sbx_err(err, SBX_E_INVAL, "spawn: detach is not supported with session");
  }
  req.has_detach = true;
  req.detach = true;
  uint32_t got = 0;
  sbx_agent_exec_io io = {.on_started = note_pid, .ud = &got, .stdin_fd = -1};
  sbx_agent *a;
  if ((rc = conn_get(s, &a, err)) == 0) {
    rc = sbx_agent_exec(a, &req, &io, NULL, err);
    conn_put(s, a);
  }
  kv_free(kv, req.env.len);
  if (rc == 0 && pid) *pid = got;
  return rc;
}

#define ONE_RPC(s, err, call)                        \
  do {                                               \
    sbx_agent *a_;                                   \
    int rc_ = conn_get((s), &a_, (err));             \
    if (rc_ < 0) return rc_;                         \
    sbx_agent *a = a_;                               \
    rc_ = (call);                                    \
    conn_put((s), a_);                               \
    return rc_;                                      \
  } while (0)

int sbx_sandbox_ps(sbx_sandbox *s, sbx_wire_resp *out, sbx_error *err) { ONE_RPC(s, err, sbx_agent_ps(a, out, err)); }

int sbx_sandbox_kill(sbx_sandbox *s, uint32_t pid, int signal, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_kill(a, pid, signal ? signal : 9, err));
}

int sbx_sandbox_logs(sbx_sandbox *s, uint32_t pid, const sbx_agent_exec_io *io, int *exit_code, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_logs(a, pid, io, exit_code, err));
}

int sbx_sandbox_attach(sbx_sandbox *s, uint32_t pid, const sbx_agent_exec_io *io, int *exit_code,
                       sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_attach(a, pid, io, exit_code, err));
}

int sbx_sandbox_session_create(sbx_sandbox *s, const char *id, const char *cwd, const char *const *env,
                               char *out_id, size_t out_len, sbx_error *err) {
  sbx_req_session_create req = {.id = id, .cwd = cwd};
  sbx_wire_kv *kv;
  int rc = env_to_map(env, &req.env, &kv, err);
  if (rc < 0) return rc;
  sbx_agent *a;
  if ((rc = conn_get(s, &a, err)) == 0) {
    rc = sbx_agent_session_create(a, &req, out_id, out_len, err);
    conn_put(s, a);
  }
  kv_free(kv, req.env.len);
  return rc;
}

int sbx_sandbox_session_list(sbx_sandbox *s, sbx_wire_resp *out, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_session_list(a, out, err));
}

int sbx_sandbox_session_rm(sbx_sandbox *s, const char *id, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_session_rm(a, id, err));
}

/* ---- files ---- */
int sbx_sandbox_read_file(sbx_sandbox *s, const char *path, sbx_buf *out, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_read_file(a, path, out, err));
}

int sbx_sandbox_write_file(sbx_sandbox *s, const char *path, const void *data, size_t n, int mode,
                           sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_write_file(a, path, data, n, mode, err));
}

int sbx_sandbox_list_dir(sbx_sandbox *s, const char *path,
                         int (*on_entry)(void *ud, const sbx_wire_dir_entry *e), void *ud, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_list_dir(a, path, on_entry, ud, err));
}

int sbx_sandbox_stat(sbx_sandbox *s, const char *path, sbx_wire_file_info *out, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_stat(a, path, out, err));
}

int sbx_sandbox_mkdir(sbx_sandbox *s, const char *path, bool parents, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_mkdir(a, path, parents, err));
}

int sbx_sandbox_remove(sbx_sandbox *s, const char *path, bool recursive, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_remove(a, path, recursive, err));
}

int sbx_sandbox_rename(sbx_sandbox *s, const char *from, const char *to, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_rename(a, from, to, err));
}

int sbx_sandbox_find(sbx_sandbox *s, const sbx_find_opts *opts, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_find(a, opts, err));
}

int sbx_sandbox_replace(sbx_sandbox *s, const sbx_replace_opts *opts, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_replace(a, opts, err));
}

/* A watch that ended normally was cancelled by leaving its stream unread:
 * the agent is unusable then, and conn_put closes it instead of parking. */
int sbx_sandbox_watch(sbx_sandbox *s, const sbx_watch_opts *opts, sbx_error *err) {
  ONE_RPC(s, err, sbx_agent_watch(a, opts, err));
}
