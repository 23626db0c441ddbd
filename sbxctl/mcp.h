/* sbxctl mcp: a Model Context Protocol server over stdio (JSON-RPC 2.0, one
 * message per line) that hands an agent sandboxes through the client API.
 *
 *   mcp.c        options, the stdin loop, the protocol methods, workers,
 *                the per-call cap, shutdown (release everything)
 *   mcp_rpc.c    one input line into a JSON-RPC request or its error
 *   mcp_tools.c  the tool table: names, descriptions, schemas, annotations
 *   mcp_verbs.c  what each tool does
 *   mcp_util.c   the sandbox registry, UTF-8 repair, error wording
 */
#ifndef SBXCTL_MCP_H
#define SBXCTL_MCP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include <sandbox/client.h>

/* `sbxctl mcp [--addr A] [--token T] [--template T]`; argv[0] = "mcp".
 * Exit 0 after a clean shutdown, 1 when the client could not be made or a
 * sandbox could not be released, 2 for a usage error. */
int sbxctl_mcp_main(int argc, char **argv);

/* The reader without stdin (for the fuzz harness): serve data as if it
 * came on stdin up to EOF, answering on out_fd, and wait for the tool calls
 * it started. 0, or -1 when a sandbox could not be released. */
int mcp_serve_bytes(sbx_client *client, const char *data, size_t len, int out_fd);

#define MCP_LINE_MAX (8u << 20)     /* longest accepted message */
#define MCP_OUTPUT_CAP (1u << 20)   /* exec stdout / stderr, each */
#define MCP_FILE_CAP (1u << 20)     /* read_file */
#define MCP_CALL_CAP_MS (300 * 1000) /* every tool call */
#define MCP_DEFAULT_TTL 3600         /* ttl_seconds 0 or absent */

/* JSON-RPC 2.0 error codes */
#define MCP_RPC_PARSE (-32700)
#define MCP_RPC_INVALID (-32600)
#define MCP_RPC_METHOD (-32601)
#define MCP_RPC_PARAMS (-32602)

/* ---- reading one message (mcp_rpc.c) ---- */
typedef struct mcp_rpc_msg {
  json_t *msg;        /* the parsed message, or NULL */
  json_t *reply;      /* an error response to send as it is, or NULL */
  const char *method; /* a request (id set) or a notification (id NULL) */
  json_t *id;         /* borrowed from msg */
  json_t *params;     /* a request's params object (an empty one if absent) */
  json_t *empty;
} mcp_rpc_msg;

/* Parse one line (without its newline) and check the JSON-RPC envelope.
 * Afterwards exactly one holds: reply is set (send it), or method and id
 * are set (a request to serve), or the message needs no answer (a
 * notification, a response). Only memory is touched: this is the entry
 * point for fuzzing the reader. Free with mcp_rpc_msg_free. */
void mcp_rpc_read(const char *line, size_t len, mcp_rpc_msg *m);
void mcp_rpc_msg_free(mcp_rpc_msg *m);
/* An error response for id (NULL: null). */
json_t *mcp_rpc_error(json_t *id, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- sandbox registry (mcp_util.c): every sandbox this server created,
 * released on shutdown. Handles stay allocated until the registry is freed
 * so a call still using one after a release never touches freed memory. */
typedef struct mcp_entry {
  sbx_sandbox *s;
  bool live; /* created here and not yet released */
} mcp_entry;

typedef struct mcp_registry {
  pthread_mutex_t lock;
  mcp_entry *items;
  size_t len, alloc;
  bool closing; /* shutdown began: a sandbox registered now is released at once */
} mcp_registry;

void mcp_registry_init(mcp_registry *r);
/* Remember s (the registry owns it from now on). Returns false when the
 * server is shutting down: the caller must release s itself. */
bool mcp_registry_add(mcp_registry *r, sbx_sandbox *s);
/* The live handle for id, or NULL. The handle stays valid until
 * mcp_registry_free. */
sbx_sandbox *mcp_registry_get(mcp_registry *r, const char *id);
/* Mark id released (no more shutdown release). */
void mcp_registry_forget(mcp_registry *r, const char *id);
/* Set closing and release every live sandbox; returns how many failed. */
int mcp_registry_release_all(mcp_registry *r);
void mcp_registry_free(mcp_registry *r);

/* ---- one tool call ---- */
typedef struct mcp_server mcp_server;

typedef struct mcp_call {
  mcp_server *srv;
  sbx_client *client;
  mcp_registry *reg;
  const char *default_template; /* NULL: the node's */
  const char *token;            /* node token, for lookups; may be NULL */
  const char *tool;             /* the tool's name */
  /* set while an exec or logs stream runs, so the cap can kill it */
  pthread_mutex_t lock;
  sbx_sandbox *running_s;
  uint32_t running_pid;
  bool timed_out;
} mcp_call;

/* Called by verbs around a streaming exec: record or clear the pid the
 * per-call cap kills. Returns false when the cap already expired. */
bool mcp_call_running(mcp_call *c, sbx_sandbox *s, uint32_t pid);

/* ---- tools (mcp_tools.c) ---- */
typedef int (*mcp_tool_fn)(mcp_call *c, json_t *args, json_t **out, sbx_error *err);
/* A verb on one sandbox: the caller resolves args' sandbox_id to s and
 * frees it afterwards. */
typedef int (*mcp_sandbox_fn)(mcp_call *c, sbx_sandbox *s, json_t *args, json_t **out, sbx_error *err);

typedef struct mcp_tool {
  const char *name;
  const char *title;
  const char *description;
  const char *schema; /* JSON text of the inputSchema */
  bool read_only, destructive, idempotent;
  mcp_tool_fn fn;            /* tools that take no sandbox_id, or manage it themselves */
  mcp_sandbox_fn on_sandbox; /* the rest: run on the sandbox of args' sandbox_id */
} mcp_tool;

extern const mcp_tool mcp_tools[];
const mcp_tool *mcp_tool_find(const char *name);
/* The `tools` array of tools/list (new reference); NULL on a bad schema.
 * _for(false) leaves out the lifecycle tools (a node that answers them
 * 501). */
json_t *mcp_tools_list(void);
json_t *mcp_tools_list_for(bool lifecycle);
bool mcp_tool_is_lifecycle(const char *name);
/* The outputSchema text of a tool, NULL if it has none. */
const char *mcp_tool_output_schema(const char *tool);
/* Check args against the parts of the schema the verbs rely on: required
 * properties, property types, no unknown properties. */
int mcp_tool_check_args(const mcp_tool *t, json_t *args, sbx_error *err);

/* ---- verbs (mcp_verbs.c) ---- */
int mcp_create_sandbox(mcp_call *c, json_t *a, json_t **out, sbx_error *err);
int mcp_exec(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_spawn(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_ps(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_logs(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_kill(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_write_file(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_read_file(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_list_dir(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_release(mcp_call *c, json_t *a, json_t **out, sbx_error *err);
int mcp_node_info(mcp_call *c, json_t *a, json_t **out, sbx_error *err);
int mcp_hibernate(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_unsupported(mcp_call *c, json_t *a, json_t **out, sbx_error *err);
/* search and replace (mcp_search.c) */
int mcp_search(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_replace(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
/* mcp_life.c */
int mcp_fork(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_checkpoint(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_branch_checkpoint(mcp_call *c, json_t *a, json_t **out, sbx_error *err);
int mcp_list_checkpoints(mcp_call *c, json_t *a, json_t **out, sbx_error *err);
int mcp_delete_checkpoint(mcp_call *c, json_t *a, json_t **out, sbx_error *err);
int mcp_promote(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_wake(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_git_status(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_git_diff(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
int mcp_git_commit(mcp_call *c, sbx_sandbox *s, json_t *a, json_t **out, sbx_error *err);
/* Run fn on the sandbox of args' sandbox_id. */
int mcp_with_sandbox(mcp_call *c, json_t *a, mcp_sandbox_fn fn, json_t **out, sbx_error *err);

/* ---- helpers (mcp_util.c) ---- */
/* A JSON string of n bytes with invalid UTF-8 replaced by U+FFFD (jansson
 * refuses invalid UTF-8). *repaired tells whether anything was replaced. */
json_t *mcp_json_text(const char *p, size_t n, bool *repaired);
/* The handle for a sandbox_id: this server's, else a lookup with the node
 * token. *owned tells whether the caller must sbx_sandbox_free it. */
int mcp_sandbox(mcp_call *c, const char *id, sbx_sandbox **out, bool *owned, sbx_error *err);
/* Reword a client error for an agent: what failed and what to do. */
void mcp_explain(const char *what, const char *id, sbx_error *err);

#endif
