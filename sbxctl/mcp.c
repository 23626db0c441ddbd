/* sbxctl mcp: the stdio server. The main thread reads stdin, answers the
 * protocol methods itself and hands each tools/call to a thread of its own
 * (agents issue calls in parallel, and a long exec must not stall ping).
 * The main thread also enforces the per-call cap and, on stdin EOF or a
 * signal, releases every sandbox this server created before exiting.
 *
 * stdout carries JSON-RPC only: fd 1 is pointed at stderr at start, and
 * messages go to a private copy of the original stdout, so nothing the
 * libraries might print can corrupt the stream. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <sandbox/sandbox.h>

#include "mcp.h"
#include "remote.h"

#define PROTO_LATEST "2025-06-18"
#define PROTO_PREVIOUS "2025-03-26"
#define PROTO_OLDEST "2024-11-05"
#define MAX_INFLIGHT 32
#define SHUTDOWN_WAIT_MS 60000 /* for calls still running after the release */

typedef struct mcp_job {
  struct mcp_job *next;
  mcp_call call;
  json_t *id;
  json_t *args;
  const mcp_tool *tool;
  int64_t deadline_ms;
  bool answered; /* a response went out (the result, or the cap's error) */
} mcp_job;

struct mcp_server {
  sbx_client *client;
  mcp_registry reg;
  const char *token, *template_;
  int out_fd;
  bool out_broken;
  pthread_mutex_t out_lock;
  pthread_mutex_t lock; /* jobs, active */
  pthread_cond_t idle;
  mcp_job *jobs;
  int active;
  int64_t call_cap_ms; /* MCP_CALL_CAP_MS; tests shorten it */
  int lifecycle;       /* the node runs the lifecycle verbs: -1 not asked yet, 0, 1 */
};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- output ---- */

/* One message, one line. Consumes msg. */
static void send_msg(mcp_server *srv, json_t *msg) {
  char *text = json_dumps(msg, JSON_COMPACT);
  json_decref(msg);
  if (!text) return;
  size_t n = strlen(text);
  text[n] = '\n'; /* replace the NUL: written as n + 1 bytes below */
  pthread_mutex_lock(&srv->out_lock);
  const char *p = text;
  size_t left = n + 1;
  while (left > 0 && !srv->out_broken) {
    ssize_t w = write(srv->out_fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      /* the client closed its end: nobody reads answers any more */
      fprintf(stderr, "sbxctl mcp: stdout: %s\n", strerror(errno));
      srv->out_broken = true;
      break;
    }
    p += w;
    left -= (size_t)w;
  }
  pthread_mutex_unlock(&srv->out_lock);
  free(text); /* jansson's allocator */
}

static void send_result(mcp_server *srv, json_t *id, json_t *result) {
  send_msg(srv, json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result", result));
}

static void send_error(mcp_server *srv, json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void send_error(mcp_server *srv, json_t *id, int code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  send_msg(srv, mcp_rpc_error(id, code, "%s", msg));
}

/* A tool result: the object as text for clients that read content, and as
 * structuredContent for those that read structure. */
static json_t *tool_ok(json_t *obj) {
  char *text = json_dumps(obj, JSON_COMPACT);
  json_t *r = json_pack("{s:[{s:s,s:s}],s:o,s:b}", "content", "type", "text", "text", text ? text : "{}",
                        "structuredContent", obj, "isError", 0);
  free(text);
  return r;
}

static json_t *tool_error(const char *msg) {
  return json_pack("{s:[{s:s,s:o}],s:b}", "content", "type", "text", "text", mcp_json_text(msg, strlen(msg), NULL),
                   "isError", 1);
}

/* ---- tool calls ---- */

bool mcp_call_running(mcp_call *c, sbx_sandbox *s, uint32_t pid) {
  pthread_mutex_lock(&c->lock);
  bool late = c->timed_out && s;
  c->running_s = late ? NULL : s;
  c->running_pid = late ? 0 : pid;
  pthread_mutex_unlock(&c->lock);
  if (late) {
    sbx_error err;
    sbx_sandbox_kill(s, pid, 9, &err); /* started after the cap expired */
  }
  return !late;
}

static void job_free(mcp_job *j) {
  /* check_deadlines may still hold the call's lock (it found the job just
   * before it left the list): wait for it */
  pthread_mutex_lock(&j->call.lock);
  pthread_mutex_unlock(&j->call.lock);
  json_decref(j->id);
  json_decref(j->args);
  pthread_mutex_destroy(&j->call.lock);
  sbx_free(j);
}

static void *job_thread(void *arg) {
  mcp_job *j = arg;
  mcp_server *srv = j->call.srv;
  json_t *out = NULL;
  sbx_error err;
  sbx_err_clear(&err);
  int rc = j->tool->fn ? j->tool->fn(&j->call, j->args, &out, &err)
                       : mcp_with_sandbox(&j->call, j->args, j->tool->on_sandbox, &out, &err);
  json_t *result;
  if (rc < 0) {
    fprintf(stderr, "sbxctl mcp: %s: %s\n", j->tool->name, err.msg);
    result = tool_error(err.msg[0] ? err.msg : "the call failed");
    json_decref(out);
  } else {
    result = tool_ok(out ? out : json_object());
  }
  pthread_mutex_lock(&srv->lock);
  if (!j->answered) {
    j->answered = true;
    send_result(srv, j->id, result);
  } else {
    json_decref(result);
  }
  for (mcp_job **pp = &srv->jobs; *pp; pp = &(*pp)->next)
    if (*pp == j) {
      *pp = j->next;
      break;
    }
  srv->active--;
  pthread_cond_broadcast(&srv->idle);
  pthread_mutex_unlock(&srv->lock);
  job_free(j);
  return NULL;
}

/* Answer calls past their cap, and kill the exec behind them. */
static void check_deadlines(mcp_server *srv) {
  int64_t now = now_ms();
  for (;;) {
    mcp_job *hit = NULL;
    pthread_mutex_lock(&srv->lock);
    for (mcp_job *j = srv->jobs; j && !hit; j = j->next) {
      if (j->answered || now < j->deadline_ms) continue;
      hit = j;
      j->answered = true;
      char msg[256];
      snprintf(msg, sizeof msg,
               "%s timed out after %d s (the per-call limit; a command it ran was killed). Split the work, or "
               "use spawn and logs for long jobs",
               j->tool->name, (int)((srv->call_cap_ms + 999) / 1000));
      send_result(srv, j->id, tool_error(msg));
      /* taken before srv->lock is dropped and held through the kill: the
       * verb clears running_s under it before freeing the handle, and the
       * job is freed only after that, so both stay valid here */
      pthread_mutex_lock(&j->call.lock);
      j->call.timed_out = true;
    }
    pthread_mutex_unlock(&srv->lock);
    if (!hit) return;
    if (hit->call.running_s && hit->call.running_pid) {
      sbx_error err;
      if (sbx_sandbox_kill(hit->call.running_s, hit->call.running_pid, 9, &err) < 0)
        fprintf(stderr, "sbxctl mcp: kill after the cap: %s\n", err.msg);
    }
    pthread_mutex_unlock(&hit->call.lock);
  }
}

static void tools_call(mcp_server *srv, json_t *id, json_t *params) {
  const char *name = json_string_value(json_object_get(params, "name"));
  if (!name) {
    send_error(srv, id, MCP_RPC_PARAMS, "Invalid params: tools/call needs a string \"name\"");
    return;
  }
  const mcp_tool *t = mcp_tool_find(name);
  if (!t) {
    send_error(srv, id, MCP_RPC_PARAMS, "Unknown tool: %s (tools/list names the tools)", name);
    return;
  }
  json_t *args = json_object_get(params, "arguments");
  if (args && json_is_null(args)) args = NULL;
  if (args && !json_is_object(args)) {
    send_error(srv, id, MCP_RPC_PARAMS, "Invalid params: \"arguments\" must be an object");
    return;
  }
  args = args ? json_incref(args) : json_object();
  sbx_error err;
  /* a wrong argument is the agent's to fix: a tool error it can read */
  if (mcp_tool_check_args(t, args, &err) < 0) {
    char msg[sizeof err.msg + 64];
    snprintf(msg, sizeof msg, "%s: %s", name, err.msg);
    send_result(srv, id, tool_error(msg));
    json_decref(args);
    return;
  }
  pthread_mutex_lock(&srv->lock);
  bool full = srv->active >= MAX_INFLIGHT;
  pthread_mutex_unlock(&srv->lock);
  if (full) {
    send_result(srv, id, tool_error("too many tool calls in flight (32); wait for some to finish"));
    json_decref(args);
    return;
  }
  mcp_job *j = sbx_calloc(1, sizeof *j);
  j->id = json_incref(id);
  j->args = args;
  j->tool = t;
  j->deadline_ms = now_ms() + srv->call_cap_ms;
  j->call = (mcp_call){.srv = srv, .client = srv->client, .reg = &srv->reg, .default_template = srv->template_,
                       .token = srv->token, .tool = t->name};
  pthread_mutex_init(&j->call.lock, NULL);
  pthread_mutex_lock(&srv->lock);
  j->next = srv->jobs;
  srv->jobs = j;
  srv->active++;
  pthread_mutex_unlock(&srv->lock);
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&th, &attr, job_thread, j);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    pthread_mutex_lock(&srv->lock);
    srv->jobs = j->next; /* still first: only this thread adds */
    srv->active--;
    pthread_mutex_unlock(&srv->lock);
    send_result(srv, id, tool_error("could not start a thread for the call; try again"));
    job_free(j);
  }
}

/* ---- protocol methods ---- */

static void initialize(mcp_server *srv, json_t *id, json_t *params) {
  const char *want = json_string_value(json_object_get(params, "protocolVersion"));
  if (!want) {
    send_error(srv, id, MCP_RPC_PARAMS, "Invalid params: initialize needs a string \"protocolVersion\"");
    return;
  }
  /* the spec's negotiation: the client's version when we speak it, else
   * our latest (the client then decides whether to go on) */
  static const char *const known[] = {PROTO_LATEST, PROTO_PREVIOUS, PROTO_OLDEST};
  const char *ver = PROTO_LATEST;
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(want, known[i]) == 0) ver = known[i];
  json_t *ci = json_object_get(params, "clientInfo");
  fprintf(stderr, "sbxctl mcp: initialize from %s %s, protocol %s (asked %s)\n",
          json_string_value(json_object_get(ci, "name")) ?: "?",
          json_string_value(json_object_get(ci, "version")) ?: "?", ver, want);
  send_result(srv, id,
              json_pack("{s:s,s:{s:{s:b}},s:{s:s,s:s,s:s},s:s}", "protocolVersion", ver, "capabilities", "tools",
                        "listChanged", 0, "serverInfo", "name", "sbxctl", "title", "sandbox (sbxctl mcp)", "version",
                        sbx_version(), "instructions",
                        "Call create_sandbox first; pass its sandbox_id to exec, write_file, read_file and the "
                        "other tools; release it when done. Sandboxes still held are released when this "
                        "server exits."));
}

/* Whether the node runs the lifecycle verbs: asked once, from /v1/info
 * (the operator token); a node that does not say (older, or a tenant
 * token) is assumed to. */
static bool node_lifecycle(mcp_server *srv) {
  if (srv->lifecycle < 0) {
    sbx_node_info ni = {0};
    sbx_error err;
    srv->lifecycle = 1;
    if (srv->client && sbx_client_info(srv->client, &ni, &err) == 0 && ni.json) {
      json_t *j = json_loads(ni.json, 0, NULL);
      if (json_is_false(json_object_get(j, "lifecycle"))) srv->lifecycle = 0;
      json_decref(j);
    }
    sbx_node_info_free(&ni);
  }
  return srv->lifecycle != 0;
}

static void handle_message(mcp_server *srv, const char *line, size_t len) {
  mcp_rpc_msg m;
  mcp_rpc_read(line, len, &m);
  if (m.reply) {
    send_msg(srv, json_incref(m.reply));
  } else if (m.method && m.id) {
    json_t *id = m.id, *params = m.params;
    const char *method = m.method;
    if (strcmp(method, "initialize") == 0) {
      initialize(srv, id, params);
    } else if (strcmp(method, "ping") == 0) {
      send_result(srv, id, json_object());
    } else if (strcmp(method, "tools/list") == 0) {
      json_t *tools = mcp_tools_list_for(node_lifecycle(srv));
      if (tools) send_result(srv, id, json_pack("{s:o}", "tools", tools));
      else send_error(srv, id, -32603, "Internal error: a tool schema is broken");
    } else if (strcmp(method, "tools/call") == 0) {
      tools_call(srv, id, params);
    } else {
      send_error(srv, id, MCP_RPC_METHOD, "Method not found: %s", method);
    }
  }
  mcp_rpc_msg_free(&m);
}

/* ---- the loop ---- */

typedef struct {
  char *buf;
  size_t len, alloc;
  bool discarding; /* inside an over-long line, dropping until its end */
} linebuf;

static void take_lines(mcp_server *srv, linebuf *lb, bool eof) {
  size_t start = 0;
  for (;;) {
    char *nl = memchr(lb->buf + start, '\n', lb->len - start);
    if (!nl && !(eof && start < lb->len)) break;
    size_t end = nl ? (size_t)(nl - lb->buf) : lb->len;
    size_t n = end - start;
    if (n > 0 && lb->buf[start + n - 1] == '\r') n--;
    if (lb->discarding) {
      lb->discarding = false;
    } else {
      bool blank = true;
      for (size_t i = 0; i < n && blank; i++) blank = lb->buf[start + i] == ' ' || lb->buf[start + i] == '\t';
      if (!blank) handle_message(srv, lb->buf + start, n);
    }
    start = nl ? end + 1 : lb->len;
  }
  memmove(lb->buf, lb->buf + start, lb->len - start);
  lb->len -= start;
  if (lb->len >= MCP_LINE_MAX) {
    if (!lb->discarding)
      send_error(srv, NULL, MCP_RPC_INVALID, "Invalid Request: message longer than %u bytes, dropped", MCP_LINE_MAX);
    lb->discarding = true;
    lb->len = 0;
  }
}

/* Room for the next read: at least 64 KiB, growing up to the line cap. */
static void linebuf_room(linebuf *lb) {
  if (lb->alloc - lb->len >= 65536) return;
  lb->alloc = lb->alloc ? lb->alloc * 2 : 131072;
  if (lb->alloc > MCP_LINE_MAX + 131072) lb->alloc = MCP_LINE_MAX + 131072;
  lb->buf = sbx_realloc(lb->buf, lb->alloc);
}

/* Returns the signal that ended the loop, or 0 for stdin EOF / a closed
 * stdout. */
static int serve(mcp_server *srv, int sigfd) {
  linebuf lb = {0};
  int signo = 0;
  for (;;) {
    struct pollfd pf[2] = {{.fd = 0, .events = POLLIN}, {.fd = sigfd, .events = POLLIN}};
    int n = poll(pf, 2, 1000);
    if (n < 0 && errno != EINTR) {
      fprintf(stderr, "sbxctl mcp: poll: %s\n", strerror(errno));
      break;
    }
    check_deadlines(srv);
    if (srv->out_broken) break;
    if (n > 0 && (pf[1].revents & POLLIN)) {
      struct signalfd_siginfo si;
      if (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        signo = (int)si.ssi_signo;
        break;
      }
    }
    if (n <= 0 || !(pf[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    linebuf_room(&lb);
    ssize_t r = read(0, lb.buf + lb.len, lb.alloc - lb.len);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) {
      if (r < 0) fprintf(stderr, "sbxctl mcp: stdin: %s\n", strerror(errno));
      take_lines(srv, &lb, true);
      break;
    }
    lb.len += (size_t)r;
    take_lines(srv, &lb, false);
  }
  sbx_free(lb.buf);
  return signo;
}

/* Release everything, then wait for the calls still running (they fail
 * fast once their sandbox is gone). A second signal stops the wait.
 * Returns false when calls are still running (their memory must stay). */
static bool shut_down(mcp_server *srv, int sigfd, int *failed) {
  *failed = mcp_registry_release_all(&srv->reg);
  int64_t until = now_ms() + SHUTDOWN_WAIT_MS;
  for (;;) {
    pthread_mutex_lock(&srv->lock);
    int active = srv->active;
    if (active > 0) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += 1;
      pthread_cond_timedwait(&srv->idle, &srv->lock, &ts);
      active = srv->active;
    }
    pthread_mutex_unlock(&srv->lock);
    if (active == 0) return true;
    struct signalfd_siginfo si;
    if (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si || now_ms() > until) {
      fprintf(stderr, "sbxctl mcp: exiting with %d call(s) still running\n", active);
      return false;
    }
    check_deadlines(srv);
  }
}

int mcp_serve_bytes(sbx_client *client, const char *data, size_t len, int out_fd) {
  mcp_server srv = {.client = client, .out_fd = out_fd, .out_lock = PTHREAD_MUTEX_INITIALIZER,
                    .lock = PTHREAD_MUTEX_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER,
                    .call_cap_ms = MCP_CALL_CAP_MS, .lifecycle = 1 /* no probe of a node */};
  mcp_registry_init(&srv.reg);
  linebuf lb = {0};
  linebuf_room(&lb); /* as serve() has before its first read, even for no bytes */
  /* in read-sized pieces, as serve() takes stdin */
  for (size_t off = 0; off < len;) {
    linebuf_room(&lb);
    size_t n = len - off < lb.alloc - lb.len ? len - off : lb.alloc - lb.len;
    memcpy(lb.buf + lb.len, data + off, n);
    lb.len += n;
    off += n;
    take_lines(&srv, &lb, false);
  }
  take_lines(&srv, &lb, true);
  sbx_free(lb.buf);
  pthread_mutex_lock(&srv.lock);
  while (srv.active > 0) pthread_cond_wait(&srv.idle, &srv.lock);
  pthread_mutex_unlock(&srv.lock);
  int failed = mcp_registry_release_all(&srv.reg);
  mcp_registry_free(&srv.reg);
  return failed ? -1 : 0;
}

static const char USAGE[] = "usage: sbxctl mcp [--addr ADDR] [--token TOKEN] [--template TEMPLATE]\n";

int sbxctl_mcp_main(int argc, char **argv) {
  static const struct option opts[] = {{"addr", required_argument, 0, 'A'},
                                       {"token", required_argument, 0, 'T'},
                                       {"template", required_argument, 0, 't'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  rctx rc_ = {.addr = getenv("SANDBOXD_ADDR"), .token = getenv("SANDBOXD_TOKEN")};
  rctx *r = &rc_;
  const char *tmpl = getenv("SANDBOXD_TEMPLATE");
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'A': r->addr = optarg; break;
    case 'T': r->token = optarg; break;
    case 't': tmpl = optarg; break;
    case 'h':
      printf("%s\nServe the Model Context Protocol (JSON-RPC 2.0, one message per line) on stdin/stdout,\n"
             "giving an AI agent sandboxes of sandboxd. Sandboxes it created are released when stdin\n"
             "closes or on SIGINT/SIGTERM/SIGHUP. See docs/mcp.md.\n\n"
             "  --addr      sandboxd address (env SANDBOXD_ADDR, default 127.0.0.1:7777)\n"
             "  --token     node token (env SANDBOXD_TOKEN)\n"
             "  --template  template of create_sandbox by default (env SANDBOXD_TEMPLATE, else the node's)\n",
             USAGE);
      return 0;
    default: fputs(USAGE, stderr); return EXIT_USAGE;
    }
  }
  if (optind < argc) {
    fputs(USAGE, stderr);
    return EXIT_USAGE;
  }
  if (!r->addr || !*r->addr) r->addr = "127.0.0.1:7777";
  if (tmpl && !*tmpl) tmpl = NULL;
  signal(SIGPIPE, SIG_IGN); /* a closed stdout is seen as EPIPE */

  /* signals are read from a signalfd by the loop; every thread made later
   * inherits the mask */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  int sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) return rfail("signalfd: %s", strerror(errno));

  mcp_server srv = {.token = r->token, .template_ = tmpl, .out_lock = PTHREAD_MUTEX_INITIALIZER,
                    .lock = PTHREAD_MUTEX_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER, .lifecycle = -1};
  srv.call_cap_ms = MCP_CALL_CAP_MS;
  /* undocumented: lets the integration test see the cap act in seconds */
  const char *cap = getenv("SBXCTL_MCP_CALL_CAP_MS");
  if (cap && atoll(cap) > 0) srv.call_cap_ms = atoll(cap);
  fflush(stdout);
  srv.out_fd = dup(1);
  if (srv.out_fd < 0 || dup2(2, 1) < 0) {
    close(sigfd);
    return rfail("stdout: %s", strerror(errno));
  }
  sbx_client_opts co =
      SBX_CLIENT_OPTS_INIT(.addr = r->addr, .token = r->token, .tls_ca_file = getenv("SANDBOXD_CA_FILE"),
                           .agent_timeout_ms = MCP_CALL_CAP_MS);
  sbx_error err;
  if (sbx_client_new(&co, &srv.client, &err) < 0) {
    close(sigfd);
    close(srv.out_fd);
    return rfail_err("client", &err);
  }
  mcp_registry_init(&srv.reg);
  fprintf(stderr, "sbxctl mcp: serving on stdio, sandboxd %s, template %s\n", r->addr,
          tmpl ? tmpl : "(the node's default)");

  int signo = serve(&srv, sigfd);
  if (signo) fprintf(stderr, "sbxctl mcp: %s, releasing sandboxes\n", strsignal(signo));
  else fprintf(stderr, "sbxctl mcp: stdin closed, releasing sandboxes\n");
  int failed;
  if (!shut_down(&srv, sigfd, &failed)) {
    /* threads still use the client and registry: leave them to exit */
    close(srv.out_fd);
    _exit(failed ? EXIT_FAIL : 0);
  }
  mcp_registry_free(&srv.reg);
  sbx_client_free(srv.client);
  close(srv.out_fd);
  close(sigfd);
  return failed ? EXIT_FAIL : 0;
}
