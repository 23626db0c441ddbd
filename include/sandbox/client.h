/* sandbox/client.h - the client of sandboxd (control plane) and of the
 * silkd agent of each sandbox (data plane), as spec sandboxd-http.md §9.
 *
 * Two objects:
 *   sbx_client   a node client: an entry address, a node token, timeouts.
 *                Claims, listings, pools, drain. HTTP/1.1 through libcurl
 *                (http:// and https://).
 *   sbx_sandbox  one sandbox: id, sandbox token, owner address. Every agent
 *                verb runs over an HTTP/1.1 `Upgrade: silkd` connection to
 *                the owner (never HTTP/2); idle connections are parked for
 *                reuse (at most 8, at most 30 s, checked with MSG_PEEK before
 *                reuse, a fresh dial when the parked one is dead).
 *
 * Addresses: "host:port", "http://host[:port]", "https://host[:port]"
 * (IPv6 in brackets; a comma-separated list uses its first entry). The
 * extension "unix:/path" names a local silkd socket: a sandbox handle then
 * talks to that silkd directly (a jail's socket, tests) and control-plane
 * calls fail with SBX_E_UNSUPPORTED. Over https:// the control plane uses
 * libcurl (HTTP/1.1 only) and the upgrade runs over OpenSSL with ALPN
 * forced to http/1.1.
 *
 * Errors follow sandbox/error.h. Three kinds are SBX_E_REMOTE, told apart by
 * err->detail (see sbx_client_error_kind):
 *   API error    the server answered an HTTP error: detail = the status
 *                (100..599), msg = "<verb>: <status>: <error text>";
 *   silkd error  an agent verb failed: detail = the sbx_wire_error_kind
 *                (0..3), msg = "<kind>: <message>";
 *   exit error   sbx_sandbox_run_check saw a non-zero exit code: detail =
 *                SBX_CLIENT_EXIT_DETAIL(code).
 * Network failures are SBX_E_OS / SBX_E_TIMEOUT; a malformed answer is
 * SBX_E_PROTO or SBX_E_PARSE.
 *
 * Thread safety: an sbx_client may be shared by threads; its control-plane
 * calls are serialized internally. An sbx_sandbox may also be shared: each
 * verb takes a connection of its own (from the parked set or a fresh dial),
 * so verbs on one handle run concurrently (this is how a Ctrl-C handler
 * kills a running exec). An sbx_pty or sbx_transfer belongs to one thread.
 * A handle must outlive its ptys and transfers, and a client its handles.
 */
#ifndef SANDBOX_CLIENT_H
#define SANDBOX_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sandbox/agent.h>
#include <sandbox/core.h>
#include <sandbox/error.h>
#include <sandbox/wire.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- addresses and header values ---- */
#define SBX_ADDR_HOST_MAX 256
typedef struct sbx_addr {
  char scheme[8]; /* "http", "https" or "unix" */
  char host[SBX_ADDR_HOST_MAX]; /* without brackets; the socket path for unix */
  uint16_t port;
} sbx_addr;

/* Parse an address of §9.1. A bare host:port takes the scheme of `inherit`
 * (http when NULL), so a redirect keeps the entry's scheme. */
int sbx_addr_parse(const char *s, const sbx_addr *inherit, sbx_addr *out, sbx_error *err);
/* "http://host:port" ([] around IPv6); "unix:/path" for unix. */
void sbx_addr_origin(const sbx_addr *a, char *buf, size_t n);

/* Ids and tokens go into request lines and headers: refuse CR, LF and NUL
 * (len counts every byte, so an embedded NUL is seen) and empty values. */
int sbx_client_check_header_value(const char *what, const char *s, size_t len, sbx_error *err);

/* ---- typed errors ---- */
#define SBX_CLIENT_EXIT_BASE 0x10000
#define SBX_CLIENT_EXIT_DETAIL(code) (SBX_CLIENT_EXIT_BASE + 256 + (code))
typedef enum {
  SBX_CLIENT_ERR_NONE = 0,
  SBX_CLIENT_ERR_API,   /* HTTP status in err->detail */
  SBX_CLIENT_ERR_SILKD, /* sbx_wire_error_kind in err->detail */
  SBX_CLIENT_ERR_EXIT,  /* sbx_client_error_exit_code() */
  SBX_CLIENT_ERR_OTHER, /* local, network or protocol failure */
} sbx_client_err_kind;
sbx_client_err_kind sbx_client_error_kind(const sbx_error *err);
int sbx_client_error_exit_code(const sbx_error *err);

/* ---- option structs ----
 * Every struct the caller fills for a call starts with struct_size, which
 * its SBX_*_INIT(...) macro sets to the size the caller is compiled with:
 *   sbx_exec_opts o = SBX_EXEC_OPTS_INIT(.argv = argv, .cwd = "/tmp");
 * The library reads only that many bytes, so a program built against these
 * headers keeps working with a later libsandbox.so.0 whose structs have
 * grown; a struct left without its size is refused (SBX_E_INVAL). Fields
 * are only ever appended, and a new field's zero value is its default.
 * See docs/client.md, "Option structs and the ABI". */

/* ---- node client ---- */
typedef struct sbx_client sbx_client;

typedef struct sbx_client_opts {
  size_t struct_size;     /* SBX_CLIENT_OPTS_INIT */
  const char *addr;       /* entry node; NULL = "127.0.0.1:7777" */
  const char *token;      /* node token (root or tenant); NULL = none (open mode) */
  int connect_timeout_ms; /* TCP (and TLS) connect; 0 = 10 s */
  int request_timeout_ms; /* control-plane requests; 0 = 30 s */
  int claim_timeout_ms;   /* claims (a cold boot may take 90 s); 0 = 180 s */
  int agent_timeout_ms;   /* longest silence on an agent connection; 0 = none */
  const char *tls_ca_file; /* https: CA bundle to trust; NULL = the system's */
  bool tls_insecure;       /* https: skip certificate verification (tests only) */
} sbx_client_opts;
#define SBX_CLIENT_OPTS_INIT(...) {.struct_size = sizeof(sbx_client_opts), __VA_ARGS__}

int sbx_client_new(const sbx_client_opts *opts, sbx_client **out, sbx_error *err);
void sbx_client_free(sbx_client *c);
const sbx_addr *sbx_client_entry(const sbx_client *c);

typedef struct sbx_client_pool_key {
  char template_[256];
  char net[32];
  char size[32];
} sbx_client_pool_key;

typedef struct sbx_claim_opts {
  size_t struct_size;    /* SBX_CLAIM_OPTS_INIT */
  const char *template_; /* required */
  const char *size;      /* NULL = server default (small) */
  const char *net;       /* NULL = none */
  int64_t ttl_seconds;   /* 0 = server default (300) */
  const char *claim_ref; /* NULL = none */
  bool no_redirect;
} sbx_claim_opts;
#define SBX_CLAIM_OPTS_INIT(...) {.struct_size = sizeof(sbx_claim_opts), __VA_ARGS__}


typedef struct sbx_sandbox sbx_sandbox;

/* POST /v1/claim, following redirects by §9.2. */
int sbx_client_claim(sbx_client *c, const sbx_claim_opts *opts, sbx_sandbox **out, sbx_error *err);
/* Bind a handle to a known sandbox. owner = NULL uses the entry node. */
int sbx_client_attach(sbx_client *c, const char *id, const char *token, const char *owner, sbx_sandbox **out,
                      sbx_error *err);
/* Find the owner (§9.4: the entry node, then its peers) and bind a handle. */
int sbx_client_lookup(sbx_client *c, const char *id, const char *token, sbx_sandbox **out, sbx_error *err);

/* Control-plane answers are also kept as JSON text (*json, sbx_free it) for
 * callers that print them; pass NULL when not wanted. */
typedef struct sbx_sandbox_row {
  char id[64];
  sbx_client_pool_key key;
  char deadline[64];
  char claimed_at[64];
  bool hibernated;
  bool archived;
  char from_checkpoint[64];
  char claim_ref[260];
  char token[128]; /* only from sbx_client_sandbox_info with the api_token */
} sbx_sandbox_row;

/* GET /v1/sandboxes[?claim_ref=]. *rows is an sbx_malloc'd array. */
int sbx_client_sandboxes(sbx_client *c, const char *claim_ref, sbx_sandbox_row **rows, size_t *n, char **json,
                         sbx_error *err);
/* GET /v1/sandboxes/{id} (root). */
int sbx_client_sandbox_info(sbx_client *c, const char *id, sbx_sandbox_row *row, char **json, sbx_error *err);

typedef struct sbx_pool_state {
  sbx_client_pool_key key;
  int64_t warm, refilling, target;
  bool golden;
} sbx_pool_state;
typedef struct sbx_node_info {
  sbx_pool_state *pools;
  size_t npools;
  int64_t claimed, hibernated, archived;
  bool draining;
  bool at_capacity;
  char at_capacity_reason[256];
  char *json; /* the whole answer */
} sbx_node_info;
void sbx_node_info_free(sbx_node_info *info);

/* GET /v1/info (root). */
int sbx_client_info(sbx_client *c, sbx_node_info *out, sbx_error *err);

/* PUT /v1/pools (root). Integers < 0 are left out of the request. */
typedef struct sbx_pool_spec {
  size_t struct_size; /* SBX_POOL_SPEC_INIT; the array's stride */
  const char *template_;
  const char *net;  /* NULL = left out */
  const char *size; /* NULL = left out */
  int64_t warm, warm_max, idle_hibernate_seconds, archive_after_seconds, archive_delete_after_seconds;
} sbx_pool_spec;
/* The integers start at -1 (left out): set them after, not in the macro. */
#define SBX_POOL_SPEC_INIT(...)                                                                            \
  {.struct_size = sizeof(sbx_pool_spec), .warm = -1, .warm_max = -1, .idle_hibernate_seconds = -1,         \
   .archive_after_seconds = -1, .archive_delete_after_seconds = -1, __VA_ARGS__}
int sbx_client_set_pools(sbx_client *c, const sbx_pool_spec *pools, size_t n, sbx_node_info *out, sbx_error *err);
/* POST /v1/drain (on = true) or DELETE /v1/drain. out may be NULL. */
int sbx_client_drain(sbx_client *c, bool on, sbx_node_info *out, sbx_error *err);

/* ---- sandbox handle: control plane ---- */
void sbx_sandbox_free(sbx_sandbox *s); /* closes parked connections; does not release */
const char *sbx_sandbox_id(const sbx_sandbox *s);
const char *sbx_sandbox_token(const sbx_sandbox *s);
const char *sbx_sandbox_owner(const sbx_sandbox *s); /* origin of the owner node */
const char *sbx_sandbox_deadline(const sbx_sandbox *s); /* "" when unknown */

/* POST …/release; a 404 counts as success (§4.3). Parked connections are
 * closed first. */
int sbx_sandbox_release(sbx_sandbox *s, sbx_error *err);
/* POST …/renew; the granted deadline becomes sbx_sandbox_deadline. */
int sbx_sandbox_renew(sbx_sandbox *s, int64_t ttl_seconds, sbx_error *err);
/* Lifecycle verbs: a server without them answers an API error (404, 501). */
int sbx_sandbox_hibernate(sbx_sandbox *s, sbx_error *err);
int sbx_sandbox_wake(sbx_sandbox *s, sbx_error *err);

/* ---- lifecycle: fork, checkpoints, branch, promote (docs/client.md) ----
 * What survives is the node driver's to say: each answer carries "keeps"
 * ("memory" or "filesystem"); with the jail, fork children, branches and
 * promoted templates start fresh processes on a copy of the files (no
 * session carries over), while hibernate keeps processes and memory. */
typedef struct sbx_fork_opts {
  size_t struct_size;           /* SBX_FORK_OPTS_INIT */
  int count;                    /* children, 1..the node's max_fork_count; 0 = 1 */
  int64_t ttl_seconds;          /* lease of each child; 0 = server default (300) */
  const char *claim_ref_prefix; /* child i gets claim_ref prefix + i; NULL = none */
} sbx_fork_opts;
#define SBX_FORK_OPTS_INIT(...) {.struct_size = sizeof(sbx_fork_opts), __VA_ARGS__}
/* POST …/fork: all children or none. *children is an sbx_malloc'd array of
 * *n handles (free each, then the array). */
int sbx_sandbox_fork(sbx_sandbox *s, const sbx_fork_opts *opts, sbx_sandbox ***children, size_t *n, char **json,
                     sbx_error *err);

typedef struct sbx_checkpoint {
  char id[64];
  char name[128];
  char sandbox_id[64];
  sbx_client_pool_key key;
  char tenant[128];
  char created_at[64];
} sbx_checkpoint;
/* POST …/checkpoint (name may be NULL); the source keeps running. */
int sbx_sandbox_checkpoint(sbx_sandbox *s, const char *name, sbx_checkpoint *out, char **json, sbx_error *err);
/* GET /v1/checkpoints, newest first; *list is an sbx_malloc'd array. */
int sbx_client_checkpoints(sbx_client *c, sbx_checkpoint **list, size_t *n, char **json, sbx_error *err);
/* DELETE /v1/checkpoints/{id}. */
int sbx_client_checkpoint_delete(sbx_client *c, const char *id, sbx_error *err);
typedef struct sbx_branch_opts {
  size_t struct_size;  /* SBX_BRANCH_OPTS_INIT */
  int64_t ttl_seconds; /* 0 = server default (300) */
} sbx_branch_opts;
#define SBX_BRANCH_OPTS_INIT(...) {.struct_size = sizeof(sbx_branch_opts), __VA_ARGS__}
/* POST /v1/checkpoints/{id}/claim: a new sandbox from the checkpoint. */
int sbx_client_branch(sbx_client *c, const char *checkpoint_id, const sbx_branch_opts *opts, sbx_sandbox **out,
                      char **json, sbx_error *err);
/* POST …/promote: the sandbox becomes template template_ (same net and
 * size); digest gets its "sha256:…" content digest (80 bytes) when given. */
int sbx_sandbox_promote(sbx_sandbox *s, const char *template_, char *digest, size_t digest_len, char **json,
                        sbx_error *err);
/* DELETE /v1/templates (net, size NULL = none, small). */
int sbx_client_template_delete(sbx_client *c, const char *template_, const char *net, const char *size,
                               sbx_error *err);

/* Close the parked connections (before a hibernate, or to measure a cold
 * dial); the next verb dials afresh. */
void sbx_sandbox_close_idle(sbx_sandbox *s);

/* Connections dialled for this handle so far (parked ones reused are not
 * counted): lets callers and tests see reuse happen. */
uint64_t sbx_sandbox_dials(const sbx_sandbox *s);

/* ---- sandbox handle: processes ---- */
typedef struct sbx_exec_opts {
  size_t struct_size;      /* SBX_EXEC_OPTS_INIT */
  const char *const *argv; /* NULL-terminated, non-empty */
  const char *cwd;         /* NULL = silkd's default */
  const char *const *env;  /* NULL-terminated "KEY=VALUE" list, or NULL */
  const char *user;        /* NULL = root */
  const char *session;     /* run inside this session (§5.4) */
} sbx_exec_opts;
#define SBX_EXEC_OPTS_INIT(...) {.struct_size = sizeof(sbx_exec_opts), __VA_ARGS__}

/* Foreground exec with streaming output and stdin (io as for
 * sbx_agent_exec; io may be NULL). *exit_code as silkd reports it. */
int sbx_sandbox_exec(sbx_sandbox *s, const sbx_exec_opts *opts, const sbx_agent_exec_io *io, int *exit_code,
                     sbx_error *err);
/* Run to completion capturing output into the buffers (either may be NULL;
 * each bounded by its cap). */
int sbx_sandbox_run(sbx_sandbox *s, const sbx_exec_opts *opts, sbx_buf *out, sbx_buf *errout, int *exit_code,
                    sbx_error *err);
/* As sbx_sandbox_run, but a non-zero exit is an exit error. */
int sbx_sandbox_run_check(sbx_sandbox *s, const sbx_exec_opts *opts, sbx_buf *out, sbx_buf *errout,
                          sbx_error *err);
/* Detached exec: returns once started, with the pid. */
int sbx_sandbox_spawn(sbx_sandbox *s, const sbx_exec_opts *opts, uint32_t *pid, sbx_error *err);
/* The process table as a `procs` frame (free with sbx_wire_resp_free). */
int sbx_sandbox_ps(sbx_sandbox *s, sbx_wire_resp *out, sbx_error *err);
/* signal 0 = SIGKILL. */
int sbx_sandbox_kill(sbx_sandbox *s, uint32_t pid, int signal, sbx_error *err);
/* Retained output (logs) or retained + live output (attach); *exit_code is
 * INT32_MIN when the process has not exited. */
int sbx_sandbox_logs(sbx_sandbox *s, uint32_t pid, const sbx_agent_exec_io *io, int *exit_code, sbx_error *err);
int sbx_sandbox_attach(sbx_sandbox *s, uint32_t pid, const sbx_agent_exec_io *io, int *exit_code,
                       sbx_error *err);

/* Sessions (persistent shells). id = NULL lets silkd choose; the id is
 * written to out_id. env as in sbx_exec_opts. */
int sbx_sandbox_session_create(sbx_sandbox *s, const char *id, const char *cwd, const char *const *env,
                               char *out_id, size_t out_len, sbx_error *err);
int sbx_sandbox_session_list(sbx_sandbox *s, sbx_wire_resp *out, sbx_error *err);
int sbx_sandbox_session_rm(sbx_sandbox *s, const char *id, sbx_error *err);

/* ---- sandbox handle: files ---- */
int sbx_sandbox_read_file(sbx_sandbox *s, const char *path, sbx_buf *out, sbx_error *err);
int sbx_sandbox_read_file_fd(sbx_sandbox *s, const char *path, int fd, sbx_error *err);
/* Atomic on the guest (temp file + rename); mode < 0 keeps silkd's rule. */
int sbx_sandbox_write_file(sbx_sandbox *s, const char *path, const void *data, size_t n, int mode,
                           sbx_error *err);
int sbx_sandbox_write_file_fd(sbx_sandbox *s, const char *path, int fd, int mode, sbx_error *err);
int sbx_sandbox_list_dir(sbx_sandbox *s, const char *path,
                         int (*on_entry)(void *ud, const sbx_wire_dir_entry *e), void *ud, sbx_error *err);
int sbx_sandbox_stat(sbx_sandbox *s, const char *path, sbx_wire_file_info *out, sbx_error *err);
int sbx_sandbox_mkdir(sbx_sandbox *s, const char *path, bool parents, sbx_error *err);
int sbx_sandbox_remove(sbx_sandbox *s, const char *path, bool recursive, sbx_error *err);
int sbx_sandbox_rename(sbx_sandbox *s, const char *from, const char *to, sbx_error *err);

/* Search, replace and watch (§5.7, §5.8), options and callbacks as for
 * sbx_agent_find, sbx_agent_replace and sbx_agent_watch (agent.h). A watch
 * holds a connection of its own until on_event stops it. */
int sbx_sandbox_find(sbx_sandbox *s, const sbx_find_opts *opts, sbx_error *err);
int sbx_sandbox_replace(sbx_sandbox *s, const sbx_replace_opts *opts, sbx_error *err);
int sbx_sandbox_watch(sbx_sandbox *s, const sbx_watch_opts *opts, sbx_error *err);

/* Tar streams (§5.6): push extracts an uncompressed tar read from fd into
 * dest; pull writes the tar of path (rooted at its basename) to fd. */
int sbx_sandbox_push(sbx_sandbox *s, const char *dest, int fd, sbx_error *err);
int sbx_sandbox_pull(sbx_sandbox *s, const char *path, int fd, sbx_error *err);

/* Streaming transfers, for callers producing or consuming bytes
 * themselves. An upload (fs_push or fs_write) takes writes then finish; a
 * download (fs_pull or fs_read) is read until it returns 0. Either ends by
 * sbx_transfer_close, which also aborts an unfinished one. */
typedef struct sbx_transfer sbx_transfer;
int sbx_sandbox_push_begin(sbx_sandbox *s, const char *dest, sbx_transfer **out, sbx_error *err);
int sbx_sandbox_write_begin(sbx_sandbox *s, const char *path, int mode, sbx_transfer **out, sbx_error *err);
int sbx_transfer_write(sbx_transfer *t, const void *data, size_t n, sbx_error *err);
int sbx_transfer_finish(sbx_transfer *t, sbx_error *err);
int sbx_sandbox_pull_begin(sbx_sandbox *s, const char *path, sbx_transfer **out, sbx_error *err);
int sbx_sandbox_read_begin(sbx_sandbox *s, const char *path, sbx_transfer **out, sbx_error *err);
/* 1 = *data and *n hold the next piece (valid until the next call), 0 = end. */
int sbx_transfer_read(sbx_transfer *t, const void **data, size_t *n, sbx_error *err);
void sbx_transfer_close(sbx_transfer *t);

/* Trees through tar (libarchive, built and parsed here): copy a local file
 * or directory into the guest directory dest_dir, keeping modes, symlinks
 * and empty directories; and the reverse. Local extraction refuses
 * absolute names and `..`. */
int sbx_sandbox_push_path(sbx_sandbox *s, const char *local_path, const char *dest_dir, sbx_error *err);
int sbx_sandbox_pull_path(sbx_sandbox *s, const char *remote_path, const char *local_dir, sbx_error *err);

/* ---- sandbox handle: terminals and ports ---- */
typedef struct sbx_pty sbx_pty;
typedef struct sbx_pty_opts {
  size_t struct_size; /* SBX_PTY_OPTS_INIT */
  uint16_t cols, rows; /* 0 = 80 x 24 */
  const char *cwd;
  const char *const *env;
  const char *user;
} sbx_pty_opts;
#define SBX_PTY_OPTS_INIT(...) {.struct_size = sizeof(sbx_pty_opts), __VA_ARGS__}
/* pty_open on a connection of its own (never parked). */
int sbx_sandbox_open_pty(sbx_sandbox *s, const sbx_pty_opts *opts, sbx_pty **out, sbx_error *err);
uint32_t sbx_pty_pid(const sbx_pty *p);
/* The connection fd, to poll for readability. Frames may already be buffered
 * (output often arrives with `started`): call sbx_pty_read(..., 0, ...) before
 * each poll, or poll can sleep on output that was already received. */
int sbx_pty_fd(const sbx_pty *p);
int sbx_pty_write(sbx_pty *p, const void *data, size_t n, sbx_error *err);
/* Deliver the output already available (timeout_ms 0) or within
 * timeout_ms. Returns 1 when the shell exited (*exit_code set), else 0. */
int sbx_pty_read(sbx_pty *p, int (*on_output)(void *ud, const void *data, size_t n), void *ud, int timeout_ms,
                 int *exit_code, sbx_error *err);
/* pty_resize on another connection of the handle. */
int sbx_pty_resize(sbx_pty *p, uint16_t cols, uint16_t rows, sbx_error *err);
void sbx_pty_close(sbx_pty *p); /* ends the shell (silkd kills it) */

/* A raw TCP stream to 127.0.0.1:port in the guest (§4.22 upgrade). *fd is
 * the caller's; bytes that arrived with the 101 are appended to pending. */
int sbx_sandbox_dial_port(sbx_sandbox *s, uint16_t port, int *fd, sbx_buf *pending, sbx_error *err);

/* ---- sandbox handle: git (silkd-wire §5.11) ----
 * The guest's git, as root. A failed git command is an SBX_E_REMOTE silkd
 * error of kind internal carrying git's message; clone, push and pull on a
 * sandbox without network answer kind unimplemented. auth (a bearer token,
 * optional) reaches git only through its environment. */
typedef struct sbx_git_clone_opts {
  size_t struct_size; /* SBX_GIT_CLONE_OPTS_INIT */
  const char *url;    /* required; ext:: and fd:: are refused */
  const char *path;   /* required; relative to silkd's working directory */
  const char *branch; /* NULL = the remote's HEAD */
  uint32_t depth;     /* 0 = full history */
  const char *auth;   /* NULL = none */
} sbx_git_clone_opts;
#define SBX_GIT_CLONE_OPTS_INIT(...) {.struct_size = sizeof(sbx_git_clone_opts), __VA_ARGS__}
int sbx_sandbox_git_clone(sbx_sandbox *s, const sbx_git_clone_opts *opts, sbx_error *err);
/* A git_status_result frame in *out (free with sbx_wire_resp_free). */
int sbx_sandbox_git_status(sbx_sandbox *s, const char *path, sbx_wire_resp *out, sbx_error *err);
int sbx_sandbox_git_add(sbx_sandbox *s, const char *path, const char *const *files, sbx_error *err);
/* author is "Name <email>" (also the committer); the hash goes to hash. */
int sbx_sandbox_git_commit(sbx_sandbox *s, const char *path, const char *message, const char *author, char *hash,
                           size_t hash_len, sbx_error *err);
int sbx_sandbox_git_push(sbx_sandbox *s, const char *path, const char *auth, sbx_error *err);
int sbx_sandbox_git_pull(sbx_sandbox *s, const char *path, const char *auth, sbx_error *err);
/* list fills *out with a git_branches frame (out may be NULL); create,
 * delete (forced) and checkout need name, which may not start with '-'. */
int sbx_sandbox_git_branch(sbx_sandbox *s, const char *path, sbx_wire_git_branch_action action, const char *name,
                           sbx_wire_resp *out, sbx_error *err);

/* ---- sandbox handle: language servers (silkd-wire §5.12) ---- */
typedef struct sbx_lsp sbx_lsp;
typedef struct sbx_lsp_opts {
  size_t struct_size;   /* SBX_LSP_OPTS_INIT */
  const char *language; /* a manifest name under the guest's lsp.d, e.g. "python" */
  const char *root;     /* the server's working directory; NULL = silkd's */
} sbx_lsp_opts;
#define SBX_LSP_OPTS_INIT(...) {.struct_size = sizeof(sbx_lsp_opts), __VA_ARGS__}
/* Start the server and attach to it on a connection of its own: the
 * stream then carries the server's stdio byte for byte (the caller writes
 * and reads the LSP Content-Length framing). */
int sbx_sandbox_lsp_open(sbx_sandbox *s, const sbx_lsp_opts *opts, sbx_lsp **out, sbx_error *err);
const char *sbx_lsp_id(const sbx_lsp *l);
/* The connection fd, to poll; call sbx_lsp_read(..., 0, ...) before each
 * poll, frames may already be buffered. */
int sbx_lsp_fd(const sbx_lsp *l);
int sbx_lsp_write(sbx_lsp *l, const void *data, size_t n, sbx_error *err);
/* Close the server's stdin (data_end); its output still arrives. */
int sbx_lsp_close_input(sbx_lsp *l, sbx_error *err);
/* Deliver what the server wrote (on_data per piece; a non-zero return
 * fails the read with it), available now (timeout_ms 0) or within
 * timeout_ms. Returns 1 once the server's output ended, else 0. */
int sbx_lsp_read(sbx_lsp *l, int (*on_data)(void *ud, const void *data, size_t n), void *ud, int timeout_ms,
                 sbx_error *err);
/* Close the stream: silkd kills the server. */
void sbx_lsp_close(sbx_lsp *l);
/* Kill a server by id from any handle (an attached stream then ends). */
int sbx_sandbox_lsp_stop(sbx_sandbox *s, const char *id, sbx_error *err);

#ifdef __cplusplus
}
#endif
#endif
