/* git.c - the git verbs (§5.11): the guest's git runs as a child of the
 * event loop (a clone may take minutes and must not stall other
 * connections), with stdout and stderr captured, one or two commands per
 * verb. Arguments are hardened as §8.4 says; the auth token travels only in
 * the child's environment (GIT_CONFIG_*), never in argv or on disk.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "silkd.h"

#define GIT_MSG_CAP (16 * 1024)          /* error messages (§6, this implementation) */
#define GIT_OUT_CAP SBX_WIRE_FRAME_CAP   /* stdout kept for branch lists and messages */
#define GIT_STATUS_BUDGET 1048576u       /* path bytes + 40 per entry (§5.11) */
#define GIT_LINE_CAP (1024 * 1024)       /* a status line longer than this is skipped */

struct git_job;
/* What runs once a command has finished (pipes at EOF, child reaped). */
typedef void (*git_next)(struct git_job *j, int code);

struct git_job {
  struct conn *c; /* NULL once the connection is gone: the reply is dropped (§4) */
  char *path;
  char **envp;
  const char *label;
  git_next next;
  pid_t pid;
  bool reaped;
  int status;
  int fd[2]; /* stdout, stderr; -1 at EOF */
  struct event *ev[2];
  struct evbuffer *out; /* stdout, up to GIT_OUT_CAP (status: the partial line) */
  char err[GIT_MSG_CAP];
  size_t errlen;
  /* git_status */
  bool status_mode, skip_line;
  char *branch;
  uint32_t ahead, behind;
  sbx_wire_git_file *files;
  size_t nfiles, cap, budget;
  bool truncated;
  /* git_branch list */
  char **branches;
  size_t nbranches;
};

static void job_free(struct git_job *j) {
  for (int i = 0; i < 2; i++) {
    if (j->ev[i]) event_free(j->ev[i]);
    if (j->fd[i] >= 0) close(j->fd[i]);
  }
  if (j->out) evbuffer_free(j->out);
  envp_free(j->envp);
  for (size_t i = 0; i < j->nfiles; i++) sbx_free((void *)j->files[i].path);
  sbx_free(j->files);
  for (size_t i = 0; i < j->nbranches; i++) sbx_free(j->branches[i]);
  sbx_free(j->branches);
  sbx_free(j->branch);
  sbx_free(j->path);
  sbx_free(j);
}

/* The RPC's end: the connection serves its next request. */
static void job_end(struct git_job *j) {
  struct conn *c = j->c;
  job_free(j);
  if (c) conn_rpc_done(c);
}

static void job_abort(void *rpc) {
  struct git_job *j = rpc;
  struct conn *c = j->c;
  j->c = NULL; /* git runs to completion, its reply is lost (§4) */
  conn_rpc_done(c);
}

static const struct rpc_ops git_ops = {.mode = SBX_INPUT_NONE, .abort = job_abort};

static void send_error(struct conn *c, sbx_wire_error_kind kind, const char *msg) {
  if (!c) return;
  sbx_wire_resp r = {.type = SBX_RESP_ERROR, .u.error = {kind, msg}};
  conn_send_resp(c, &r);
}

static char *trim(char *s, size_t n) {
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == '\t')) n--;
  s[n] = 0;
  while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t') s++;
  return s;
}

/* stdout as a C string (the buffer is made contiguous and NUL-ended). */
static char *out_str(struct git_job *j, size_t *n) {
  *n = evbuffer_get_length(j->out);
  evbuffer_add(j->out, "", 1);
  return (char *)evbuffer_pullup(j->out, -1);
}

/* error{internal, "git <label>: <stderr, or stdout when stderr is empty>"} */
static void send_git_failure(struct git_job *j) {
  char *detail = trim(j->err, j->errlen);
  if (!*detail && !j->status_mode) {
    size_t n;
    char *o = out_str(j, &n);
    detail = trim(o, n);
  }
  char msg[GIT_MSG_CAP];
  /* git's own text is cut to the message cap (§6): the start says what failed */
  if (snprintf(msg, sizeof msg, "git %s: %s", j->label, detail) >= (int)sizeof msg) msg[sizeof msg - 1] = '\0';
  send_error(j->c, SBX_ERR_INTERNAL, msg);
}

/* ---- git status --porcelain=v2 --branch ---- */

/* The text after the (k-1)th space, or NULL. */
static char *field(char *l, int k) {
  for (int i = 1; i < k; i++) {
    l = strchr(l, ' ');
    if (!l) return NULL;
    l++;
  }
  return l;
}

static void status_add(struct git_job *j, const char *path, size_t plen, char x, char y) {
  if (j->truncated) return;
  j->budget += plen + 40;
  if (j->budget > GIT_STATUS_BUDGET) {
    j->truncated = true;
    return;
  }
  if (j->nfiles == j->cap) {
    j->cap = j->cap ? j->cap * 2 : 64;
    j->files = sbx_reallocarray(j->files, j->cap, sizeof *j->files);
  }
  /* one-character strings for X and Y, whatever byte git printed */
  static char one[256][2];
  sbx_wire_git_file *f = &j->files[j->nfiles++];
  f->path = sbx_strndup(path, plen);
  one[(unsigned char)x][0] = x;
  one[(unsigned char)y][0] = y;
  f->staged = one[(unsigned char)x];
  f->unstaged = one[(unsigned char)y];
}

static void status_line(struct git_job *j, char *l, size_t n) {
  l[n] = 0;
  if (strncmp(l, "# branch.head ", 14) == 0) {
    sbx_free(j->branch);
    j->branch = sbx_strdup(l + 14);
  } else if (strncmp(l, "# branch.ab ", 12) == 0) {
    unsigned long a = 0, b = 0;
    if (sscanf(l + 12, "+%lu -%lu", &a, &b) == 2) {
      j->ahead = a > UINT32_MAX ? UINT32_MAX : (uint32_t)a;
      j->behind = b > UINT32_MAX ? UINT32_MAX : (uint32_t)b;
    }
  } else if (n > 4 && (l[0] == '1' || l[0] == '2' || l[0] == 'u') && l[1] == ' ') {
    char *p = field(l, l[0] == '1' ? 9 : l[0] == '2' ? 10 : 11);
    if (!p) return;
    size_t plen = l[0] == '2' ? strcspn(p, "\t") : strlen(p);
    status_add(j, p, plen, l[2], l[3]);
  } else if (n > 2 && l[0] == '?' && l[1] == ' ') {
    status_add(j, l + 2, n - 2, '?', '?');
  }
}

/* Feed the complete lines buffered so far; at EOF the rest too. */
static void status_lines(struct git_job *j, bool eof) {
  for (;;) {
    struct evbuffer_ptr p = evbuffer_search_eol(j->out, NULL, NULL, EVBUFFER_EOL_LF);
    if (p.pos < 0) break;
    size_t n = (size_t)p.pos;
    char *l = (char *)evbuffer_pullup(j->out, (ev_ssize_t)n + 1);
    if (!j->skip_line) status_line(j, l, n);
    j->skip_line = false;
    evbuffer_drain(j->out, n + 1);
  }
  size_t rest = evbuffer_get_length(j->out);
  if (rest > GIT_LINE_CAP) { /* no path is this long: drop it to its end */
    evbuffer_drain(j->out, rest);
    j->skip_line = true;
  } else if (eof && rest > 0) {
    char *l = (char *)evbuffer_pullup(j->out, -1);
    char *copy = sbx_strndup(l, rest);
    if (!j->skip_line) status_line(j, copy, rest);
    sbx_free(copy);
    evbuffer_drain(j->out, rest);
  }
}

/* ---- running one command ---- */

static void job_check(struct git_job *j) {
  if (j->fd[0] >= 0 || j->fd[1] >= 0 || !j->reaped) return;
  j->next(j, child_exit_code(j->status));
}

static void on_output(evutil_socket_t fd, short what, void *arg) {
  struct git_job *j = arg;
  int i = fd == j->fd[0] ? 0 : 1;
  char buf[65536];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n > 0) {
    if (i == 1) {
      size_t k = (size_t)n < sizeof j->err - 1 - j->errlen ? (size_t)n : sizeof j->err - 1 - j->errlen;
      memcpy(j->err + j->errlen, buf, k);
      j->errlen += k;
    } else if (j->status_mode) {
      evbuffer_add(j->out, buf, (size_t)n);
      status_lines(j, false);
    } else if (evbuffer_get_length(j->out) + (size_t)n <= GIT_OUT_CAP) {
      evbuffer_add(j->out, buf, (size_t)n);
    }
    return;
  }
  /* EOF or a read error: this pipe is done */
  if (i == 0 && j->status_mode) status_lines(j, true);
  event_free(j->ev[i]);
  j->ev[i] = NULL;
  close(j->fd[i]);
  j->fd[i] = -1;
  job_check(j);
}

static void on_exit_cb(void *arg, pid_t pid, int status) {
  struct git_job *j = arg;
  j->reaped = true;
  j->status = status;
  job_check(j);
}

/* Start `git -C <path> <args...>`; on failure the error is sent and the
 * job ended. */
static void job_run(struct git_job *j, const char *label, git_next next, const char *const *args) {
  size_t k = 0;
  while (args[k]) k++;
  const char **argv = sbx_calloc(k + 4, sizeof *argv);
  argv[0] = "git";
  argv[1] = "-C";
  argv[2] = j->path;
  memcpy(argv + 3, args, k * sizeof *argv);
  j->label = label;
  j->next = next;
  j->reaped = false;
  j->errlen = 0;
  evbuffer_drain(j->out, evbuffer_get_length(j->out));
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct spawn_opts o = {.argv = argv, .envp = j->envp, .new_pgrp = true};
  pid_t pid;
  sbx_error se = {0};
  int rc = -1;
  if (nul >= 0 && pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0) {
    o.fd0 = nul;
    o.fd1 = out[1];
    o.fd2 = err[1];
    rc = spawn_child(&o, &pid, &se);
  } else {
    se.os_errno = errno;
  }
  sbx_free(argv);
  if (nul >= 0) close(nul);
  if (out[1] >= 0) close(out[1]);
  if (err[1] >= 0) close(err[1]);
  if (rc < 0) {
    if (out[0] >= 0) close(out[0]);
    if (err[0] >= 0) close(err[0]);
    char msg[512];
    snprintf(msg, sizeof msg, "spawn git: %s (os error %d)", strerror(se.os_errno), se.os_errno);
    send_error(j->c, SBX_ERR_INTERNAL, msg);
    job_end(j);
    return;
  }
  j->pid = pid;
  j->fd[0] = out[0];
  j->fd[1] = err[0];
  for (int i = 0; i < 2; i++) {
    set_nonblock(j->fd[i]);
    j->ev[i] = event_new(silkd.base, j->fd[i], EV_READ | EV_PERSIST, on_output, j);
    event_add(j->ev[i], NULL);
  }
  child_watch(pid, on_exit_cb, j);
}

/* ---- the verbs' last steps ---- */

static void finish_done(struct git_job *j, int code) {
  if (code != 0) send_git_failure(j);
  else if (j->c) conn_send_simple(j->c, SBX_RESP_DONE);
  job_end(j);
}

static void finish_status(struct git_job *j, int code) {
  if (code != 0) {
    send_git_failure(j);
  } else if (j->c) {
    sbx_wire_resp r = {.type = SBX_RESP_GIT_STATUS_RESULT};
    r.u.git_status_result.branch = j->branch ? j->branch : "";
    r.u.git_status_result.ahead = j->ahead;
    r.u.git_status_result.behind = j->behind;
    r.u.git_status_result.files = j->files;
    r.u.git_status_result.files_len = j->nfiles;
    r.u.git_status_result.truncated = j->truncated;
    conn_send_resp(j->c, &r);
  }
  job_end(j);
}

static void finish_commit_hash(struct git_job *j, int code) {
  if (code != 0) {
    send_git_failure(j);
  } else if (j->c) {
    size_t n;
    char *o = out_str(j, &n);
    sbx_wire_resp r = {.type = SBX_RESP_GIT_COMMIT_RESULT};
    r.u.git_commit_result.hash = trim(o, n);
    conn_send_resp(j->c, &r);
  }
  job_end(j);
}

static void after_commit(struct git_job *j, int code) {
  if (code != 0) {
    send_git_failure(j);
    job_end(j);
    return;
  }
  static const char *const args[] = {"rev-parse", "HEAD", NULL};
  job_run(j, "rev-parse", finish_commit_hash, args);
}

static void finish_branches(struct git_job *j, int code) {
  size_t n;
  char *cur = out_str(j, &n);
  sbx_wire_resp r = {.type = SBX_RESP_GIT_BRANCHES};
  /* "" when HEAD is unborn (rev-parse fails) */
  r.u.git_branches.current = code == 0 ? trim(cur, n) : "";
  r.u.git_branches.branches.items = (const char **)j->branches;
  r.u.git_branches.branches.len = j->nbranches;
  if (j->c) conn_send_resp(j->c, &r);
  job_end(j);
}

static void after_branch_list(struct git_job *j, int code) {
  if (code != 0) {
    send_git_failure(j);
    job_end(j);
    return;
  }
  size_t n;
  char *s = out_str(j, &n);
  for (char *line = s; line < s + n;) {
    char *nl = memchr(line, '\n', (size_t)(s + n - line));
    size_t len = nl ? (size_t)(nl - line) : strlen(line);
    if (len > 0) {
      j->branches = sbx_reallocarray(j->branches, j->nbranches + 1, sizeof *j->branches);
      j->branches[j->nbranches++] = sbx_strndup(line, len);
    }
    line += len + 1;
  }
  static const char *const args[] = {"rev-parse", "--abbrev-ref", "HEAD", NULL};
  job_run(j, "branch", finish_branches, args);
}

/* ---- validation and the environment ---- */

static bool refuse(struct conn *c, const char *field_name, const char *v) {
  if (v && v[0] == '-') {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "invalid argument: %s may not start with '-'", field_name);
    return true;
  }
  return false;
}

/* Transports that run programs (ext::) or talk to inherited descriptors
 * (fd::) are refused outright, and forbidden to git too (protocol.*.allow
 * below) so a repository's configured remote cannot name them either. */
static bool refuse_url(struct conn *c, const char *url) {
  static const char *const bad[] = {"ext::", "fd::"};
  for (size_t i = 0; i < 2; i++) {
    if (strncasecmp(url, bad[i], strlen(bad[i])) == 0) {
      conn_send_error(c, SBX_ERR_BAD_REQUEST, "invalid argument: url transport %.*s is refused",
                      (int)strlen(bad[i]) - 2, bad[i]);
      return true;
    }
  }
  return false;
}

/* §7.2 plus GIT_CONFIG_*: index 0 core.quotePath=false, index 1 the
 * bearer header when auth is given, then the hardening entries. */
static char **git_env(const char *auth) {
  char **e = env_inherit();
  const char *kv[5][2];
  size_t n = 0;
  char header[8192];
  kv[n][0] = "core.quotePath", kv[n++][1] = "false";
  if (auth) {
    snprintf(header, sizeof header, "Authorization: Bearer %s", auth);
    kv[n][0] = "http.extraHeader", kv[n++][1] = header;
  }
  kv[n][0] = "protocol.ext.allow", kv[n++][1] = "never";
  kv[n][0] = "protocol.fd.allow", kv[n++][1] = "never";
  char key[64], num[16];
  for (size_t i = 0; i < n; i++) {
    snprintf(key, sizeof key, "GIT_CONFIG_KEY_%zu", i);
    e = envp_set(e, key, kv[i][0]);
    snprintf(key, sizeof key, "GIT_CONFIG_VALUE_%zu", i);
    e = envp_set(e, key, kv[i][1]);
  }
  snprintf(num, sizeof num, "%zu", n);
  e = envp_set(e, "GIT_CONFIG_COUNT", num);
  /* stdin is /dev/null, but git would still ask for credentials on the
   * controlling terminal: fail instead of hanging the verb. */
  e = envp_set(e, "GIT_TERMINAL_PROMPT", "0");
  explicit_bzero(header, sizeof header);
  return e;
}

/* "Name <email>" -> name before the first '<' (trimmed), email up to the
 * next '>'; without the pair, the whole string and "". */
static void split_author(const char *author, char *name, size_t nlen, char *email, size_t elen) {
  const char *lt = strchr(author, '<');
  const char *gt = lt ? strchr(lt + 1, '>') : NULL;
  char tmp[4096];
  if (lt && gt) {
    snprintf(tmp, sizeof tmp, "%.*s", (int)(lt - author), author);
    snprintf(email, elen, "%.*s", (int)(gt - lt - 1), lt + 1);
  } else {
    snprintf(tmp, sizeof tmp, "%s", author);
    snprintf(email, elen, "%s", "");
  }
  snprintf(name, nlen, "%s", trim(tmp, strlen(tmp)));
}

static struct git_job *job_new(struct conn *c, const char *path, const char *auth) {
  struct git_job *j = sbx_calloc(1, sizeof *j);
  j->c = c;
  j->path = sbx_strdup(path);
  j->envp = git_env(auth);
  j->fd[0] = j->fd[1] = -1;
  j->out = evbuffer_new();
  return j;
}

void verb_git(struct conn *c, sbx_wire_req *req) {
  size_t nfiles = req->op == SBX_OP_GIT_ADD ? req->u.git_add.files.len : 0;
  const char **args = sbx_calloc(nfiles + 12, sizeof *args);
  size_t n = 0;
  const char *path = NULL, *auth = NULL, *label = NULL;
  git_next next = finish_done;
  char branch_arg[4200], depth_arg[32], author_arg[4200], name[4096], email[4096];
  char *message_arg = NULL;
  bool network = false, status = false;
  switch (req->op) {
  case SBX_OP_GIT_CLONE: {
    sbx_req_git_clone *g = &req->u.git_clone;
    if (refuse(c, "branch", g->branch) || refuse_url(c, g->url)) goto out;
    path = "."; /* the daemon's working directory, as the reference */
    auth = g->auth;
    label = "clone";
    network = true;
    args[n++] = "clone";
    if (g->branch) {
      snprintf(branch_arg, sizeof branch_arg, "--branch=%s", g->branch);
      args[n++] = branch_arg;
    }
    if (g->has_depth) {
      snprintf(depth_arg, sizeof depth_arg, "--depth=%u", g->depth);
      args[n++] = depth_arg;
    }
    args[n++] = "--";
    args[n++] = g->url;
    args[n++] = g->path;
    break;
  }
  case SBX_OP_GIT_STATUS:
    path = req->u.git_status.path;
    label = "status";
    status = true;
    next = finish_status;
    args[n++] = "status";
    args[n++] = "--porcelain=v2";
    args[n++] = "--branch";
    break;
  case SBX_OP_GIT_ADD:
    path = req->u.git_add.path;
    label = "add";
    args[n++] = "add";
    args[n++] = "--";
    memcpy(args + n, req->u.git_add.files.items, nfiles * sizeof *args);
    n += nfiles;
    break;
  case SBX_OP_GIT_COMMIT: {
    sbx_req_git_commit *g = &req->u.git_commit;
    path = g->path;
    label = "commit";
    next = after_commit;
    split_author(g->author, name, sizeof name, email, sizeof email);
    snprintf(author_arg, sizeof author_arg, "--author=%s", g->author);
    message_arg = sbx_malloc(strlen(g->message) + 11);
    sprintf(message_arg, "--message=%s", g->message);
    args[n++] = "commit";
    args[n++] = author_arg;
    args[n++] = message_arg;
    break;
  }
  case SBX_OP_GIT_PUSH:
  case SBX_OP_GIT_PULL:
    path = req->u.git_push.path;
    auth = req->u.git_push.auth;
    label = req->op == SBX_OP_GIT_PUSH ? "push" : "pull";
    network = true;
    args[n++] = label;
    break;
  case SBX_OP_GIT_BRANCH: {
    sbx_req_git_branch *g = &req->u.git_branch;
    if (g->action != SBX_GIT_BRANCH_LIST && !g->name) {
      conn_send_error(c, SBX_ERR_BAD_REQUEST, "branch op needs a name");
      goto out;
    }
    if (refuse(c, "name", g->name)) goto out;
    path = g->path;
    label = "branch";
    if (g->action == SBX_GIT_BRANCH_LIST) {
      next = after_branch_list;
      args[n++] = "branch";
      args[n++] = "--format=%(refname:short)";
    } else if (g->action == SBX_GIT_BRANCH_CHECKOUT) {
      /* `--` after the name: a name is never taken for a path to restore */
      args[n++] = "checkout";
      args[n++] = g->name;
      args[n++] = "--";
    } else {
      args[n++] = "branch";
      if (g->action == SBX_GIT_BRANCH_DELETE) args[n++] = "-D";
      args[n++] = g->name;
    }
    break;
  }
  default:
    conn_send_error(c, SBX_ERR_INTERNAL, "not a git verb");
    goto out;
  }
  if (network && !net_has_nic()) {
    conn_send_error(c, SBX_ERR_UNIMPLEMENTED, "no network on this sandbox; use fs.push to move a repository in");
    goto out;
  }
  struct git_job *j = job_new(c, path, auth);
  j->status_mode = status;
  if (req->op == SBX_OP_GIT_COMMIT) {
    j->envp = envp_set(j->envp, "GIT_COMMITTER_NAME", name);
    j->envp = envp_set(j->envp, "GIT_COMMITTER_EMAIL", email);
  }
  conn_rpc_begin(c, &git_ops, j);
  job_run(j, label, next, args);
out:
  sbx_free(message_arg);
  sbx_free(args);
}
