/* sbxctl mcp: the tool table. Descriptions are written for the agent that
 * reads them: what the tool does, what it returns, when to use it. The
 * annotations must stay true: readOnlyHint only for tools that change
 * nothing, destructiveHint for anything that may destroy or overwrite. */
#include <stdio.h>
#include <string.h>

#include "mcp.h"

#define ID_PROP "\"sandbox_id\":{\"type\":\"string\",\"description\":\"id returned by create_sandbox\"}"
#define PID_PROP "\"pid\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"process id from spawn or ps\"}"
#define ONLY_ID "{\"type\":\"object\",\"properties\":{" ID_PROP "},\"required\":[\"sandbox_id\"],\"additionalProperties\":false}"
/* "pattern" is how the schema tells a client that sandbox paths are
 * absolute; mcp_tool_check_args enforces it. */
#define PATH_PROP "\"path\":{\"type\":\"string\",\"pattern\":\"^/\",\"description\":\"absolute path in the sandbox\"}"
#define REPO_PROP "\"path\":{\"type\":\"string\",\"pattern\":\"^/\",\"description\":\"absolute path of the repository in the sandbox\"}"
#define CKPT_PROP "\"checkpoint_id\":{\"type\":\"string\",\"description\":\"id returned by checkpoint\"}"


const mcp_tool mcp_tools[] = {
    {"create_sandbox", "Create sandbox",
     "Create a fresh isolated Linux sandbox and return its sandbox_id (pass it to every other tool) and its "
     "deadline; it is released when this server exits.",
     "{\"type\":\"object\",\"properties\":{"
     "\"template\":{\"type\":\"string\",\"description\":\"template name; default: the server's default\"},"
     "\"net\":{\"type\":\"string\",\"enum\":[\"none\",\"egress\"],\"description\":\"network access; default none\"},"
     "\"size\":{\"type\":\"string\",\"description\":\"resource size, e.g. small, medium, large; default small\"},"
     "\"ttl_seconds\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":86400,"
     "\"description\":\"lease length in seconds; 0 or absent = 3600\"}},\"additionalProperties\":false}",
     false, false, false, mcp_create_sandbox, NULL},
    {"exec", "Run a shell command",
     "Run a shell command (sh -c) in a sandbox and wait for it; returns exit_code, stdout and stderr (each "
     "capped at 1 MiB, truncated=true when cut). A non-zero exit code is a normal result. Optional env, cwd, "
     "stdin and timeout_seconds.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP ","
     "\"command\":{\"type\":\"string\",\"description\":\"shell command line, run with sh -c\"},"
     "\"cwd\":{\"type\":\"string\",\"pattern\":\"^/\",\"description\":\"absolute working directory; default the sandbox's home\"},"
     "\"env\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"},"
     "\"description\":\"extra environment variables, name to value\"},"
     "\"stdin\":{\"type\":\"string\",\"description\":\"text given to the command on its standard input; default none\"},"
     "\"timeout_seconds\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":300,"
     "\"description\":\"kill the command after this many seconds (timed_out=true in the result)\"}},"
     "\"required\":[\"sandbox_id\",\"command\"],\"additionalProperties\":false}",
     false, true, false, NULL, mcp_exec},
    {"spawn", "Start a background command",
     "Start a shell command (sh -c) in the background and return its pid at once; read its output with logs, "
     "stop it with kill.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP ","
     "\"command\":{\"type\":\"string\",\"description\":\"shell command line, run with sh -c\"},"
     "\"cwd\":{\"type\":\"string\",\"pattern\":\"^/\",\"description\":\"absolute working directory\"}},"
     "\"required\":[\"sandbox_id\",\"command\"],\"additionalProperties\":false}",
     false, true, false, NULL, mcp_spawn},
    {"ps", "List processes",
     "List the processes started in a sandbox (by exec or spawn) with pid, command, state and exit code.",
     ONLY_ID, true, false, true, NULL, mcp_ps},
    {"logs", "Read process output",
     "Return the output retained so far of a process started by spawn (stdout, stderr, each capped at 1 MiB), "
     "and its exit code once it has exited.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP "," PID_PROP "},"
     "\"required\":[\"sandbox_id\",\"pid\"],\"additionalProperties\":false}",
     true, false, true, NULL, mcp_logs},
    {"kill", "Signal a process",
     "Send a signal (default 9, SIGKILL) to a process in a sandbox; sent=false (with a reason) when it has "
     "already exited or never existed.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP "," PID_PROP ","
     "\"signal\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":64,\"description\":\"signal number; default 9\"}},"
     "\"required\":[\"sandbox_id\",\"pid\"],\"additionalProperties\":false}",
     false, true, false, NULL, mcp_kill},
    {"write_file", "Write a file",
     "Create or replace a text file in a sandbox atomically (parent directory must exist); returns the bytes "
     "written.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP ","
     PATH_PROP ","
     "\"content\":{\"type\":\"string\",\"description\":\"the whole new file content (UTF-8 text)\"}},"
     "\"required\":[\"sandbox_id\",\"path\",\"content\"],\"additionalProperties\":false}",
     false, true, true, NULL, mcp_write_file},
    {"read_file", "Read a file",
     "Return the content of a regular UTF-8 text file in a sandbox (at most 1 MiB; use exec for larger or "
     "binary files).",
     "{\"type\":\"object\",\"properties\":{" ID_PROP ","
     PATH_PROP "},"
     "\"required\":[\"sandbox_id\",\"path\"],\"additionalProperties\":false}",
     true, false, true, NULL, mcp_read_file},
    {"list_dir", "List a directory",
     "List a directory in a sandbox: each entry's name, type (file, dir, symlink, other) and size.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP ","
     PATH_PROP "},"
     "\"required\":[\"sandbox_id\",\"path\"],\"additionalProperties\":false}",
     true, false, true, NULL, mcp_list_dir},
    {"release", "Release sandbox",
     "Destroy a sandbox and everything in it; call it when done. Releasing an unknown sandbox succeeds.",
     ONLY_ID, false, true, true, mcp_release, NULL},
    {"node_info", "Node info",
     "Show the sandboxd node's state: warm pools (template, net, size, warm count), claimed sandboxes, "
     "capacity. Needs the operator token.",
     "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}", true, false, true, mcp_node_info, NULL},
    {"fork", "Fork sandbox",
     "Fork a sandbox into count independent children (all or none; count up to the node's max_fork_count, "
     "default 16) and return their sandbox_ids; each lives one hour. The answer's keeps says what they start "
     "from: \"filesystem\" (jail nodes) means a copy of the files with fresh processes, no running process or "
     "shell session. The parent keeps running.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP ","
     "\"count\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"number of children, 1 to the node's "
     "max_fork_count (default 16)\"}},\"required\":[\"sandbox_id\",\"count\"],\"additionalProperties\":false}",
     false, false, false, NULL, mcp_fork},
    {"hibernate", "Hibernate sandbox",
     "Hibernate a sandbox: it uses no CPU, keeps its id, files, processes and shell sessions (jail nodes keep its "
     "memory too), and wakes transparently on the next exec, file or process call.",
     ONLY_ID, false, false, true, NULL, mcp_hibernate},
    {"checkpoint", "Checkpoint sandbox",
     "Save a sandbox's state as a checkpoint without stopping it and return checkpoint_id; branch_checkpoint "
     "starts new sandboxes from it any number of times. keeps says what is saved: \"filesystem\" (jail nodes) "
     "means files only, not running processes.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP ","
     "\"name\":{\"type\":\"string\",\"description\":\"optional label\"}},"
     "\"required\":[\"sandbox_id\"],\"additionalProperties\":false}",
     false, false, false, NULL, mcp_checkpoint},
    {"branch_checkpoint", "Sandbox from checkpoint",
     "Create a new sandbox from a checkpoint and return its sandbox_id; it lives one hour. The checkpoint is "
     "unchanged and can be branched again. With keeps \"filesystem\" it starts fresh processes on the saved files.",
     "{\"type\":\"object\",\"properties\":{" CKPT_PROP "},\"required\":[\"checkpoint_id\"],"
     "\"additionalProperties\":false}",
     false, false, false, mcp_branch_checkpoint, NULL},
    {"list_checkpoints", "List checkpoints",
     "List the checkpoints this token owns, newest first: checkpoint_id, name, source sandbox_id, created_at.",
     "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}", true, false, true,
     mcp_list_checkpoints, NULL},
    {"delete_checkpoint", "Delete checkpoint",
     "Delete a checkpoint for good. Sandboxes already branched from it are unaffected.",
     "{\"type\":\"object\",\"properties\":{" CKPT_PROP "},\"required\":[\"checkpoint_id\"],"
     "\"additionalProperties\":false}",
     false, true, true, mcp_delete_checkpoint, NULL},
    {"promote", "Promote sandbox to template",
     "Publish the sandbox's current files as the template template_name (same net and size); later "
     "create_sandbox calls with that name start from a copy. Promoting to the same name again replaces the "
     "template. Returns its content_digest.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP ","
     "\"template_name\":{\"type\":\"string\",\"description\":\"template name to publish as\"}},"
     "\"required\":[\"sandbox_id\",\"template_name\"],\"additionalProperties\":false}",
     false, true, false, NULL, mcp_promote},
    {"wake", "Wake sandbox",
     "Wake a hibernated sandbox now (any other call wakes it anyway); a running one is left as it is.", ONLY_ID,
     false, false, true, NULL, mcp_wake},
    {"search", "Search files",
     "Search the text files under a directory of a sandbox for lines matching a regex (PCRE2 syntax, UTF-8, "
     "searched within each line); returns each match's file, line number and line content (at most 1000, "
     "truncated=true beyond). Binary files, files over 8 MiB and symlinks are skipped. Prefer it to grep through "
     "exec.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP ","
     PATH_PROP ","
     "\"pattern\":{\"type\":\"string\",\"description\":\"regex, e.g. TODO|FIXME or (?i)^\\\\s*def \\\\w+\"},"
     "\"glob\":{\"type\":\"string\",\"description\":\"only files whose name matches, * and ? wildcards, e.g. *.py\"}},"
     "\"required\":[\"sandbox_id\",\"path\",\"pattern\"],\"additionalProperties\":false}",
     true, false, true, NULL, mcp_search},
    {"replace", "Replace in files",
     "Replace every match of a regex in each of the given files of a sandbox (the whole file content, not line "
     "by line; use (?m) for ^ and $ at lines). The replacement may use $1, $name, ${name} for groups and $$ for "
     "a dollar. Each file is rewritten atomically keeping its mode and owner; returns the count per file. A "
     "failure stops at that file: the files before it stay changed.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP ","
     "\"files\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^/\"},\"minItems\":1,"
     "\"description\":\"absolute paths of the files to rewrite\"},"
     "\"pattern\":{\"type\":\"string\",\"description\":\"regex (PCRE2 syntax)\"},"
     "\"replacement\":{\"type\":\"string\",\"description\":\"replacement text with $1 / ${name} / $$\"}},"
     "\"required\":[\"sandbox_id\",\"files\",\"pattern\",\"replacement\"],\"additionalProperties\":false}",
     false, true, false, NULL, mcp_replace},
    /* git: silkd's git verbs, and git diff run without a shell */
    {"git_status", "Git status",
     "Show the state of a git repository in a sandbox: branch, commits ahead/behind its upstream, and each changed "
     "file with its staged (X) and unstaged (Y) state ('.' unchanged, M modified, A added, D deleted, R renamed, "
     "'?' untracked). Changes nothing.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP "," REPO_PROP "},"
     "\"required\":[\"sandbox_id\",\"path\"],\"additionalProperties\":false}",
     true, false, true, NULL, mcp_git_status},
    {"git_diff", "Git diff",
     "Show the changes of a git repository in a sandbox as a unified diff: unstaged changes, or the staged ones "
     "with staged=true, optionally limited to some files (at most 1 MiB, truncated=true when cut). Changes nothing.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP "," REPO_PROP ","
     "\"staged\":{\"type\":\"boolean\",\"description\":\"diff the index against HEAD instead of the work tree against the index\"},"
     "\"files\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"description\":\"paths to limit the diff to\"}},"
     "\"required\":[\"sandbox_id\",\"path\"],\"additionalProperties\":false}",
     true, false, true, NULL, mcp_git_diff},
    {"git_commit", "Git commit",
     "Record a commit in a git repository in a sandbox: stage the given files (or all changes with all=true), "
     "commit them with the message, and return the new commit hash.",
     "{\"type\":\"object\",\"properties\":{" ID_PROP "," REPO_PROP ","
     "\"message\":{\"type\":\"string\",\"description\":\"commit message\"},"
     "\"author\":{\"type\":\"string\",\"description\":\"'Name <email>'; default 'sbxctl mcp <mcp@sandbox.invalid>'\"},"
     "\"files\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"description\":\"paths to stage first, relative to the repository\"},"
     "\"all\":{\"type\":\"boolean\",\"description\":\"stage every change (git add -A) first\"}},"
     "\"required\":[\"sandbox_id\",\"path\",\"message\"],\"additionalProperties\":false}",
     false, false, false, NULL, mcp_git_commit},
    {NULL, NULL, NULL, NULL, false, false, false, NULL, NULL},
};

const mcp_tool *mcp_tool_find(const char *name) {
  for (const mcp_tool *t = mcp_tools; t->name; t++)
    if (strcmp(t->name, name) == 0) return t;
  return NULL;
}

/* ---- outputSchema (MCP 2025-06-18): the shape of each tool's
 * structuredContent. Properties a result may leave out are not required;
 * extra ones are allowed, so a newer node's fields do not break a client
 * that validates. ---- */
#define O_STR "{\"type\":\"string\"}"
#define O_INT "{\"type\":\"integer\"}"
#define O_BOOL "{\"type\":\"boolean\"}"
#define O_ARR "{\"type\":\"array\"}"
#define OUT(props, req) "{\"type\":\"object\",\"properties\":{" props "},\"required\":[" req "]}"
#define O_CAPTURE                                                                                             \
  "\"stdout\":" O_STR ",\"stderr\":" O_STR ",\"truncated\":" O_BOOL ",\"stdout_truncated\":" O_BOOL \
  ",\"stderr_truncated\":" O_BOOL ",\"non_utf8_replaced\":" O_BOOL
#define O_SB "\"sandbox_id\":" O_STR

static const struct {
  const char *tool, *schema;
} out_schemas[] = {
    {"create_sandbox", OUT(O_SB ",\"deadline\":" O_STR ",\"template\":" O_STR, "\"sandbox_id\"")},
    {"exec", OUT(O_CAPTURE ",\"exit_code\":" O_INT ",\"timed_out\":" O_BOOL, "\"stdout\",\"stderr\",\"exit_code\"")},
    {"spawn", OUT("\"pid\":" O_INT, "\"pid\"")},
    {"ps", OUT("\"processes\":" O_ARR, "\"processes\"")},
    {"logs", OUT(O_CAPTURE ",\"exited\":" O_BOOL ",\"exit_code\":" O_INT, "\"stdout\",\"stderr\",\"exited\"")},
    {"kill", OUT("\"pid\":" O_INT ",\"signal\":" O_INT ",\"sent\":" O_BOOL ",\"reason\":" O_STR, "\"pid\",\"sent\"")},
    {"write_file", OUT("\"path\":" O_STR ",\"bytes\":" O_INT, "\"path\",\"bytes\"")},
    {"read_file", OUT("\"path\":" O_STR ",\"content\":" O_STR ",\"bytes\":" O_INT, "\"path\",\"content\"")},
    {"list_dir", OUT("\"path\":" O_STR ",\"entries\":" O_ARR ",\"truncated\":" O_BOOL, "\"path\",\"entries\"")},
    {"release", OUT(O_SB ",\"released\":" O_BOOL, "\"sandbox_id\",\"released\"")},
    {"node_info", OUT("\"pools\":" O_ARR ",\"claimed\":" O_INT, "")},
    {"fork", OUT("\"sandbox_ids\":" O_ARR ",\"parent\":" O_STR ",\"keeps\":" O_STR, "\"sandbox_ids\"")},
    {"hibernate", OUT(O_SB ",\"hibernated\":" O_BOOL ",\"keeps\":" O_STR, "\"sandbox_id\"")},
    {"checkpoint", OUT("\"checkpoint_id\":" O_STR ",\"name\":" O_STR "," O_SB ",\"keeps\":" O_STR, "\"checkpoint_id\"")},
    {"branch_checkpoint", OUT(O_SB ",\"deadline\":" O_STR ",\"keeps\":" O_STR, "\"sandbox_id\"")},
    {"list_checkpoints", OUT("\"checkpoints\":" O_ARR, "\"checkpoints\"")},
    {"delete_checkpoint", OUT("\"checkpoint_id\":" O_STR ",\"deleted\":" O_BOOL, "\"checkpoint_id\"")},
    {"promote", OUT("\"template\":" O_STR ",\"content_digest\":" O_STR "," O_SB, "\"template\"")},
    {"wake", OUT(O_SB ",\"hibernated\":" O_BOOL, "\"sandbox_id\"")},
    {"search", OUT("\"path\":" O_STR ",\"matches\":" O_ARR ",\"truncated\":" O_BOOL, "\"matches\"")},
    {"replace", OUT("\"files\":" O_ARR ",\"total\":" O_INT, "\"files\"")},
    {"git_status", OUT("\"branch\":" O_STR ",\"ahead\":" O_INT ",\"behind\":" O_INT ",\"files\":" O_ARR
                       ",\"truncated\":" O_BOOL, "\"branch\",\"files\"")},
    {"git_diff", OUT("\"diff\":" O_STR ",\"truncated\":" O_BOOL, "\"diff\"")},
    {"git_commit", OUT("\"hash\":" O_STR, "\"hash\"")},
};

const char *mcp_tool_output_schema(const char *tool) {
  for (size_t i = 0; i < sizeof out_schemas / sizeof out_schemas[0]; i++)
    if (strcmp(out_schemas[i].tool, tool) == 0) return out_schemas[i].schema;
  return NULL;
}

/* Tools that answer 501 on a node whose driver cannot keep an image (the
 * lifecycle verbs): not offered there, so an agent does not spend turns on
 * them. */
static const char *const lifecycle_tools[] = {"fork",           "hibernate",         "wake",   "checkpoint",
                                              "branch_checkpoint", "list_checkpoints", "delete_checkpoint",
                                              "promote"};

bool mcp_tool_is_lifecycle(const char *name) {
  for (size_t i = 0; i < sizeof lifecycle_tools / sizeof lifecycle_tools[0]; i++)
    if (strcmp(lifecycle_tools[i], name) == 0) return true;
  return false;
}

json_t *mcp_tools_list(void) { return mcp_tools_list_for(true); }

json_t *mcp_tools_list_for(bool lifecycle) {
  json_t *arr = json_array();
  for (const mcp_tool *t = mcp_tools; t->name; t++) {
    if (!lifecycle && mcp_tool_is_lifecycle(t->name)) continue;
    json_error_t je;
    json_t *schema = json_loads(t->schema, 0, &je);
    if (!schema) {
      fprintf(stderr, "sbxctl mcp: schema of %s: %s\n", t->name, je.text);
      json_decref(arr);
      return NULL;
    }
    json_t *ann = json_pack("{s:s,s:b,s:b,s:b,s:b}", "title", t->title, "readOnlyHint", t->read_only,
                            "destructiveHint", t->destructive, "idempotentHint", t->idempotent, "openWorldHint", 0);
    json_t *entry = json_pack("{s:s,s:s,s:s,s:o,s:o}", "name", t->name, "title", t->title, "description",
                              t->description, "inputSchema", schema, "annotations", ann);
    const char *os = mcp_tool_output_schema(t->name);
    json_t *out = os ? json_loads(os, 0, &je) : NULL;
    if (os && !out) {
      fprintf(stderr, "sbxctl mcp: output schema of %s: %s\n", t->name, je.text);
      json_decref(entry);
      json_decref(arr);
      return NULL;
    }
    if (out) json_object_set_new(entry, "outputSchema", out);
    json_array_append_new(arr, entry);
  }
  return arr;
}

static bool type_ok(const char *type, json_t *v) {
  if (strcmp(type, "string") == 0) return json_is_string(v);
  if (strcmp(type, "integer") == 0) return json_is_integer(v);
  if (strcmp(type, "boolean") == 0) return json_is_boolean(v);
  if (strcmp(type, "object") == 0) return json_is_object(v);
  if (strcmp(type, "array") == 0) return json_is_array(v);
  return true;
}

int mcp_tool_check_args(const mcp_tool *t, json_t *args, sbx_error *err) {
  json_t *schema = json_loads(t->schema, 0, NULL);
  if (!schema) return sbx_err(err, SBX_E_INTERNAL, "%s: bad schema", t->name);
  json_t *props = json_object_get(schema, "properties");
  int rc = 0;
  size_t i;
  json_t *req;
  json_array_foreach(json_object_get(schema, "required"), i, req) {
    if (!json_object_get(args, json_string_value(req))) {
      rc = sbx_err(err, SBX_E_INVAL, "missing required argument \"%s\"", json_string_value(req));
      goto out;
    }
  }
  const char *k;
  json_t *v;
  json_object_foreach(args, k, v) {
    json_t *p = json_object_get(props, k);
    if (!p) {
      rc = sbx_err(err, SBX_E_INVAL, "unknown argument \"%s\"", k);
      goto out;
    }
    const char *type = json_string_value(json_object_get(p, "type"));
    if (type && !type_ok(type, v)) {
      rc = sbx_err(err, SBX_E_INVAL, "argument \"%s\" must be of type %s", k, type);
      goto out;
    }
    json_t *min = json_object_get(p, "minimum"), *max = json_object_get(p, "maximum");
    if (json_is_integer(v) && ((min && json_integer_value(v) < json_integer_value(min)) ||
                               (max && json_integer_value(v) > json_integer_value(max)))) {
      rc = sbx_err(err, SBX_E_INVAL, "argument \"%s\" is out of range", k);
      goto out;
    }
    /* the only pattern the table uses: an absolute sandbox path */
    const char *pat = json_string_value(json_object_get(p, "pattern"));
    if (pat && json_is_string(v) && strcmp(pat, "^/") == 0 && json_string_value(v)[0] != '/') {
      rc = sbx_err(err, SBX_E_INVAL, "argument \"%s\" must be an absolute path (starting with /), not \"%s\"", k,
                   json_string_value(v));
      goto out;
    }
    json_t *en = json_object_get(p, "enum");
    if (en) {
      bool found = false;
      size_t j;
      json_t *e;
      json_array_foreach(en, j, e) found |= json_equal(e, v);
      if (!found) {
        rc = sbx_err(err, SBX_E_INVAL, "argument \"%s\" has a value not in %s", k, "its enum");
        goto out;
      }
    }
  }
out:
  json_decref(schema);
  return rc;
}
