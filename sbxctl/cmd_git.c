/* git and lsp: the guest's git through silkd's git verbs, and a stdio
 * bridge to a language server in the sandbox (usable as an editor's or an
 * agent's language-server command). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "remote.h"

static int git_print_json(json_t *j) {
  json_dumpf(j, stdout, JSON_COMPACT);
  putchar('\n');
  json_decref(j);
  return 0;
}

static int git_status(rctx *r, sbx_sandbox *s, const char *path) {
  sbx_wire_resp resp;
  sbx_error err;
  if (sbx_sandbox_git_status(s, path, &resp, &err) < 0) return rfail_err("git status", &err);
  const sbx_resp_git_status *g = &resp.u.git_status_result;
  if (r->json) {
    json_t *files = json_array();
    for (size_t i = 0; i < g->files_len; i++)
      json_array_append_new(files, json_pack("{s:s,s:s,s:s}", "path", g->files[i].path, "staged", g->files[i].staged,
                                             "unstaged", g->files[i].unstaged));
    git_print_json(json_pack("{s:s,s:I,s:I,s:o,s:b}", "branch", g->branch, "ahead", (json_int_t)g->ahead, "behind",
                         (json_int_t)g->behind, "files", files, "truncated", g->truncated));
  } else {
    printf("## %s", g->branch);
    if (g->ahead || g->behind) printf(" [ahead %u, behind %u]", g->ahead, g->behind);
    putchar('\n');
    for (size_t i = 0; i < g->files_len; i++)
      printf("%s%s %s\n", g->files[i].staged, g->files[i].unstaged, g->files[i].path);
    if (g->truncated) printf("(list truncated)\n");
  }
  sbx_wire_resp_free(&resp);
  return 0;
}

static int git_branch(rctx *r, sbx_sandbox *s, const char *path, int argc, char **argv) {
  static const char *const names[] = {"list", "create", "delete", "checkout"};
  int action = 0;
  if (argc >= 1) {
    for (action = 0; action < 4 && strcmp(argv[0], names[action]) != 0; action++) {}
    if (action == 4 || (action == 0) != (argc == 1) || argc > 2) return rusage("git");
  }
  sbx_wire_resp resp;
  sbx_error err;
  if (sbx_sandbox_git_branch(s, path, (sbx_wire_git_branch_action)action, argc == 2 ? argv[1] : NULL,
                             action == 0 ? &resp : NULL, &err) < 0)
    return rfail_err("git branch", &err);
  if (action != 0) return 0;
  const sbx_resp_git_branches *b = &resp.u.git_branches;
  if (r->json) {
    json_t *arr = json_array();
    for (size_t i = 0; i < b->branches.len; i++) json_array_append_new(arr, json_string(b->branches.items[i]));
    git_print_json(json_pack("{s:s,s:o}", "current", b->current, "branches", arr));
  } else {
    for (size_t i = 0; i < b->branches.len; i++)
      printf("%c %s\n", strcmp(b->branches.items[i], b->current) == 0 ? '*' : ' ', b->branches.items[i]);
  }
  sbx_wire_resp_free(&resp);
  return 0;
}

int cmd_git(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {{"message", required_argument, 0, 'm'}, {"author", required_argument, 0, 'a'},
                                       {"branch", required_argument, 0, 'b'},  {"depth", required_argument, 0, 'd'},
                                       {"auth-env", required_argument, 0, 'E'}, COMMON_LONGOPTS,
                                       {0, 0, 0, 0}};
  const char *message = NULL, *author = NULL, *branch = NULL, *auth_env = NULL;
  long depth = 0;
  int c, rc;
  while ((c = getopt_long(argc, argv, "hm:", opts, NULL)) != -1) {
    switch (c) {
    case 'm': message = optarg; break;
    case 'a': author = optarg; break;
    case 'b': branch = optarg; break;
    case 'E': auth_env = optarg; break;
    case 'd': {
      char *end;
      depth = strtol(optarg, &end, 10);
      if (*end || depth < 1 || depth > UINT32_MAX) return rusage("git");
      break;
    }
    default:
      if ((rc = common_opt(r, c, "git")) >= 0) return rc;
    }
  }
  if (argc - optind < 3) return rusage("git");
  const char *id = argv[optind], *sub = argv[optind + 1], *path = argv[optind + 2];
  char **rest = argv + optind + 3;
  int nrest = argc - optind - 3;
  /* the token comes from the environment: an argv is world-readable */
  const char *auth = NULL;
  if (auth_env && !(auth = getenv(auth_env))) return rfail("git: %s is not set", auth_env);
  bool known = !strcmp(sub, "status") || !strcmp(sub, "add") || !strcmp(sub, "commit") || !strcmp(sub, "clone") ||
               !strcmp(sub, "push") || !strcmp(sub, "pull") || !strcmp(sub, "branch");
  if (!known) return rusage("git");
  if ((!strcmp(sub, "add") && nrest < 1) || (!strcmp(sub, "clone") && nrest != 1) ||
      (!strcmp(sub, "commit") && (nrest || !message || !author)) ||
      ((!strcmp(sub, "status") || !strcmp(sub, "push") || !strcmp(sub, "pull")) && nrest))
    return rusage("git");
  sbx_sandbox *s;
  if (rsandbox(r, id, &s)) return EXIT_FAIL;
  sbx_error err;
  rc = 0;
  if (!strcmp(sub, "status")) {
    rc = git_status(r, s, path);
  } else if (!strcmp(sub, "branch")) {
    rc = git_branch(r, s, path, nrest, rest);
  } else if (!strcmp(sub, "add")) {
    if (sbx_sandbox_git_add(s, path, (const char *const *)rest, &err) < 0) rc = rfail_err("git add", &err);
  } else if (!strcmp(sub, "commit")) {
    char hash[80];
    if (sbx_sandbox_git_commit(s, path, message, author, hash, sizeof hash, &err) < 0)
      rc = rfail_err("git commit", &err);
    else if (r->json) git_print_json(json_pack("{s:s}", "hash", hash));
    else printf("%s\n", hash);
  } else if (!strcmp(sub, "clone")) {
    /* PATH is the URL here and the next word the target */
    sbx_git_clone_opts o = SBX_GIT_CLONE_OPTS_INIT(.url = path, .path = rest[0], .branch = branch,
                                                   .depth = (uint32_t)depth, .auth = auth);
    if (sbx_sandbox_git_clone(s, &o, &err) < 0) rc = rfail_err("git clone", &err);
  } else {
    bool push = !strcmp(sub, "push");
    if ((push ? sbx_sandbox_git_push : sbx_sandbox_git_pull)(s, path, auth, &err) < 0)
      rc = rfail_err(push ? "git push" : "git pull", &err);
  }
  sbx_sandbox_free(s);
  return rc;
}

/* ---- lsp: stdin -> server, server -> stdout ---- */

static int to_stdout(void *ud, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(STDOUT_FILENO, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return SBX_E_OS;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

int cmd_lsp(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {{"root", required_argument, 0, 'R'}, COMMON_LONGOPTS, {0, 0, 0, 0}};
  const char *root = NULL;
  int c, rc;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 'R') root = optarg;
    else if ((rc = common_opt(r, c, "lsp")) >= 0) return rc;
  }
  if (argc - optind != 2) return rusage("lsp");
  sbx_sandbox *s;
  if (rsandbox(r, argv[optind], &s)) return EXIT_FAIL;
  sbx_lsp_opts o = SBX_LSP_OPTS_INIT(.language = argv[optind + 1], .root = root);
  sbx_lsp *l;
  sbx_error err;
  if (sbx_sandbox_lsp_open(s, &o, &l, &err) < 0) {
    sbx_sandbox_free(s);
    return rfail_err("lsp", &err);
  }
  bool in_open = true;
  rc = 0;
  char buf[65536];
  for (;;) {
    int k = sbx_lsp_read(l, to_stdout, NULL, 0, &err);
    if (k == 1) break; /* the server's output ended */
    if (k < 0) {
      rc = rfail_err("lsp", &err);
      break;
    }
    struct pollfd p[2] = {{sbx_lsp_fd(l), POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    if (poll(p, in_open ? 2 : 1, -1) < 0 && errno != EINTR) {
      rc = rfail("lsp: poll: %s", strerror(errno));
      break;
    }
    if (in_open && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        in_open = false; /* the editor is done: the server sees EOF */
        if (sbx_lsp_close_input(l, &err) < 0) {
          rc = rfail_err("lsp", &err);
          break;
        }
      } else if (sbx_lsp_write(l, buf, (size_t)n, &err) < 0) {
        rc = rfail_err("lsp", &err);
        break;
      }
    }
  }
  sbx_lsp_close(l);
  sbx_sandbox_free(s);
  return rc;
}
