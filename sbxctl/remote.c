/* sbxctl remote commands: global options, dispatch, help and the helpers
 * the command files share. Errors are one line on stderr; exit 2 for usage,
 * 1 for a failed operation. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "remote.h"

/* Set once the global options are read: rfail needs them and is called from
 * every command without the context. */
static bool g_json;
static const char *g_addr = "";
/* The sandbox whose token came from the state file: if the node no longer
 * knows it, its lease ended (or someone released it). */
static char g_remembered[128];
/* The sandbox reached with --token after the lookup failed: the operator's
 * token, or a wrong one. */
static char g_by_token[128];

const rcmd sbxctl_cmds[] = {
    {"claim", cmd_claim, "[TEMPLATE] [--size SIZE] [--net none|egress] [--ttl SECONDS] [--ref REF]",
     "Claim a sandbox (template default: host) and print its id. The sandbox token is remembered in the state "
     "file so later commands need none."},
    {"exec", cmd_exec,
     "ID [--cwd DIR] [--env KEY=VALUE]... [--user USER] [--session SID] [--no-stdin] [-d|--detach] "
     "-- ARGV... | ID 'COMMAND LINE'",
     "Run ARGV in the sandbox, streaming its output and forwarding stdin. Exits with the remote exit code "
     "(127 when the program is not found, 126 when it is not executable); Ctrl-C kills the remote process. A "
     "single argument with a space or shell syntax is a command line run with sh -c (in the session's shell "
     "with --session, so cd and variables last). -d starts it in the background and prints its pid for ps, "
     "logs and kill."},
    {"shell", cmd_shell, "ID [--cwd DIR] [--env KEY=VALUE]... [--user USER]",
     "Open an interactive shell on a pseudo-terminal in the sandbox. Follows window resizes; the terminal is "
     "restored on exit. Exits with the shell's exit code."},
    {"port-forward", cmd_port_forward, "ID LOCAL:REMOTE",
     "Forward local ports to a sandbox port, as kubectl port-forward: listen on 127.0.0.1:LOCAL (0 picks one) and "
     "relay each connection to 127.0.0.1:REMOTE in the sandbox, until interrupted."},
    {"release", cmd_release, "ID...", "Destroy sandboxes and forget their tokens. An unknown sandbox counts as released."},
    {"renew", cmd_renew, "ID [--ttl SECONDS]", "Reset the lease of a sandbox and print the new deadline."},
    {"ls", cmd_ls, "[--ref CLAIM_REF] | ID:/path",
     "List the sandboxes of this node that the token owns. With ID:/path, list that directory in the sandbox "
     "(TYPE SIZE NAME; --json {\"path\",\"entries\":[{\"name\",\"type\",\"size\"}]})."},
    {"info", cmd_info, "[ID]", "Show the node state, or one sandbox's index row (needs the operator token)."},
    {"cp", cmd_cp, "SRC DST",
     "Copy files and directory trees between the host and a sandbox; one side is ID:/path. Modes, symlinks and "
     "empty directories are kept."},
    {"cat", cmd_cat, "ID:/path", "Write a sandbox file to stdout."},
    {"stat", cmd_stat, "ID:/path", "Show a sandbox file's type, size, mode and modification time."},
    {"put", cmd_put, "ID:/path [--mode OCTAL]", "Write stdin to a sandbox file (atomically)."},
    {"ps", cmd_ps, "ID", "List the processes silkd tracks in the sandbox."},
    {"kill", cmd_kill, "ID PID [--signal N]", "Send a signal (default SIGKILL) to a sandbox process."},
    {"logs", cmd_logs, "ID PID [--follow]", "Print the retained output of a sandbox process; --follow keeps "
                                            "streaming until it exits."},
    {"session", cmd_session, "ID list | ID create [--id SID] [--cwd DIR] [--env KEY=VALUE]... | ID rm SID",
     "Manage persistent shell sessions (run commands in one with exec --session)."},
    {"pools", cmd_pools, "[show] | set FILE|-",
     "Show the node's pools, or replace them with the JSON {\"pools\":[...]} of PUT /v1/pools."},
    {"find", cmd_find, "ID PATTERN [PATH] [--glob GLOB]",
     "Search sandbox files for lines matching a regex. Searches the files under PATH (default /) in the sandbox for lines matching the regex PATTERN (PCRE2, "
     "UTF-8; binary files, files over 8 MiB and symlinks are skipped). Prints FILE:LINE:CONTENT; --glob keeps "
     "files whose name matches (* and ?)."},
    {"replace", cmd_replace, "ID PATTERN REPLACEMENT FILE...",
     "Replace regex matches in sandbox files. Replaces every match of the regex PATTERN in each FILE of the sandbox ($1, $name, ${name} insert groups, "
     "$$ a dollar). Each file is rewritten atomically, keeping its mode and owner. Prints FILE: COUNT."},
    {"watch", cmd_watch, "ID PATH [--recursive] [--count N]",
     "Print file changes in the sandbox as they happen. Prints changes under PATH (KIND PATH; kinds created, modified, deleted, "
     "renamed) until interrupted, or after N events. --recursive follows the whole tree."},
    {"drain", cmd_drain, "", "Cordon the node: new claims are refused, warm sandboxes destroyed."},
    {"uncordon", cmd_uncordon, "", "Lift a drain."},
    {"completion", cmd_completion, "bash|zsh|fish", "Print the shell completion script for bash, zsh or fish."},
    {"hibernate", cmd_hibernate, "ID...",
     "Hibernate sandboxes: no CPU until woken. What is kept depends on the node's driver: the jail keeps "
     "processes, memory and sessions (the cgroup freezer; memory is not released). The next exec, shell, cp or "
     "agent connection wakes it."},
    {"wake", cmd_wake, "ID...", "Wake hibernated (or archived) sandboxes; a running one is left as it is."},
    {"fork", cmd_fork, "ID [-n|--count N] [--ttl SECONDS] [--ref-prefix P]",
     "Fork a sandbox into N children (all or none) and print their ids. With the jail driver children get a copy "
     "of the files only: they start fresh processes, no session carries over."},
    {"checkpoint", cmd_checkpoint, "ID [--name NAME]",
     "Save a sandbox's filesystem as a checkpoint (it keeps running) and print the checkpoint id. With the jail "
     "driver a checkpoint keeps files, not processes."},
    {"checkpoints", cmd_checkpoints, "", "List the checkpoints the token owns, newest first."},
    {"branch", cmd_branch, "CHECKPOINT_ID [--ttl SECONDS]",
     "Start a new sandbox from a checkpoint (fresh processes on its files) and print its id."},
    {"promote", cmd_promote, "ID TEMPLATE",
     "Make the sandbox's filesystem the template TEMPLATE (same net and size): claims of it start from a copy. "
     "Prints the content digest."},
    {"rm-checkpoint", cmd_rm_checkpoint, "CHECKPOINT_ID...", "Delete checkpoints for good."},
    {"git", cmd_git,
     "ID status PATH | ID add PATH FILE... | ID commit PATH -m MESSAGE --author 'NAME <EMAIL>' | "
     "ID clone URL PATH [--branch B] [--depth N] [--auth-env VAR] | ID push|pull PATH [--auth-env VAR] | "
     "ID branch PATH [list | create NAME | delete NAME | checkout NAME]",
     "Run the sandbox's git on the repository at PATH (as root). status prints '## BRANCH' and one 'XY PATH' line "
     "per change (X staged, Y unstaged, '.' unchanged, '?\?' untracked); commit prints the new hash; branch lists "
     "branches with '*' on the current one. --auth-env names an environment variable holding a bearer token for "
     "clone, push and pull (never put a token on the command line). clone, push and pull need a sandbox with "
     "network. --json prints status, commit and branch list as JSON."},
    {"lsp", cmd_lsp, "ID LANGUAGE [--root DIR]",
     "Relay a language server of the sandbox on stdin/stdout. Starts the sandbox's language server for LANGUAGE (a manifest under /etc/silkd/lsp.d, e.g. python) and "
     "relay it on stdin/stdout, byte for byte: use 'sbxctl lsp ID python --root /src' as an editor's or agent's "
     "language-server command. The server ends when stdin ends (after its last output) or sbxctl exits."},
    {NULL, NULL, NULL, NULL},
};

static const rcmd *find_cmd(const char *name) {
  for (const rcmd *c = sbxctl_cmds; c->name; c++)
    if (strcmp(c->name, name) == 0) return c;
  return NULL;
}

int rfail(const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  for (char *p = msg; *p; p++) /* one line, whatever the server said */
    if (*p == '\n' || *p == '\r') *p = ' ';
  if (g_json) { /* a script reads stderr as JSON too */
    json_t *j = json_pack("{s:s}", "error", msg);
    if (!j) j = json_pack("{s:s}", "error", "(message not UTF-8)");
    json_dumpf(j, stderr, JSON_COMPACT);
    fputc('\n', stderr);
    json_decref(j);
  } else {
    fprintf(stderr, "sbxctl: %s\n", msg);
  }
  return EXIT_FAIL;
}

/* Whether the daemon itself could not be reached: the message names its
 * address and the connection never came up (the HTTP client's words, or
 * a dial's errno). */
static bool daemon_unreachable(const sbx_error *err) {
  int e = err->os_errno;
  bool down = e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH || e == ETIMEDOUT ||
              err->code == SBX_E_TIMEOUT || strstr(err->msg, "Couldn't connect") ||
              strstr(err->msg, "Couldn't resolve");
  return down && *g_addr && strstr(err->msg, g_addr);
}

int rfail_err(const char *what, const sbx_error *err) {
  if (g_remembered[0] && (strstr(err->msg, "unknown sandbox") || (err->code == SBX_E_REMOTE && err->detail == 404)))
    return rfail("%s: expired: its lease ended or it was released elsewhere (sbxctl still had its token; "
                 "'sbxctl release %s' forgets it)",
                 g_remembered, g_remembered);
  if (g_by_token[0] && (strstr(err->msg, "unknown sandbox") || (err->code == SBX_E_REMOTE && err->detail == 404)))
    return rfail("%s: unknown sandbox, or not reachable with this token (the operator token can release, renew, "
                 "hibernate, wake and inspect any sandbox; exec, files and shells take the sandbox's own token)",
                 g_by_token);
  size_t wl = strlen(what);
  /* the library often names the verb already: no "claim: claim:" */
  const char *prefix = strncmp(err->msg, what, wl) == 0 && err->msg[wl] == ':' ? "" : what;
  const char *sep = *prefix ? ": " : "";
  if (daemon_unreachable(err)) return rfail("%s%s%s (is sandboxd running at %s?)", prefix, sep, err->msg, g_addr);
  return rfail("%s%s%s", prefix, sep, err->msg);
}

int rbadopt(const char *cmd, const char *opt, const char *expected, const char *got) {
  if (g_json) {
    rfail("%s: expected %s, got \"%s\"", opt, expected, got);
  } else {
    fprintf(stderr, "sbxctl: %s: expected %s, got \"%s\"\n", opt, expected, got);
  }
  return rusage(cmd);
}

int rusage(const char *cmd) {
  const rcmd *c = find_cmd(cmd);
  fprintf(stderr, "usage: sbxctl %s %s\n", cmd, c ? c->args : "");
  return EXIT_USAGE;
}

int rhelp(const char *cmd) {
  const rcmd *c = find_cmd(cmd);
  printf("usage: sbxctl [--addr ADDR] [--token TOKEN] [--json] %s %s\n\n%s\n", cmd, c->args, c->help);
  return 0;
}

bool is_help(const char *s) { return strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0; }

/* Commands main.c runs before the remote table: listed and suggested too. */
static const struct {
  const char *name, *summary;
} other_cmds[] = {
    {"local", "Run a command in a throwaway sandbox on this host, without sandboxd (sbxctl local run --help)"},
    {"mcp", "Serve the sandbox tools to an AI agent over MCP on stdin/stdout"},
};

/* The first sentence of a help paragraph, for the one-line command list. */
static int summary_len(const char *help) {
  const char *dot = strstr(help, ". ");
  if (dot && dot - help >= 3 && strncmp(dot - 3, "e.g", 3) == 0) dot = strstr(dot + 1, ". ");
  size_t n = dot ? (size_t)(dot - help) : strlen(help);
  if (n && help[n - 1] == '.') n--;
  return (int)n;
}

static void usage_all(FILE *f) {
  fprintf(f, "usage: sbxctl [--addr ADDR] [--token TOKEN] [--json] COMMAND [ARGS]\n\n"
             "  --addr   sandboxd address (env SANDBOXD_ADDR, default 127.0.0.1:7777)\n"
             "  --token  node token (env SANDBOXD_TOKEN)\n"
             "  --json   machine-readable output (errors too: {\"error\":...} on stderr)\n\ncommands:\n");
  for (const rcmd *c = sbxctl_cmds; c->name; c++)
    fprintf(f, "  %-13s %.*s\n", c->name, summary_len(c->help), c->help);
  for (size_t i = 0; i < sizeof other_cmds / sizeof other_cmds[0]; i++)
    fprintf(f, "  %-13s %s\n", other_cmds[i].name, other_cmds[i].summary);
  fprintf(f, "\n'sbxctl COMMAND --help' describes a command.\n");
}

/* Edit distance with transpositions ("mpc" is one edit from "mcp"), for
 * short names only. */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 31 || lb > 31) return 64;
  unsigned char d[32][32];
  for (size_t i = 0; i <= la; i++) d[i][0] = (unsigned char)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (unsigned char)j;
  for (size_t i = 1; i <= la; i++) {
    for (size_t j = 1; j <= lb; j++) {
      unsigned v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1u < v) v = d[i - 1][j] + 1u;
      if (d[i][j - 1] + 1u < v) v = d[i][j - 1] + 1u;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1u < v)
        v = d[i - 2][j - 2] + 1u;
      d[i][j] = (unsigned char)v;
    }
  }
  return d[la][lb];
}

/* The command closest to a mistyped one, or NULL when none is close (at
 * most 2 edits, and fewer than half the word). */
const char *sbxctl_suggest(const char *typed) {
  const char *best = NULL;
  size_t bestd = 3;
  for (const rcmd *c = sbxctl_cmds; c->name; c++) {
    size_t d = edit_distance(typed, c->name);
    if (d < bestd) bestd = d, best = c->name;
  }
  for (size_t i = 0; i < sizeof other_cmds / sizeof other_cmds[0]; i++) {
    size_t d = edit_distance(typed, other_cmds[i].name);
    if (d < bestd) bestd = d, best = other_cmds[i].name;
  }
  return best && bestd * 2 < strlen(typed) + 1 ? best : NULL;
}

static int unknown_command(const char *name) {
  const char *near = sbxctl_suggest(name);
  if (near) {
    rfail("unknown command \"%s\"; did you mean \"%s\"?", name, near);
  } else {
    rfail("unknown command \"%s\"", name);
  }
  if (!g_json) fprintf(stderr, "usage: sbxctl [--addr ADDR] [--token TOKEN] [--json] COMMAND [ARGS]  "
                               "('sbxctl --help' lists the commands)\n");
  return EXIT_USAGE;
}

int common_opt(rctx *r, int c, const char *cmd) {
  switch (c) {
  case 'h': return rhelp(cmd);
  case 'J': r->json = g_json = true; return -1;
  case 'A': r->addr = optarg; return -1;
  case 'T': r->token = optarg; return -1;
  default: return rusage(cmd);
  }
}

int rclient(rctx *r, sbx_client **out) {
  if (!r->client) {
    sbx_client_opts o =
        SBX_CLIENT_OPTS_INIT(.addr = r->addr, .token = r->token, .tls_ca_file = getenv("SANDBOXD_CA_FILE"));
    sbx_error err;
    if (sbx_client_new(&o, &r->client, &err) < 0) return rfail_err("client", &err);
  }
  *out = r->client;
  return 0;
}

int rsandbox(rctx *r, const char *id, sbx_sandbox **out) {
  sbx_client *c = NULL;
  if (rclient(r, &c)) return EXIT_FAIL;
  char token[256], owner[512];
  sbx_error err;
  int rc;
  if (state_get(id, token, sizeof token, owner, sizeof owner) == 0) {
    /* the owner the claim reported: no lookup round trip */
    rc = sbx_client_attach(c, id, token, owner[0] ? owner : NULL, out, &err);
    snprintf(g_remembered, sizeof g_remembered, "%s", id);
  } else if (r->token && *r->token) {
    rc = sbx_client_lookup(c, id, r->token, out, &err);
    /* `…/owner` answers only to the sandbox's own token: the operator's
     * goes to the node it names, which accepts it for any tenant's
     * sandbox (a wrong token then fails there, with the node's words) */
    if (rc == SBX_E_NOTFOUND && (rc = sbx_client_attach(c, id, r->token, NULL, out, &err)) == 0)
      snprintf(g_by_token, sizeof g_by_token, "%s", id);
  } else {
    return rfail("%s: no token known for this sandbox (claim it with sbxctl, or pass --token)", id);
  }
  return rc < 0 ? rfail_err(id, &err) : 0;
}

/* Global options sit before the command; returns the index of the command
 * or -1 (usage error) / -2 (help printed). */
static int parse_globals(rctx *r, int argc, char **argv) {
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    const char **slot = NULL;
    if (strcmp(a, "--json") == 0) {
      r->json = true;
      continue;
    }
    if (is_help(a)) {
      usage_all(stdout);
      return -2;
    }
    if (strncmp(a, "--addr", 6) == 0) slot = &r->addr;
    if (strncmp(a, "--token", 7) == 0) slot = &r->token;
    if (!slot) break;
    const char *eq = strchr(a, '=');
    size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
    if (nlen != (slot == &r->addr ? 6u : 7u)) break;
    if (eq) {
      *slot = eq + 1;
    } else if (i + 1 < argc) {
      *slot = argv[++i];
    } else {
      return -1;
    }
  }
  return i < argc ? i : -1;
}

bool sbxctl_remote_handles(int argc, char **argv) {
  rctx r = {0};
  int i = parse_globals(&r, argc, argv);
  return i > 0 && find_cmd(argv[i]) != NULL;
}

int sbxctl_remote_main(int argc, char **argv) {
  rctx r = {.addr = getenv("SANDBOXD_ADDR"), .token = getenv("SANDBOXD_TOKEN")};
  if (!r.addr || !*r.addr) r.addr = "127.0.0.1:7777";
  int i = parse_globals(&r, argc, argv);
  if (i == -2) return 0;
  if (i < 0) {
    usage_all(stderr);
    return EXIT_USAGE;
  }
  g_json = r.json;
  g_addr = r.addr;
  const rcmd *c = find_cmd(argv[i]);
  if (!c) return unknown_command(argv[i]);
  signal(SIGPIPE, SIG_IGN); /* a closed stdout becomes EPIPE, reported once */
  optind = 0;               /* each command runs its own getopt from scratch */
  int rc = c->fn(&r, argc - i, argv + i);
  sbx_client_free(r.client);
  return rc;
}
