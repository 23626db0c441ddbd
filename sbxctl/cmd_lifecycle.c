/* Lifecycle commands: hibernate, wake, fork, checkpoint, checkpoints,
 * branch, promote, rm-checkpoint (sandboxd-http.md §4.5-4.16). Each prints
 * the server's answer with --json, else one line per result. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "remote.h"

/* A refused option value: name the option and what it takes. */
static int bad_value(const char *cmd, int c, const char *got) {
  switch (c) {
  case 't': return rbadopt(cmd, "--ttl", "seconds", got);
  case 'n': return rbadopt(cmd, "--count", "a number from 1 to 1000", got);
  default: return rusage(cmd);
  }
}

/* Options: the common ones plus up to two of ours (name, short key). */
static int opts_loop(rctx *r, int argc, char **argv, const char *cmd, const struct option *extra, size_t nextra,
                     int (*take)(int c, const char *arg, void *ud), void *ud) {
  struct option opts[8] = {COMMON_LONGOPTS};
  size_t n = 4;
  for (size_t i = 0; i < nextra && n < 7; i++) opts[n++] = extra[i];
  memset(&opts[n], 0, sizeof opts[n]);
  int c, rc;
  while ((c = getopt_long(argc, argv, "hn:", opts, NULL)) != -1) {
    if (take && c && strchr("nrtN", c) && take(c, optarg, ud) == 0) continue;
    if (c && strchr("nrtN", c)) return bad_value(cmd, c, optarg);
    if ((rc = common_opt(r, c, cmd)) >= 0) return rc;
  }
  return -1;
}

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static void life_print_json(const char *json) {
  fputs(json ? json : "{}", stdout);
  if (!json || !*json || json[strlen(json) - 1] != '\n') putchar('\n');
}

/* ---- hibernate, wake ---- */

static int pause_cmd(rctx *r, int argc, char **argv, bool hibernate) {
  const char *cmd = hibernate ? "hibernate" : "wake";
  int rc = opts_loop(r, argc, argv, cmd, NULL, 0, NULL, NULL);
  if (rc >= 0) return rc;
  if (argc - optind < 1) return rusage(cmd);
  int status = 0;
  for (int i = optind; i < argc; i++) {
    sbx_sandbox *s;
    if (rsandbox(r, argv[i], &s)) {
      status = EXIT_FAIL;
      continue;
    }
    sbx_error err;
    if ((hibernate ? sbx_sandbox_hibernate(s, &err) : sbx_sandbox_wake(s, &err)) < 0) status = rfail_err(argv[i], &err);
    else if (r->json) printf("{\"id\":\"%s\",\"hibernated\":%s}\n", argv[i], hibernate ? "true" : "false");
    sbx_sandbox_free(s);
  }
  return status;
}

int cmd_hibernate(rctx *r, int argc, char **argv) { return pause_cmd(r, argc, argv, true); }
int cmd_wake(rctx *r, int argc, char **argv) { return pause_cmd(r, argc, argv, false); }

/* ---- fork ---- */

struct fork_args {
  long long count, ttl;
  const char *ref;
};

static int fork_take(int c, const char *arg, void *ud) {
  struct fork_args *a = ud;
  if (c == 'n') return parse_int(arg, 1, 1000, &a->count);
  if (c == 't') return parse_int(arg, 0, 1ll << 40, &a->ttl);
  if (c == 'r') {
    a->ref = arg;
    return 0;
  }
  return -1;
}

int cmd_fork(rctx *r, int argc, char **argv) {
  static const struct option extra[] = {{"count", required_argument, 0, 'n'},
                                        {"ttl", required_argument, 0, 't'},
                                        {"ref-prefix", required_argument, 0, 'r'}};
  struct fork_args a = {.count = 1};
  int rc = opts_loop(r, argc, argv, "fork", extra, 3, fork_take, &a);
  if (rc >= 0) return rc;
  if (argc - optind != 1) return rusage("fork");
  sbx_sandbox *s, **kids = NULL;
  if (rsandbox(r, argv[optind], &s)) return EXIT_FAIL;
  sbx_fork_opts fo = SBX_FORK_OPTS_INIT(.count = (int)a.count, .ttl_seconds = a.ttl, .claim_ref_prefix = a.ref);
  size_t n = 0;
  char *json = NULL;
  sbx_error err;
  rc = sbx_sandbox_fork(s, &fo, &kids, &n, &json, &err);
  sbx_sandbox_free(s);
  if (rc < 0) return rfail_err("fork", &err);
  for (size_t i = 0; i < n; i++) {
    if (state_save(sbx_sandbox_id(kids[i]), sbx_sandbox_token(kids[i]), sbx_sandbox_owner(kids[i])) < 0)
      fprintf(stderr, "sbxctl: warning: could not remember the token of %s\n", sbx_sandbox_id(kids[i]));
    if (!r->json) printf("%s\n", sbx_sandbox_id(kids[i]));
    sbx_sandbox_free(kids[i]);
  }
  if (r->json) life_print_json(json);
  sbx_free(kids);
  sbx_free(json);
  return 0;
}

/* ---- checkpoints ---- */

static int name_take(int c, const char *arg, void *ud) {
  if (c != 'N') return -1;
  *(const char **)ud = arg;
  return 0;
}

int cmd_checkpoint(rctx *r, int argc, char **argv) {
  static const struct option extra[] = {{"name", required_argument, 0, 'N'}};
  const char *name = NULL;
  int rc = opts_loop(r, argc, argv, "checkpoint", extra, 1, name_take, &name);
  if (rc >= 0) return rc;
  if (argc - optind != 1) return rusage("checkpoint");
  sbx_sandbox *s;
  if (rsandbox(r, argv[optind], &s)) return EXIT_FAIL;
  sbx_checkpoint ck;
  char *json = NULL;
  sbx_error err;
  rc = sbx_sandbox_checkpoint(s, name, &ck, &json, &err);
  sbx_sandbox_free(s);
  if (rc < 0) return rfail_err("checkpoint", &err);
  if (r->json) life_print_json(json);
  else printf("%s\n", ck.id);
  sbx_free(json);
  return 0;
}

int cmd_checkpoints(rctx *r, int argc, char **argv) {
  int rc = opts_loop(r, argc, argv, "checkpoints", NULL, 0, NULL, NULL);
  if (rc >= 0) return rc;
  if (argc != optind) return rusage("checkpoints");
  sbx_client *cl = NULL;
  if (rclient(r, &cl)) return EXIT_FAIL;
  sbx_checkpoint *list = NULL;
  size_t n = 0;
  char *json = NULL;
  sbx_error err;
  if (sbx_client_checkpoints(cl, &list, &n, &json, &err) < 0) return rfail_err("checkpoints", &err);
  if (r->json) {
    life_print_json(json);
  } else {
    for (size_t i = 0; i < n; i++)
      printf("%s  %-20s %s  %s|%s|%s  %s\n", list[i].id, list[i].name[0] ? list[i].name : "-", list[i].created_at,
             list[i].key.template_, list[i].key.net, list[i].key.size, list[i].sandbox_id);
  }
  sbx_free(list);
  sbx_free(json);
  return 0;
}

int cmd_rm_checkpoint(rctx *r, int argc, char **argv) {
  int rc = opts_loop(r, argc, argv, "rm-checkpoint", NULL, 0, NULL, NULL);
  if (rc >= 0) return rc;
  if (argc - optind < 1) return rusage("rm-checkpoint");
  sbx_client *cl = NULL;
  if (rclient(r, &cl)) return EXIT_FAIL;
  int status = 0;
  for (int i = optind; i < argc; i++) {
    sbx_error err;
    if (sbx_client_checkpoint_delete(cl, argv[i], &err) < 0) status = rfail_err(argv[i], &err);
    else if (r->json) printf("{\"id\":\"%s\",\"deleted\":true}\n", argv[i]);
  }
  return status;
}

static int ttl_take(int c, const char *arg, void *ud) {
  if (c != 't') return -1;
  return parse_int(arg, 0, 1ll << 40, ud);
}

int cmd_branch(rctx *r, int argc, char **argv) {
  static const struct option extra[] = {{"ttl", required_argument, 0, 't'}};
  long long ttl = 0;
  int rc = opts_loop(r, argc, argv, "branch", extra, 1, ttl_take, &ttl);
  if (rc >= 0) return rc;
  if (argc - optind != 1) return rusage("branch");
  sbx_client *cl = NULL;
  if (rclient(r, &cl)) return EXIT_FAIL;
  sbx_branch_opts bo = SBX_BRANCH_OPTS_INIT(.ttl_seconds = ttl);
  sbx_sandbox *s;
  char *json = NULL;
  sbx_error err;
  if (sbx_client_branch(cl, argv[optind], &bo, &s, &json, &err) < 0) return rfail_err("branch", &err);
  if (state_save(sbx_sandbox_id(s), sbx_sandbox_token(s), sbx_sandbox_owner(s)) < 0)
    fprintf(stderr, "sbxctl: warning: could not remember the token of %s\n", sbx_sandbox_id(s));
  if (r->json) life_print_json(json);
  else printf("%s\n", sbx_sandbox_id(s));
  sbx_sandbox_free(s);
  sbx_free(json);
  return 0;
}

int cmd_promote(rctx *r, int argc, char **argv) {
  int rc = opts_loop(r, argc, argv, "promote", NULL, 0, NULL, NULL);
  if (rc >= 0) return rc;
  if (argc - optind != 2) return rusage("promote");
  sbx_sandbox *s;
  if (rsandbox(r, argv[optind], &s)) return EXIT_FAIL;
  char digest[80] = "", *json = NULL;
  sbx_error err;
  rc = sbx_sandbox_promote(s, argv[optind + 1], digest, sizeof digest, &json, &err);
  sbx_sandbox_free(s);
  if (rc < 0) return rfail_err("promote", &err);
  if (r->json) life_print_json(json);
  else printf("%s\n", digest);
  sbx_free(json);
  return 0;
}
