/* Control-plane commands: claim, release, renew, ls, info, pools, drain,
 * uncordon. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "remote.h"

static int parse_i64(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < 0) return -1;
  *out = v;
  return 0;
}

int cmd_claim(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {{"size", required_argument, 0, 's'}, {"net", required_argument, 0, 'n'},
                                       {"ttl", required_argument, 0, 't'},  {"ref", required_argument, 0, 'r'},
                                       COMMON_LONGOPTS,                     {0, 0, 0, 0}};
  sbx_claim_opts co = SBX_CLAIM_OPTS_INIT(.template_ = "host");
  int c, rc;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's': co.size = optarg; break;
    case 'n': co.net = optarg; break;
    case 'r': co.claim_ref = optarg; break;
    case 't':
      if (parse_i64(optarg, &co.ttl_seconds) < 0) return rbadopt("claim", "--ttl", "seconds", optarg);
      break;
    default:
      if ((rc = common_opt(r, c, "claim")) >= 0) return rc;
    }
  }
  if (argc - optind > 1) return rusage("claim");
  if (optind < argc) co.template_ = argv[optind];
  sbx_client *cl = NULL;
  if (rclient(r, &cl)) return EXIT_FAIL;
  sbx_sandbox *s;
  sbx_error err;
  if (sbx_client_claim(cl, &co, &s, &err) < 0) return rfail_err("claim", &err);
  if (state_save(sbx_sandbox_id(s), sbx_sandbox_token(s), sbx_sandbox_owner(s)) < 0)
    fprintf(stderr, "sbxctl: warning: could not remember the token of %s\n", sbx_sandbox_id(s));
  if (r->json) {
    json_t *j = json_pack("{s:s,s:s,s:s,s:s}", "id", sbx_sandbox_id(s), "token", sbx_sandbox_token(s), "deadline",
                          sbx_sandbox_deadline(s), "owner_addr", sbx_sandbox_owner(s));
    json_dumpf(j, stdout, JSON_COMPACT);
    putchar('\n');
    json_decref(j);
  } else {
    printf("%s\n", sbx_sandbox_id(s));
  }
  sbx_sandbox_free(s);
  return 0;
}

/* Commands taking only ID arguments and the common options. */
static int ids_only(rctx *r, int argc, char **argv, const char *cmd, int min, int max) {
  static const struct option opts[] = {COMMON_LONGOPTS, {0, 0, 0, 0}};
  int c, rc;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1)
    if ((rc = common_opt(r, c, cmd)) >= 0) return rc;
  int n = argc - optind;
  if (n < min || n > max) return rusage(cmd);
  return -1;
}

int cmd_release(rctx *r, int argc, char **argv) {
  int rc = ids_only(r, argc, argv, "release", 1, 1000);
  if (rc >= 0) return rc;
  int status = 0;
  for (int i = optind; i < argc; i++) {
    sbx_sandbox *s;
    if (rsandbox(r, argv[i], &s)) {
      status = EXIT_FAIL;
      continue;
    }
    sbx_error err;
    if (sbx_sandbox_release(s, &err) < 0) {
      status = rfail_err(argv[i], &err);
    } else {
      state_forget(argv[i]);
      if (r->json) printf("{\"id\":\"%s\",\"released\":true}\n", argv[i]);
    }
    sbx_sandbox_free(s);
  }
  return status;
}

int cmd_renew(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {{"ttl", required_argument, 0, 't'}, COMMON_LONGOPTS, {0, 0, 0, 0}};
  int64_t ttl = 0;
  int c, rc;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 't') {
      if (parse_i64(optarg, &ttl) < 0) return rbadopt("renew", "--ttl", "seconds", optarg);
    } else if ((rc = common_opt(r, c, "renew")) >= 0) {
      return rc;
    }
  }
  if (argc - optind != 1) return rusage("renew");
  sbx_sandbox *s;
  if (rsandbox(r, argv[optind], &s)) return EXIT_FAIL;
  sbx_error err;
  rc = sbx_sandbox_renew(s, ttl, &err);
  if (rc == 0) {
    if (r->json) {
      printf("{\"id\":\"%s\",\"deadline\":\"%s\"}\n", sbx_sandbox_id(s), sbx_sandbox_deadline(s));
    } else {
      printf("%s\n", sbx_sandbox_deadline(s));
    }
  }
  sbx_sandbox_free(s);
  return rc < 0 ? rfail_err("renew", &err) : 0;
}

int cmd_ls(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {{"ref", required_argument, 0, 'r'}, COMMON_LONGOPTS, {0, 0, 0, 0}};
  const char *ref = NULL;
  int c, rc;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 'r') {
      ref = optarg;
    } else if ((rc = common_opt(r, c, "ls")) >= 0) {
      return rc;
    }
  }
  if (optind + 1 == argc && !ref) return cmd_ls_path(r, argv[optind]); /* ls ID:/path */
  if (optind != argc) return rusage("ls");
  sbx_client *cl = NULL;
  if (rclient(r, &cl)) return EXIT_FAIL;
  sbx_sandbox_row *rows = NULL;
  size_t n = 0;
  char *json = NULL;
  sbx_error err;
  if (sbx_client_sandboxes(cl, ref, &rows, &n, &json, &err) < 0) return rfail_err("ls", &err);
  if (r->json) {
    printf("%s\n", json);
  } else {
    printf("%-20s %-24s %-7s %-6s %-21s %s\n", "ID", "TEMPLATE", "SIZE", "NET", "DEADLINE", "REF");
    for (size_t i = 0; i < n; i++)
      printf("%-20s %-24s %-7s %-6s %-21s %s%s\n", rows[i].id, rows[i].key.template_, rows[i].key.size,
             rows[i].key.net, rows[i].deadline, rows[i].claim_ref, rows[i].hibernated ? " (hibernated)" : "");
  }
  sbx_free(rows);
  sbx_free(json);
  return 0;
}

/* Where the node's pools come from: "pools.json" once set through the API
 * (it then overrides the config file's), NULL when the node does not say. */
static char *pools_source(const sbx_node_info *ni) {
  json_t *j = ni->json ? json_loads(ni->json, 0, NULL) : NULL;
  const char *v = json_string_value(json_object_get(j, "pools_source"));
  char *out = v ? sbx_strdup(v) : NULL;
  json_decref(j);
  return out;
}

static void print_node(const sbx_node_info *ni, bool json) {
  if (json) {
    printf("%s\n", ni->json);
    return;
  }
  char *src = pools_source(ni);
  if (src && strcmp(src, "pools.json") == 0)
    printf("pools: set through the API (data_dir/pools.json); they override the config file's pools\n");
  sbx_free(src);
  printf("claimed %lld, hibernated %lld, archived %lld%s%s%s\n", (long long)ni->claimed, (long long)ni->hibernated,
         (long long)ni->archived, ni->draining ? ", draining" : "", ni->at_capacity ? ", at capacity: " : "",
         ni->at_capacity ? ni->at_capacity_reason : "");
  printf("%-24s %-7s %-6s %5s %9s %6s %s\n", "TEMPLATE", "SIZE", "NET", "WARM", "REFILLING", "TARGET", "GOLDEN");
  for (size_t i = 0; i < ni->npools; i++) {
    const sbx_pool_state *p = &ni->pools[i];
    printf("%-24s %-7s %-6s %5lld %9lld %6lld %s\n", p->key.template_, p->key.size, p->key.net, (long long)p->warm,
           (long long)p->refilling, (long long)p->target, p->golden ? "yes" : "no");
  }
}

int cmd_info(rctx *r, int argc, char **argv) {
  int rc = ids_only(r, argc, argv, "info", 0, 1);
  if (rc >= 0) return rc;
  sbx_client *cl = NULL;
  if (rclient(r, &cl)) return EXIT_FAIL;
  sbx_error err;
  if (optind < argc) {
    sbx_sandbox_row row;
    char *json = NULL;
    if (sbx_client_sandbox_info(cl, argv[optind], &row, &json, &err) < 0) return rfail_err("info", &err);
    if (r->json) {
      printf("%s\n", json);
    } else {
      printf("id          %s\ntemplate    %s\nsize        %s\nnet         %s\ndeadline    %s\nclaimed_at  %s\n"
             "hibernated  %s\nclaim_ref   %s\n",
             row.id, row.key.template_, row.key.size, row.key.net, row.deadline, row.claimed_at,
             row.hibernated ? "yes" : "no", row.claim_ref);
    }
    sbx_free(json);
    return 0;
  }
  sbx_node_info ni;
  if (sbx_client_info(cl, &ni, &err) < 0) return rfail_err("info", &err);
  print_node(&ni, r->json);
  sbx_node_info_free(&ni);
  return 0;
}

static int64_t opt_int(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

/* What PUT /v1/pools refuses, refused here before anything is sent (the
 * client's pool spec has no room for the rest, so it would be dropped
 * silently): unknown keys, the config-file-only warmup and egress, and
 * wrong types. The words are the API's. */
static int pools_check(json_t *doc, json_t *arr, char *bad, size_t n) {
  static const char *const strs[] = {"template", "net", "size"};
  static const char *const ints[] = {"warm", "warm_max", "idle_hibernate_seconds", "archive_after_seconds",
                                     "archive_delete_after_seconds"};
  const char *k;
  json_t *v;
  if (json_is_object(doc)) json_object_foreach(doc, k, v) if (strcmp(k, "pools") != 0) {
      snprintf(bad, n, "unknown field %.100s", k);
      return -1;
    }
  for (size_t i = 0; i < json_array_size(arr); i++) {
    json_t *o = json_array_get(arr, i);
    if (!json_is_object(o)) {
      snprintf(bad, n, "pools[%zu]: must be an object", i);
      return -1;
    }
    if (!json_is_string(json_object_get(o, "template"))) {
      snprintf(bad, n, "pools[%zu].template: required", i);
      return -1;
    }
    json_object_foreach(o, k, v) {
      const char *want = NULL; /* what the key takes; NULL: not a key */
      bool ok = false;
      for (size_t s = 0; s < sizeof strs / sizeof *strs; s++)
        if (strcmp(k, strs[s]) == 0) want = "a string", ok = json_is_string(v);
      for (size_t s = 0; s < sizeof ints / sizeof *ints; s++)
        if (strcmp(k, ints[s]) == 0) want = "an integer >= 0", ok = json_is_integer(v) && json_integer_value(v) >= 0;
      if (!want && (strcmp(k, "warmup") == 0 || strcmp(k, "egress") == 0)) {
        snprintf(bad, n, "pools[%zu].%.64s: owned by the config file, not settable here", i, k);
        return -1;
      }
      if (!want || !ok) {
        snprintf(bad, n, "pools[%zu].%.64s: %s%s", i, k, want ? "must be " : "unknown field", want ? want : "");
        return -1;
      }
    }
  }
  return 0;
}

int cmd_pools(rctx *r, int argc, char **argv) {
  int rc = ids_only(r, argc, argv, "pools", 0, 2);
  if (rc >= 0) return rc;
  int n = argc - optind;
  const char *sub = n > 0 ? argv[optind] : "show";
  sbx_client *cl = NULL;
  sbx_error err;
  sbx_node_info ni;
  if (strcmp(sub, "show") == 0 && n <= 1) {
    if (rclient(r, &cl)) return EXIT_FAIL;
    if (sbx_client_info(cl, &ni, &err) < 0) return rfail_err("pools", &err);
  } else if (strcmp(sub, "set") == 0 && n == 2) {
    const char *file = argv[optind + 1];
    json_error_t je;
    json_t *j = strcmp(file, "-") == 0 ? json_loadf(stdin, 0, &je) : json_load_file(file, 0, &je);
    if (!j) return rfail("pools: %s: %s", file, je.text);
    json_t *arr = json_is_array(j) ? j : json_object_get(j, "pools");
    if (!json_is_array(arr)) {
      json_decref(j);
      return rfail("pools: %s: expected {\"pools\":[...]}", file);
    }
    char bad[256];
    if (pools_check(j, arr, bad, sizeof bad) < 0) {
      json_decref(j);
      return rfail("pools: %s: %s", file, bad);
    }
    size_t k = json_array_size(arr);
    sbx_pool_spec *specs = sbx_calloc(k ? k : 1, sizeof *specs);
    for (size_t i = 0; i < k; i++) {
      json_t *o = json_array_get(arr, i);
      specs[i] = (sbx_pool_spec)SBX_POOL_SPEC_INIT();
      specs[i].template_ = json_string_value(json_object_get(o, "template"));
      specs[i].net = json_string_value(json_object_get(o, "net"));
      specs[i].size = json_string_value(json_object_get(o, "size"));
      specs[i].warm = opt_int(o, "warm");
      specs[i].warm_max = opt_int(o, "warm_max");
      specs[i].idle_hibernate_seconds = opt_int(o, "idle_hibernate_seconds");
      specs[i].archive_after_seconds = opt_int(o, "archive_after_seconds");
      specs[i].archive_delete_after_seconds = opt_int(o, "archive_delete_after_seconds");
    }
    rc = rclient(r, &cl) ? -1 : sbx_client_set_pools(cl, specs, k, &ni, &err);
    sbx_free(specs);
    json_decref(j);
    if (rc < 0) return r->client ? rfail_err("pools", &err) : EXIT_FAIL;
  } else {
    return rusage("pools");
  }
  print_node(&ni, r->json);
  sbx_node_info_free(&ni);
  return 0;
}

static int drain_cmd(rctx *r, int argc, char **argv, bool on) {
  const char *name = on ? "drain" : "uncordon";
  int rc = ids_only(r, argc, argv, name, 0, 0);
  if (rc >= 0) return rc;
  sbx_client *cl = NULL;
  if (rclient(r, &cl)) return EXIT_FAIL;
  sbx_node_info ni;
  sbx_error err;
  if (sbx_client_drain(cl, on, &ni, &err) < 0) return rfail_err(name, &err);
  print_node(&ni, r->json);
  sbx_node_info_free(&ni);
  return 0;
}

int cmd_drain(rctx *r, int argc, char **argv) { return drain_cmd(r, argc, argv, true); }
int cmd_uncordon(rctx *r, int argc, char **argv) { return drain_cmd(r, argc, argv, false); }
