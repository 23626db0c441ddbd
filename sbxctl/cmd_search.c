/* Search commands: find (fs_find), replace (fs_replace), watch (fs_watch).
 * Plain output is grep-like; --json prints one JSON object per line. */
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "remote.h"

/* One NDJSON line; jansson escapes and keeps UTF-8. */
static int print_json(json_t *o) {
  char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (!s) return -1;
  puts(s);
  free(s);
  return 0;
}

static int on_match(void *ud, const sbx_resp_match *m) {
  const rctx *r = ud;
  if (r->json)
    return print_json(json_pack("{s:s,s:I,s:s}", "file", m->file, "line", (json_int_t)m->line, "content",
                                m->content));
  printf("%s:%llu:%s\n", m->file, (unsigned long long)m->line, m->content);
  return 0;
}

int cmd_find(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {{"glob", required_argument, 0, 'g'}, COMMON_LONGOPTS, {0, 0, 0, 0}};
  const char *glob = NULL;
  int c, rc;
  while ((c = getopt_long(argc, argv, "hg:", opts, NULL)) != -1) {
    if (c == 'g') glob = optarg;
    else if ((rc = common_opt(r, c, "find")) >= 0) return rc;
  }
  int n = argc - optind;
  if (n < 2 || n > 3) return rusage("find");
  const char *id = argv[optind], *pattern = argv[optind + 1], *path = n == 3 ? argv[optind + 2] : "/";
  sbx_sandbox *s;
  if (rsandbox(r, id, &s)) return EXIT_FAIL;
  sbx_find_opts o = SBX_FIND_OPTS_INIT(.path = path, .pattern = pattern, .glob = glob, .on_match = on_match, .ud = r);
  sbx_error err;
  rc = sbx_sandbox_find(s, &o, &err);
  sbx_sandbox_free(s);
  fflush(stdout);
  return rc < 0 ? rfail("find in %s:%s: %s", id, path, err.msg) : 0;
}

static int on_replaced(void *ud, const sbx_resp_replaced *rp) {
  const rctx *r = ud;
  if (r->json)
    return print_json(json_pack("{s:s,s:I}", "file", rp->file, "replacements", (json_int_t)rp->replacements));
  printf("%s: %llu\n", rp->file, (unsigned long long)rp->replacements);
  return 0;
}

int cmd_replace(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {COMMON_LONGOPTS, {0, 0, 0, 0}};
  int c, rc;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1)
    if ((rc = common_opt(r, c, "replace")) >= 0) return rc;
  if (argc - optind < 4) return rusage("replace");
  const char *id = argv[optind];
  sbx_sandbox *s;
  if (rsandbox(r, id, &s)) return EXIT_FAIL;
  sbx_replace_opts o = SBX_REPLACE_OPTS_INIT(.files = (const char *const *)argv + optind + 3,
                                             .nfiles = (size_t)(argc - optind - 3), .pattern = argv[optind + 1],
                                             .replacement = argv[optind + 2], .on_replaced = on_replaced, .ud = r);
  sbx_error err;
  rc = sbx_sandbox_replace(s, &o, &err);
  sbx_sandbox_free(s);
  fflush(stdout);
  return rc < 0 ? rfail("replace in %s: %s", id, err.msg) : 0;
}

struct watch_ud {
  const rctx *r;
  long left; /* events still to print; <0 = no limit */
};

static int on_event(void *ud, const sbx_resp_event *ev) {
  struct watch_ud *w = ud;
  static const char *kinds[] = {"created", "modified", "deleted", "renamed"};
  const char *k = ev->kind <= SBX_EVENT_RENAMED ? kinds[ev->kind] : "other";
  if (w->r->json) {
    if (print_json(json_pack("{s:s,s:s}", "kind", k, "path", ev->path)) < 0) return -1;
  } else {
    printf("%s %s\n", k, ev->path);
  }
  fflush(stdout); /* a watch is read as it happens */
  if (w->left > 0 && --w->left == 0) return 1;
  return 0;
}

int cmd_watch(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {
      {"recursive", no_argument, 0, 'r'}, {"count", required_argument, 0, 'n'}, COMMON_LONGOPTS, {0, 0, 0, 0}};
  bool recursive = false;
  long count = -1;
  int c, rc;
  while ((c = getopt_long(argc, argv, "hrn:", opts, NULL)) != -1) {
    if (c == 'r') {
      recursive = true;
    } else if (c == 'n') {
      char *end;
      count = strtol(optarg, &end, 10);
      if (end == optarg || *end || count < 1) return rusage("watch");
    } else if ((rc = common_opt(r, c, "watch")) >= 0) {
      return rc;
    }
  }
  if (argc - optind != 2) return rusage("watch");
  const char *id = argv[optind], *path = argv[optind + 1];
  sbx_sandbox *s;
  if (rsandbox(r, id, &s)) return EXIT_FAIL;
  struct watch_ud w = {r, count};
  sbx_watch_opts o = SBX_WATCH_OPTS_INIT(.path = path, .recursive = recursive, .on_event = on_event, .ud = &w);
  sbx_error err;
  rc = sbx_sandbox_watch(s, &o, &err);
  sbx_sandbox_free(s);
  return rc < 0 ? rfail("watch %s:%s: %s", id, path, err.msg) : 0;
}
