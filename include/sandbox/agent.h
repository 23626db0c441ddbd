/* sandbox/agent.h - a client of silkd over one connected stream.
 *
 * The stream can be anything that carries the wire protocol: a jail's Unix
 * socket (sbx_sandbox_connect), a sandboxd relay after `Upgrade: silkd`, a
 * VM's forwarded port. RPCs run back to back on it (proto 2). An sbx_agent
 * belongs to one thread at a time.
 *
 * Errors: an `error` frame from silkd becomes SBX_E_REMOTE with err->detail =
 * the sbx_wire_error_kind and err->msg = its message; the connection stays
 * usable. A broken stream or a protocol violation makes the connection
 * unusable (sbx_agent_usable() == false): close it and dial again.
 */
#ifndef SANDBOX_AGENT_H
#define SANDBOX_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sandbox/core.h>
#include <sandbox/error.h>
#include <sandbox/wire.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sbx_agent sbx_agent;

/* Takes ownership of fd (closed by sbx_agent_close, also on failure). */
int sbx_agent_open(int fd, sbx_agent **out, sbx_error *err);
void sbx_agent_close(sbx_agent *a);
int sbx_agent_fd(const sbx_agent *a);
/* Longest wait for the next frame; -1 = forever (the default). A timeout
 * fails the call with SBX_E_TIMEOUT and leaves the connection unusable. */
void sbx_agent_set_timeout(sbx_agent *a, int timeout_ms);
bool sbx_agent_usable(const sbx_agent *a);

/* ---- frames ---- */
int sbx_agent_send(sbx_agent *a, const sbx_wire_req *req, sbx_error *err);
int sbx_agent_send_bulk(sbx_agent *a, sbx_wire_bulk kind, const void *data, size_t n, sbx_error *err);
/* The next response frame (free it with sbx_wire_resp_free). An error frame
 * is returned as a frame here, not as a failure. */
int sbx_agent_recv(sbx_agent *a, sbx_wire_resp *out, sbx_error *err);

/* ---- RPCs ---- */
int sbx_agent_info(sbx_agent *a, sbx_resp_info *out, char *version, size_t version_len, sbx_error *err);

typedef enum { SBX_STREAM_STDOUT = 1, SBX_STREAM_STDERR = 2 } sbx_stream;

typedef struct sbx_agent_exec_io {
  /* Called for every output piece; a non-zero return stops reading and
   * fails the exec with that code (the connection is then dropped). */
  int (*on_output)(void *ud, sbx_stream stream, const void *data, size_t n);
  void *ud;
  /* Input: a buffer sent whole, or an fd read until EOF (-1 = none). Either
   * way stdin_close follows, so the child sees EOF. */
  const void *stdin_data;
  size_t stdin_len;
  int stdin_fd;
  /* Called once with the pid from `started` (e.g. to arm a Ctrl-C kill). */
  void (*on_started)(void *ud, uint32_t pid);
} sbx_agent_exec_io;

/* Foreground exec: started -> output -> exit. *exit_code as silkd reports it
 * (128 + signal when killed). */
int sbx_agent_exec(sbx_agent *a, const sbx_req_exec *req, const sbx_agent_exec_io *io, int *exit_code,
                   sbx_error *err);
/* Run argv to completion capturing stdout and stderr (each bounded by its
 * buffer's cap; a full buffer fails with SBX_E_TOOBIG). */
int sbx_agent_run(sbx_agent *a, const char *const *argv, sbx_buf *out, sbx_buf *errout, int *exit_code,
                  sbx_error *err);
int sbx_agent_kill(sbx_agent *a, uint32_t pid, int signal, sbx_error *err);
int sbx_agent_read_file(sbx_agent *a, const char *path, sbx_buf *out, sbx_error *err);
/* Atomic on the guest side (temp + rename); mode < 0 keeps silkd's default. */
int sbx_agent_write_file(sbx_agent *a, const char *path, const void *data, size_t n, int mode, sbx_error *err);
int sbx_agent_stat(sbx_agent *a, const char *path, sbx_wire_file_info *out, sbx_error *err);

/* ---- more verbs (libsandbox/agent/verbs.c) ---- */

/* As sbx_agent_open, with bytes already read from fd that belong to the
 * stream (what followed a `101` response head). */
int sbx_agent_open_prefixed(int fd, const void *prefix, size_t n, sbx_agent **out, sbx_error *err);
/* True when the connection sits between RPCs with nothing buffered, so it
 * may be parked for reuse (§2.7). A stray buffered frame makes it unusable. */
bool sbx_agent_idle(sbx_agent *a);
/* The next response frame if one arrives within timeout_ms (0 = only what
 * is already readable): 1 with *out filled, 0 if none yet (the connection
 * stays usable), <0 on failure. */
int sbx_agent_poll_recv(sbx_agent *a, sbx_wire_resp *out, int timeout_ms, sbx_error *err);

/* Single-reply verbs. ps and session_list fill *out (free it with
 * sbx_wire_resp_free); the others only report success. */
int sbx_agent_ps(sbx_agent *a, sbx_wire_resp *out, sbx_error *err);
int sbx_agent_session_create(sbx_agent *a, const sbx_req_session_create *req, char *id, size_t id_len,
                             sbx_error *err);
int sbx_agent_session_list(sbx_agent *a, sbx_wire_resp *out, sbx_error *err);
int sbx_agent_session_rm(sbx_agent *a, const char *id, sbx_error *err);
int sbx_agent_mkdir(sbx_agent *a, const char *path, bool parents, sbx_error *err);
int sbx_agent_remove(sbx_agent *a, const char *path, bool recursive, sbx_error *err);
int sbx_agent_rename(sbx_agent *a, const char *from, const char *to, sbx_error *err);
int sbx_agent_pty_resize(sbx_agent *a, uint32_t pid, uint16_t cols, uint16_t rows, sbx_error *err);

/* fs_list: on_entry is called for every entry; a non-zero return stops and
 * fails with that code (the connection is then dropped). */
int sbx_agent_list_dir(sbx_agent *a, const char *path,
                       int (*on_entry)(void *ud, const sbx_wire_dir_entry *e), void *ud, sbx_error *err);

/* attach and logs: output through on_output; *exit_code is the process's
 * code, or INT32_MIN when the RPC ended without one (logs of a running
 * process, attach whose stream ended). */
int sbx_agent_attach(sbx_agent *a, uint32_t pid, const sbx_agent_exec_io *io, int *exit_code, sbx_error *err);
int sbx_agent_logs(sbx_agent *a, uint32_t pid, const sbx_agent_exec_io *io, int *exit_code, sbx_error *err);

/* Downloads (fs_read, fs_pull): send the request with sbx_agent_send, then
 * call sbx_agent_next_data until it returns 0 (`done`). 1 = *data and *n hold a
 * piece valid until the next call. An error frame ends it (SBX_E_REMOTE);
 * a partial download must then be discarded. */
int sbx_agent_next_data(sbx_agent *a, const void **data, size_t *n, sbx_error *err);

/* Uploads (fs_write, fs_push): send the request with sbx_agent_send, then
 * any number of sbx_agent_upload_write, then sbx_agent_upload_end, which
 * sends data_end and waits for `done`. */
int sbx_agent_upload_write(sbx_agent *a, const void *data, size_t n, sbx_error *err);
int sbx_agent_upload_end(sbx_agent *a, sbx_error *err);

/* ---- search, replace and watch (§5.7, §5.8; libsandbox/agent/search.c) ----
 * Results stream through the callbacks as the frames arrive. A callback's
 * non-zero return stops the call: it then returns that value when negative,
 * 0 when positive, and the connection is unusable (the rest of the stream
 * is not read); close it. */
typedef struct sbx_find_opts {
  size_t struct_size;  /* SBX_FIND_OPTS_INIT */
  const char *path;    /* root directory of the search */
  const char *pattern; /* regex (PCRE2, UTF + UCP), unanchored within each line */
  const char *glob;    /* base-name filter: `*`, `?`, the rest literal; NULL = every file */
  int (*on_match)(void *ud, const sbx_resp_match *m);
  void *ud;
} sbx_find_opts;
#define SBX_FIND_OPTS_INIT(...) {.struct_size = sizeof(sbx_find_opts), __VA_ARGS__}

typedef struct sbx_replace_opts {
  size_t struct_size;       /* SBX_REPLACE_OPTS_INIT */
  const char *const *files; /* rewritten in this order, each atomically */
  size_t nfiles;
  const char *pattern;
  const char *replacement;  /* $1, $name, ${name}, $$ */
  int (*on_replaced)(void *ud, const sbx_resp_replaced *r);
  void *ud;
} sbx_replace_opts;
#define SBX_REPLACE_OPTS_INIT(...) {.struct_size = sizeof(sbx_replace_opts), __VA_ARGS__}

typedef struct sbx_watch_opts {
  size_t struct_size; /* SBX_WATCH_OPTS_INIT */
  const char *path;
  bool recursive;            /* the whole tree, directories created later included */
  void (*on_ready)(void *ud); /* the watch is armed: every later change is reported */
  int (*on_event)(void *ud, const sbx_resp_event *ev);
  void *ud;
} sbx_watch_opts;
#define SBX_WATCH_OPTS_INIT(...) {.struct_size = sizeof(sbx_watch_opts), __VA_ARGS__}

/* fs_find to its `done`. */
int sbx_agent_find(sbx_agent *a, const sbx_find_opts *opts, sbx_error *err);
/* fs_replace to its `done`; an error after some files leaves those
 * rewritten (each file is old or new, the list is not atomic). */
int sbx_agent_replace(sbx_agent *a, const sbx_replace_opts *opts, sbx_error *err);
/* fs_watch: runs until on_event returns non-zero (the usual end: the watch
 * is then cancelled by closing the connection) or silkd ends it with an
 * error (an overflow, SBX_E_REMOTE). */
int sbx_agent_watch(sbx_agent *a, const sbx_watch_opts *opts, sbx_error *err);
/* ---- git and language servers (libsandbox/agent/git_lsp.c) ----
 * Single-reply verbs. git_status and git_branch (list) keep their reply in
 * *out (free it with sbx_wire_resp_free; NULL = not wanted); a failed git
 * command is an SBX_E_REMOTE "internal" error holding git's message. */
int sbx_agent_git_clone(sbx_agent *a, const sbx_req_git_clone *req, sbx_error *err);
int sbx_agent_git_status(sbx_agent *a, const char *path, sbx_wire_resp *out, sbx_error *err);
/* files: NULL-terminated pathspecs, passed after `--` */
int sbx_agent_git_add(sbx_agent *a, const char *path, const char *const *files, sbx_error *err);
/* The new commit's hash goes to hash (41 bytes hold a SHA-1, 65 a SHA-256). */
int sbx_agent_git_commit(sbx_agent *a, const sbx_req_git_commit *req, char *hash, size_t hash_len, sbx_error *err);
int sbx_agent_git_push(sbx_agent *a, const char *path, const char *auth, sbx_error *err);
int sbx_agent_git_pull(sbx_agent *a, const char *path, const char *auth, sbx_error *err);
int sbx_agent_git_branch(sbx_agent *a, const sbx_req_git_branch *req, sbx_wire_resp *out, sbx_error *err);
/* lsp_start: the server id ("lsp-<n>") goes to id. */
int sbx_agent_lsp_start(sbx_agent *a, const char *language, const char *root, char *id, size_t id_len,
                        sbx_error *err);
int sbx_agent_lsp_stop(sbx_agent *a, const char *id, sbx_error *err);
/* lsp_request: returns once `ready` arrived. The connection then carries
 * the server's stdio: send with sbx_agent_send_bulk(SBX_BULK_REQ_DATA),
 * end the input with a data_end frame, read with sbx_agent_next_data until
 * 0 (`done`: the server's stdout ended). The server serves this one stream
 * and is killed when it ends, including when the connection closes. */
int sbx_agent_lsp_attach(sbx_agent *a, const char *id, sbx_error *err);

#ifdef __cplusplus
}
#endif
#endif
