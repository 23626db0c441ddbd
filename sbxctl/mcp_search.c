/* sbxctl mcp: the search and replace tools (fs_find, fs_replace). */
#include <string.h>

#include "mcp.h"

#define SEARCH_MAX 1000 /* matches returned to the agent; more sets truncated */

typedef struct {
  json_t *arr;
  bool truncated;
} search_ud;

static int on_match(void *ud, const sbx_resp_match *m) {
  search_ud *s = ud;
  if (json_array_size(s->arr) >= SEARCH_MAX) {
    s->truncated = true;
    return 1; /* stop: the rest would be thrown away */
  }
  json_t *o = json_object();
  json_object_set_new(o, "file", mcp_json_text(m->file, strlen(m->file), NULL));
  json_object_set_new(o, "line", json_integer((json_int_t)m->line));
  json_object_set_new(o, "content", mcp_json_text(m->content, strlen(m->content), NULL));
  json_array_append_new(s->arr, o);
  return 0;
}

int mcp_search(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  const char *path = json_string_value(json_object_get(a, "path"));
  search_ud u = {.arr = json_array()};
  sbx_find_opts o = SBX_FIND_OPTS_INIT(.path = path, .pattern = json_string_value(json_object_get(a, "pattern")),
                                       .glob = json_string_value(json_object_get(a, "glob")), .on_match = on_match,
                                       .ud = &u);
  int rc = sbx_sandbox_find(s, &o, err);
  if (rc < 0) {
    json_decref(u.arr);
    mcp_explain("search in", sbx_sandbox_id(s), err);
    return rc;
  }
  *out = json_pack("{s:s,s:o,s:b}", "path", path, "matches", u.arr, "truncated", u.truncated);
  return 0;
}

static int on_replaced(void *ud, const sbx_resp_replaced *r) {
  json_t *o = json_object();
  json_object_set_new(o, "file", mcp_json_text(r->file, strlen(r->file), NULL));
  json_object_set_new(o, "replacements", json_integer((json_int_t)r->replacements));
  json_array_append_new(ud, o);
  return 0;
}

int mcp_replace(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err) {
  json_t *files = json_object_get(a, "files");
  size_t n = json_array_size(files), i;
  const char **v = sbx_calloc(n ? n : 1, sizeof *v);
  json_t *f;
  json_array_foreach(files, i, f) {
    v[i] = json_string_value(f);
    if (!v[i] || v[i][0] != '/') {
      sbx_free(v);
      return sbx_err(err, SBX_E_INVAL, "files[%zu] must be an absolute path (a string starting with /)", i);
    }
  }
  json_t *arr = json_array();
  sbx_replace_opts o = SBX_REPLACE_OPTS_INIT(.files = v, .nfiles = n,
                                             .pattern = json_string_value(json_object_get(a, "pattern")),
                                             .replacement = json_string_value(json_object_get(a, "replacement")),
                                             .on_replaced = on_replaced, .ud = arr);
  int rc = sbx_sandbox_replace(s, &o, err);
  sbx_free(v);
  if (rc < 0) {
    /* what was rewritten before the failure stays rewritten: say so */
    char done[256] = "";
    if (json_array_size(arr) > 0) snprintf(done, sizeof done, " (%zu file(s) before it were already processed)",
                                           json_array_size(arr));
    json_decref(arr);
    mcp_explain("replace in", sbx_sandbox_id(s), err);
    size_t l = strlen(err->msg);
    snprintf(err->msg + l, sizeof err->msg - l, "%s", done);
    return rc;
  }
  json_int_t total = 0;
  json_array_foreach(arr, i, f) total += json_integer_value(json_object_get(f, "replacements"));
  *out = json_pack("{s:o,s:I}", "files", arr, "total", total);
  return 0;
}
