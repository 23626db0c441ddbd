/* Process commands: exec (streaming, stdin, Ctrl-C kills the remote
 * process), ps, kill, logs, session. The interactive shell is in
 * cmd_shell.c. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "util/util.h"
#include "remote.h"

static int to_stdio(void *ud, sbx_stream st, const void *p, size_t n) {
  (void)ud;
  return sbxi_write_all(st == SBX_STREAM_STDERR ? 2 : 1, p, n) < 0 ? SBX_E_OS : 0;
}

/* env KEY=VALUE options collected into a NULL-terminated list */
typedef struct {
  const char **items;
  size_t len;
} strlist;

static void strlist_add(strlist *l, const char *s) {
  l->items = sbx_reallocarray(l->items, l->len + 2, sizeof *l->items);
  l->items[l->len++] = s;
  l->items[l->len] = NULL;
}

/* ---- Ctrl-C: a thread waits for the signal and kills the remote pid on
 * another connection of the same handle (handles are thread-safe). ---- */
typedef struct {
  sbx_sandbox *s;
  pthread_mutex_t lock;
  uint32_t pid;
  int signo;   /* the signal received, 0 = none */
  bool killed; /* the kill has been sent */
} intr_state;

static void intr_kill_locked(intr_state *st) {
  if (st->killed || !st->s || !st->pid || !st->signo) return;
  st->killed = true;
  sbx_error err;
  if (sbx_sandbox_kill(st->s, st->pid, 9, &err) < 0) rfail_err("kill", &err);
}

static void *intr_thread(void *arg) {
  intr_state *st = arg;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  for (;;) {
    int sig;
    if (sigwait(&set, &sig) != 0) continue;
    pthread_mutex_lock(&st->lock);
    if (!st->signo) st->signo = sig;
    intr_kill_locked(st);
    pthread_mutex_unlock(&st->lock);
  }
  return NULL;
}

static void on_started(void *ud, uint32_t pid) {
  intr_state *st = ud;
  pthread_mutex_lock(&st->lock);
  st->pid = pid;
  intr_kill_locked(st); /* a Ctrl-C that came before `started` */
  pthread_mutex_unlock(&st->lock);
}

typedef struct {
  intr_state *intr;
} exec_ud;

static int exec_output(void *ud, sbx_stream st, const void *p, size_t n) { return to_stdio(ud, st, p, n); }
static void exec_started(void *ud, uint32_t pid) { on_started(((exec_ud *)ud)->intr, pid); }

bool is_shell_line(const char *s) { return strpbrk(s, " \t\n|&;<>()$`\\\"'*?[]#~") != NULL; }

/* A program that could not start exits as a shell's would: 127 not found,
 * 126 found but not executable. A bad --cwd is named as such. */
static int exec_failed(const char *prog, const sbx_error *err) {
  if (strstr(err->msg, "spawn: cwd ")) return rfail("exec: %s", strstr(err->msg, "cwd "));
  if (strstr(err->msg, "spawn: No such file or directory") || strstr(err->msg, "spawn: Not a directory")) {
    rfail("exec: %s: command not found", prog);
    return 127;
  }
  if (strstr(err->msg, "spawn: Permission denied")) {
    rfail("exec: %s: permission denied (not executable)", prog);
    return 126;
  }
  return rfail_err("exec", err);
}

/* exec -d: start it in the background and print its pid, for ps, logs
 * and kill. */
static int exec_detached(rctx *r, sbx_sandbox *s, const sbx_exec_opts *eo) {
  uint32_t pid = 0;
  sbx_error err;
  if (sbx_sandbox_spawn(s, eo, &pid, &err) < 0) return exec_failed(eo->argv[0], &err);
  if (r->json) printf("{\"pid\":%u}\n", pid);
  else printf("%u\n", pid);
  return 0;
}

int cmd_exec(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {{"cwd", required_argument, 0, 'c'},     {"env", required_argument, 0, 'e'},
                                       {"user", required_argument, 0, 'u'},    {"session", required_argument, 0, 's'},
                                       {"no-stdin", no_argument, 0, 'n'},      {"detach", no_argument, 0, 'd'},
                                       COMMON_LONGOPTS,                        {0, 0, 0, 0}};
  sbx_exec_opts eo = SBX_EXEC_OPTS_INIT();
  strlist env = {0};
  bool no_stdin = false, detach = false;
  int c, rc;
  while ((c = getopt_long(argc, argv, "hd", opts, NULL)) != -1) {
    switch (c) {
    case 'd': detach = true; break;
    case 'c': eo.cwd = optarg; break;
    case 'u': eo.user = optarg; break;
    case 's': eo.session = optarg; break;
    case 'n': no_stdin = true; break;
    case 'e':
      if (!strchr(optarg, '=') || optarg[0] == '=') {
        sbx_free(env.items);
        return rusage("exec");
      }
      strlist_add(&env, optarg);
      break;
    default:
      if ((rc = common_opt(r, c, "exec")) >= 0) {
        sbx_free(env.items);
        return rc;
      }
    }
  }
  if (argc - optind < 2) {
    sbx_free(env.items);
    return rusage("exec");
  }
  const char *id = argv[optind];
  eo.argv = (const char *const *)argv + optind + 1;
  /* one argument with shell syntax is a command line, as agents send it */
  const char *line[4] = {NULL};
  if (argc - optind == 2 && is_shell_line(argv[optind + 1])) {
    /* in a session, eval runs it in the session's own shell, so cd and
     * variables last; elsewhere a fresh sh -c */
    if (eo.session) {
      line[0] = "eval", line[1] = argv[optind + 1];
    } else {
      line[0] = "sh", line[1] = "-c", line[2] = argv[optind + 1];
    }
    eo.argv = line;
  }
  eo.env = env.items;
  sbx_sandbox *s;
  if (rsandbox(r, id, &s)) {
    sbx_free(env.items);
    return EXIT_FAIL;
  }
  if (detach) {
    rc = exec_detached(r, s, &eo);
    sbx_free(env.items);
    sbx_sandbox_free(s);
    return rc;
  }
  /* signals are taken by the waiting thread only; children of this process
   * (none) would inherit the mask, which is fine */
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  static intr_state st; /* the thread outlives this frame; the process exits soon after */
  st = (intr_state){.s = s, .lock = PTHREAD_MUTEX_INITIALIZER};
  pthread_t th;
  pthread_create(&th, NULL, intr_thread, &st);
  pthread_detach(th);
  exec_ud ud = {&st};
  sbx_agent_exec_io io = {.on_output = exec_output, .on_started = exec_started, .ud = &ud,
                          .stdin_fd = no_stdin ? -1 : 0};
  int code = 0;
  sbx_error err;
  rc = sbx_sandbox_exec(s, &eo, &io, &code, &err);
  pthread_mutex_lock(&st.lock);
  int signo = st.signo;
  st.s = NULL; /* the exec is over: the thread must not touch the handle */
  pthread_mutex_unlock(&st.lock);
  sbx_free(env.items);
  sbx_sandbox_free(s);
  if (rc < 0) return exec_failed(eo.argv[0], &err);
  if (signo) return 128 + signo;
  return code < 0 || code > 255 ? 255 : code;
}

/* One compact JSON document and a newline on stdout; takes o. */
static void print_json_line(json_t *o) {
  json_dumpf(o, stdout, JSON_COMPACT);
  putchar('\n');
  json_decref(o);
}

static uint32_t parse_pid(const char *s, bool *ok) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  *ok = !errno && end != s && !*end && v > 0 && v <= 0x7fffffff;
  return (uint32_t)v;
}

static int simple_args(rctx *r, int argc, char **argv, const char *cmd, int min, int max) {
  static const struct option opts[] = {COMMON_LONGOPTS, {0, 0, 0, 0}};
  int c, rc;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1)
    if ((rc = common_opt(r, c, cmd)) >= 0) return rc;
  int n = argc - optind;
  return n < min || n > max ? rusage(cmd) : -1;
}

int cmd_ps(rctx *r, int argc, char **argv) {
  int rc = simple_args(r, argc, argv, "ps", 1, 1);
  if (rc >= 0) return rc;
  sbx_sandbox *s;
  if (rsandbox(r, argv[optind], &s)) return EXIT_FAIL;
  sbx_wire_resp resp;
  sbx_error err;
  rc = sbx_sandbox_ps(s, &resp, &err);
  sbx_sandbox_free(s);
  if (rc < 0) return rfail_err("ps", &err);
  json_t *arr = json_array();
  if (!r->json) printf("%-8s %-8s %-8s %s\n", "PID", "STATE", "EXIT", "COMMAND");
  for (size_t i = 0; i < resp.u.procs.len; i++) {
    const sbx_wire_proc_info *p = &resp.u.procs.items[i];
    if (r->json) {
      json_t *av = json_array();
      for (size_t k = 0; k < p->argv.len; k++) json_array_append_new(av, json_string(p->argv.items[k]));
      json_t *o = json_pack("{s:I,s:o,s:b,s:s,s:I}", "pid", (json_int_t)p->pid, "argv", av, "detached", p->detached,
                            "state", p->state == SBX_PROC_RUNNING ? "running" : "exited", "started_at_epoch_secs",
                            (json_int_t)p->started_at_epoch_secs);
      if (p->has_exit_code) json_object_set_new(o, "exit_code", json_integer(p->exit_code));
      json_array_append_new(arr, o);
      continue;
    }
    char exitbuf[16] = "-";
    if (p->has_exit_code) snprintf(exitbuf, sizeof exitbuf, "%d", p->exit_code);
    printf("%-8u %-8s %-8s", p->pid, p->state == SBX_PROC_RUNNING ? "running" : "exited", exitbuf);
    for (size_t k = 0; k < p->argv.len; k++) printf(" %s", p->argv.items[k]);
    printf("\n");
  }
  if (r->json) { /* a list is an object with a named array, as ls */
    json_t *o = json_pack("{s:O}", "processes", arr);
    json_dumpf(o, stdout, JSON_COMPACT);
    printf("\n");
    json_decref(o);
  }
  json_decref(arr);
  sbx_wire_resp_free(&resp);
  return 0;
}

int cmd_kill(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {{"signal", required_argument, 0, 's'}, COMMON_LONGOPTS, {0, 0, 0, 0}};
  int sig = 9, c, rc;
  while ((c = getopt_long(argc, argv, "hs:", opts, NULL)) != -1) {
    if (c == 's') {
      char *end;
      long v = strtol(optarg, &end, 10);
      if (end == optarg || *end || v < 1 || v > 64) return rbadopt("kill", "--signal", "a signal number 1-64", optarg);
      sig = (int)v;
    } else if ((rc = common_opt(r, c, "kill")) >= 0) {
      return rc;
    }
  }
  if (argc - optind != 2) return rusage("kill");
  bool ok;
  uint32_t pid = parse_pid(argv[optind + 1], &ok);
  if (!ok) return rusage("kill");
  sbx_sandbox *s;
  if (rsandbox(r, argv[optind], &s)) return EXIT_FAIL;
  sbx_error err;
  rc = sbx_sandbox_kill(s, pid, sig, &err);
  sbx_sandbox_free(s);
  if (rc < 0) return rfail_err("kill", &err);
  if (r->json) printf("{\"pid\":%u,\"signal\":%d,\"sent\":true}\n", pid, sig);
  return 0;
}

int cmd_logs(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {{"follow", no_argument, 0, 'f'}, COMMON_LONGOPTS, {0, 0, 0, 0}};
  bool follow = false;
  int c, rc;
  while ((c = getopt_long(argc, argv, "hf", opts, NULL)) != -1) {
    if (c == 'f') {
      follow = true;
    } else if ((rc = common_opt(r, c, "logs")) >= 0) {
      return rc;
    }
  }
  if (argc - optind != 2) return rusage("logs");
  bool ok;
  uint32_t pid = parse_pid(argv[optind + 1], &ok);
  if (!ok) return rusage("logs");
  sbx_sandbox *s;
  if (rsandbox(r, argv[optind], &s)) return EXIT_FAIL;
  sbx_agent_exec_io io = {.on_output = to_stdio, .stdin_fd = -1};
  int code;
  sbx_error err;
  rc = follow ? sbx_sandbox_attach(s, pid, &io, &code, &err) : sbx_sandbox_logs(s, pid, &io, &code, &err);
  sbx_sandbox_free(s);
  return rc < 0 ? rfail_err("logs", &err) : 0;
}

int cmd_session(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {{"id", required_argument, 0, 'i'}, {"cwd", required_argument, 0, 'c'},
                                       {"env", required_argument, 0, 'e'}, COMMON_LONGOPTS, {0, 0, 0, 0}};
  const char *sid = NULL, *cwd = NULL;
  strlist env = {0};
  int c, rc;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 'i') {
      sid = optarg;
    } else if (c == 'c') {
      cwd = optarg;
    } else if (c == 'e' && strchr(optarg, '=') && optarg[0] != '=') {
      strlist_add(&env, optarg);
    } else if ((rc = c == 'e' ? rusage("session") : common_opt(r, c, "session")) >= 0) {
      sbx_free(env.items);
      return rc;
    }
  }
  int n = argc - optind;
  const char *sub = n >= 2 ? argv[optind + 1] : "";
  bool okargs = (strcmp(sub, "list") == 0 && n == 2) || (strcmp(sub, "create") == 0 && n == 2) ||
                (strcmp(sub, "rm") == 0 && n == 3);
  if (!okargs) {
    sbx_free(env.items);
    return rusage("session");
  }
  sbx_sandbox *s;
  if (rsandbox(r, argv[optind], &s)) {
    sbx_free(env.items);
    return EXIT_FAIL;
  }
  sbx_error err;
  if (strcmp(sub, "list") == 0) {
    sbx_wire_resp resp;
    if ((rc = sbx_sandbox_session_list(s, &resp, &err)) == 0) {
      json_t *arr = json_array();
      for (size_t i = 0; i < resp.u.sessions.sessions.len; i++) {
        if (r->json) json_array_append_new(arr, json_string(resp.u.sessions.sessions.items[i]));
        else printf("%s\n", resp.u.sessions.sessions.items[i]);
      }
      if (r->json) print_json_line(json_pack("{s:o}", "sessions", arr));
      else json_decref(arr);
      sbx_wire_resp_free(&resp);
    }
  } else if (strcmp(sub, "create") == 0) {
    char out[256];
    if ((rc = sbx_sandbox_session_create(s, sid, cwd, env.items, out, sizeof out, &err)) == 0) {
      if (r->json) print_json_line(json_pack("{s:s}", "id", out));
      else printf("%s\n", out);
    }
  } else {
    rc = sbx_sandbox_session_rm(s, argv[optind + 2], &err);
    if (rc == 0 && r->json) print_json_line(json_pack("{s:s,s:b}", "id", argv[optind + 2], "removed", 1));
  }
  sbx_free(env.items);
  sbx_sandbox_free(s);
  return rc < 0 ? rfail_err("session", &err) : 0;
}
