/* sbxctl remote commands: everything that talks to sandboxd through the
 * client API (include/sandbox/client.h). */
#ifndef SBXCTL_REMOTE_H
#define SBXCTL_REMOTE_H

#include <stdbool.h>
#include <stdio.h>

#include <sandbox/client.h>

/* Entry point: the full sbxctl argv ("sbxctl [globals] COMMAND ..."). Exit
 * status: 0 ok, 1 a failed operation, 2 a usage error, or the remote exit
 * code for exec and shell. */
int sbxctl_remote_main(int argc, char **argv);
/* True when argv names a remote command (after the global options), so a
 * dispatcher knows whether to hand over. */
bool sbxctl_remote_handles(int argc, char **argv);

/* ---- shared by the command files ---- */
#define EXIT_FAIL 1
#define EXIT_USAGE 2

typedef struct rctx {
  const char *addr;
  const char *token;
  bool json;
  sbx_client *client; /* made on first use */
} rctx;

typedef struct rcmd {
  const char *name;
  int (*fn)(rctx *r, int argc, char **argv); /* argv[0] is the command name */
  const char *args;                          /* usage line after the name */
  const char *help;                          /* one paragraph */
} rcmd;

extern const rcmd sbxctl_cmds[];

/* Print "sbxctl: <msg>" (one line) and return EXIT_FAIL. */
int rfail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int rfail_err(const char *what, const sbx_error *err);
/* "sbxctl: --ttl: expected seconds, got "abc"" then the usage: EXIT_USAGE. */
int rbadopt(const char *cmd, const char *opt, const char *expected, const char *got);
/* Whether exec's single argument is a shell command line (has a space or
 * shell syntax) to run with sh -c. */
bool is_shell_line(const char *s);
/* The command name closest to a mistyped one, or NULL. */
const char *sbxctl_suggest(const char *typed);
/* "usage: ..." for the command on stderr, EXIT_USAGE. */
int rusage(const char *cmd);
/* --help for a command on stdout, 0. */
int rhelp(const char *cmd);
/* Standard option loop helper: returns 1 when argv[i] is --help/-h. */
bool is_help(const char *s);

int rclient(rctx *r, sbx_client **out);
/* A handle for ID: the remembered token and owner, else --token and a
 * lookup. */
int rsandbox(rctx *r, const char *id, sbx_sandbox **out);

/* token state (remote_state.c) */
int state_save(const char *id, const char *token, const char *owner);
int state_get(const char *id, char *token, size_t token_len, char *owner, size_t owner_len);
int state_forget(const char *id);

/* getopt_long plumbing common to every command: --help, --json, --addr,
 * --token. common_opt returns -1 when it handled c, else the exit code
 * (0 after --help, EXIT_USAGE for '?' or an unknown option). */
#define COMMON_LONGOPTS                                                                              \
  {"help", no_argument, 0, 'h'}, {"json", no_argument, 0, 'J'}, {"addr", required_argument, 0, 'A'}, \
      {"token", required_argument, 0, 'T'}
int common_opt(rctx *r, int c, const char *cmd);

/* commands */
int cmd_claim(rctx *r, int argc, char **argv);
int cmd_release(rctx *r, int argc, char **argv);
int cmd_renew(rctx *r, int argc, char **argv);
int cmd_ls(rctx *r, int argc, char **argv);
int cmd_info(rctx *r, int argc, char **argv);
int cmd_pools(rctx *r, int argc, char **argv);
int cmd_drain(rctx *r, int argc, char **argv);
int cmd_uncordon(rctx *r, int argc, char **argv);
int cmd_exec(rctx *r, int argc, char **argv);
int cmd_shell(rctx *r, int argc, char **argv);
int cmd_ps(rctx *r, int argc, char **argv);
int cmd_kill(rctx *r, int argc, char **argv);
int cmd_logs(rctx *r, int argc, char **argv);
int cmd_session(rctx *r, int argc, char **argv);
int cmd_cp(rctx *r, int argc, char **argv);
int cmd_cat(rctx *r, int argc, char **argv);
int cmd_put(rctx *r, int argc, char **argv);
int cmd_stat(rctx *r, int argc, char **argv);
/* ls ID:/path: a sandbox directory's entries. */
int cmd_ls_path(rctx *r, const char *arg);
int cmd_completion(rctx *r, int argc, char **argv);
int cmd_find(rctx *r, int argc, char **argv);
int cmd_replace(rctx *r, int argc, char **argv);
int cmd_watch(rctx *r, int argc, char **argv);
int cmd_hibernate(rctx *r, int argc, char **argv);
int cmd_wake(rctx *r, int argc, char **argv);
int cmd_fork(rctx *r, int argc, char **argv);
int cmd_checkpoint(rctx *r, int argc, char **argv);
int cmd_checkpoints(rctx *r, int argc, char **argv);
int cmd_branch(rctx *r, int argc, char **argv);
int cmd_promote(rctx *r, int argc, char **argv);
int cmd_rm_checkpoint(rctx *r, int argc, char **argv);
int cmd_git(rctx *r, int argc, char **argv);
int cmd_lsp(rctx *r, int argc, char **argv);
int cmd_port_forward(rctx *r, int argc, char **argv);

#endif
