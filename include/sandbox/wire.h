/* sandbox/wire.h - the silkd wire codec (v1, proto 2).
 *
 * Frames are single-line JSON objects terminated by LF (spec silkd-wire.md
 * §1). This header gives:
 *   - typed C forms of the 38 request ops and 21 response types;
 *   - an encoder (tag first, absent optionals omitted) into an sbx_buf;
 *   - a decoder (any member order, unknown members ignored, null optional =
 *     absent; missing, mistyped or out-of-range members are errors naming the
 *     member);
 *   - a streaming frame reader with the 8 MiB cap;
 *   - a fast path for bulk frames (data, stdout, stderr, stdin) that moves
 *     base64 straight between wire bytes and the caller's buffer.
 *
 * Decoded messages own their strings in an internal arena: free them with
 * sbx_wire_req_free / sbx_wire_resp_free. Every decode function is
 * re-entrant; a reader or a message belongs to one thread at a time.
 */
#ifndef SANDBOX_WIRE_H
#define SANDBOX_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sandbox/core.h>
#include <sandbox/error.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SBX_WIRE_FRAME_CAP 8388608u          /* bytes, without the LF (§1.4) */
#define SBX_WIRE_MAX_UPLOAD_PAYLOAD 6291432u /* raw bytes in a canonical data/stdin frame */
#define SBX_WIRE_PROTO 2
#define SBX_WIRE_MAX_DEPTH 32 /* JSON nesting accepted by the decoder */

/* ---- enums (order pinned by wire-fixtures/v1/enums.json) ---- */
typedef enum { SBX_ERR_BAD_REQUEST, SBX_ERR_NOT_FOUND, SBX_ERR_UNIMPLEMENTED, SBX_ERR_INTERNAL } sbx_wire_error_kind;
typedef enum { SBX_EVENT_CREATED, SBX_EVENT_MODIFIED, SBX_EVENT_DELETED, SBX_EVENT_RENAMED } sbx_wire_event_kind;
typedef enum { SBX_FILE_FILE, SBX_FILE_DIR, SBX_FILE_SYMLINK, SBX_FILE_OTHER } sbx_wire_file_kind;
typedef enum { SBX_GIT_BRANCH_LIST, SBX_GIT_BRANCH_CREATE, SBX_GIT_BRANCH_DELETE, SBX_GIT_BRANCH_CHECKOUT } sbx_wire_git_branch_action;
typedef enum { SBX_PROC_RUNNING, SBX_PROC_EXITED } sbx_wire_proc_state;

typedef struct sbx_wire_enum {
  const char *name;          /* "error_kind" ... as in enums.json */
  const char *const *values; /* in spec order */
  size_t count;
} sbx_wire_enum;
/* The four enums of enums.json, in file order. */
const sbx_wire_enum *sbx_wire_enums(size_t *count);

/* ---- shared value shapes ---- */
typedef struct {
  const char *key;
  const char *value;
} sbx_wire_kv;

typedef struct {
  sbx_wire_kv *items; /* NULL when absent */
  size_t len;
  bool present;
} sbx_wire_map;

typedef struct {
  const char **items;
  size_t len;
} sbx_wire_strv;

typedef struct {
  uint8_t *ptr;
  size_t len;
} sbx_wire_bytes;

/* ---- requests ---- */
typedef enum sbx_wire_op {
  SBX_OP_INFO,
  SBX_OP_EXEC,
  SBX_OP_PS,
  SBX_OP_KILL,
  SBX_OP_ATTACH,
  SBX_OP_LOGS,
  SBX_OP_SESSION_CREATE,
  SBX_OP_SESSION_LIST,
  SBX_OP_SESSION_RM,
  SBX_OP_FS_WRITE,
  SBX_OP_FS_READ,
  SBX_OP_FS_LIST,
  SBX_OP_FS_STAT,
  SBX_OP_FS_MKDIR,
  SBX_OP_FS_RM,
  SBX_OP_FS_RENAME,
  SBX_OP_FS_PUSH,
  SBX_OP_FS_PULL,
  SBX_OP_FS_FIND,
  SBX_OP_FS_REPLACE,
  SBX_OP_FS_WATCH,
  SBX_OP_PTY_OPEN,
  SBX_OP_PTY_RESIZE,
  SBX_OP_PORT_FORWARD,
  SBX_OP_GIT_CLONE,
  SBX_OP_GIT_STATUS,
  SBX_OP_GIT_ADD,
  SBX_OP_GIT_COMMIT,
  SBX_OP_GIT_PUSH,
  SBX_OP_GIT_PULL,
  SBX_OP_GIT_BRANCH,
  SBX_OP_LSP_START,
  SBX_OP_LSP_REQUEST,
  SBX_OP_LSP_STOP,
  /* continuation frames (§2.4) */
  SBX_OP_STDIN,
  SBX_OP_STDIN_CLOSE,
  SBX_OP_DATA,
  SBX_OP_DATA_END,
  SBX_OP__COUNT
} sbx_wire_op;

/* Optional scalars carry a has_ flag; optional strings are NULL when absent. */
typedef struct { sbx_wire_strv argv; const char *cwd; sbx_wire_map env; const char *user; bool has_detach; bool detach; const char *session; } sbx_req_exec;
typedef struct { uint32_t pid; bool has_signal; int32_t signal; } sbx_req_kill;
typedef struct { uint32_t pid; } sbx_req_pid; /* attach, logs */
typedef struct { const char *id; const char *cwd; sbx_wire_map env; } sbx_req_session_create;
typedef struct { const char *id; } sbx_req_session_rm;
typedef struct { const char *path; bool has_mode; uint32_t mode; } sbx_req_fs_write;
typedef struct { const char *path; } sbx_req_path; /* fs_read, fs_list, fs_stat, fs_pull, git_status */
typedef struct { const char *path; bool has_parents; bool parents; } sbx_req_fs_mkdir;
typedef struct { const char *path; bool has_recursive; bool recursive; } sbx_req_fs_rm;
typedef struct { const char *from; const char *to; } sbx_req_fs_rename;
typedef struct { const char *dest; } sbx_req_fs_push;
typedef struct { const char *path; const char *pattern; const char *glob; } sbx_req_fs_find;
typedef struct { sbx_wire_strv files; const char *pattern; const char *replacement; } sbx_req_fs_replace;
typedef struct { const char *path; bool has_recursive; bool recursive; } sbx_req_fs_watch;
typedef struct { uint16_t cols; uint16_t rows; const char *cwd; sbx_wire_map env; const char *user; } sbx_req_pty_open;
typedef struct { uint32_t pid; uint16_t cols; uint16_t rows; } sbx_req_pty_resize;
typedef struct { uint16_t port; } sbx_req_port_forward;
typedef struct { const char *url; const char *path; const char *branch; bool has_depth; uint32_t depth; const char *auth; } sbx_req_git_clone;
typedef struct { const char *path; sbx_wire_strv files; } sbx_req_git_add;
typedef struct { const char *path; const char *message; const char *author; } sbx_req_git_commit;
typedef struct { const char *path; const char *auth; } sbx_req_git_remote; /* git_push, git_pull */
typedef struct { const char *path; sbx_wire_git_branch_action action; const char *name; } sbx_req_git_branch;
typedef struct { const char *language; const char *root; } sbx_req_lsp_start;
typedef struct { const char *server_id; } sbx_req_lsp_id; /* lsp_request, lsp_stop */
typedef struct { sbx_wire_bytes data; } sbx_req_bytes;    /* stdin, data */

typedef struct sbx_wire_arena sbx_wire_arena;

typedef struct sbx_wire_req {
  sbx_wire_op op;
  /* Name of the first string member holding a NUL (\u0000), or NULL.
   * JSON allows it, but no path, argv, env or name may carry one (§1.6):
   * servers answer bad_request "invalid argument: NUL byte in <field>". */
  const char *nul_field;
  union {
    sbx_req_exec exec;
    sbx_req_kill kill;
    sbx_req_pid attach, logs;
    sbx_req_session_create session_create;
    sbx_req_session_rm session_rm;
    sbx_req_fs_write fs_write;
    sbx_req_path fs_read, fs_list, fs_stat, fs_pull, git_status;
    sbx_req_fs_mkdir fs_mkdir;
    sbx_req_fs_rm fs_rm;
    sbx_req_fs_rename fs_rename;
    sbx_req_fs_push fs_push;
    sbx_req_fs_find fs_find;
    sbx_req_fs_replace fs_replace;
    sbx_req_fs_watch fs_watch;
    sbx_req_pty_open pty_open;
    sbx_req_pty_resize pty_resize;
    sbx_req_port_forward port_forward;
    sbx_req_git_clone git_clone;
    sbx_req_git_add git_add;
    sbx_req_git_commit git_commit;
    sbx_req_git_remote git_push, git_pull;
    sbx_req_git_branch git_branch;
    sbx_req_lsp_start lsp_start;
    sbx_req_lsp_id lsp_request, lsp_stop;
    sbx_req_bytes stdin_, data;
  } u;
  sbx_wire_arena *arena; /* owns decoded strings; NULL for caller-built values */
} sbx_wire_req;

/* ---- responses ---- */
typedef enum sbx_wire_type {
  SBX_RESP_STARTED,
  SBX_RESP_STDOUT,
  SBX_RESP_STDERR,
  SBX_RESP_EXIT,
  SBX_RESP_DONE,
  SBX_RESP_READY,
  SBX_RESP_ERROR,
  SBX_RESP_INFO,
  SBX_RESP_PROCS,
  SBX_RESP_DATA,
  SBX_RESP_ENTRIES,
  SBX_RESP_STAT,
  SBX_RESP_SESSION_CREATED,
  SBX_RESP_LSP_STARTED,
  SBX_RESP_SESSIONS,
  SBX_RESP_MATCH,
  SBX_RESP_REPLACED,
  SBX_RESP_EVENT,
  SBX_RESP_GIT_STATUS_RESULT,
  SBX_RESP_GIT_COMMIT_RESULT,
  SBX_RESP_GIT_BRANCHES,
  SBX_RESP__COUNT
} sbx_wire_type;

typedef struct {
  uint32_t pid;
  sbx_wire_strv argv;
  bool detached;
  sbx_wire_proc_state state;
  bool has_exit_code; /* the encoder emits exit_code iff state == exited */
  int32_t exit_code;
  uint64_t started_at_epoch_secs;
} sbx_wire_proc_info;

typedef struct { const char *name; sbx_wire_file_kind kind; uint64_t size; } sbx_wire_dir_entry;
typedef struct { sbx_wire_file_kind kind; uint64_t size; uint32_t mode; uint64_t mtime_epoch_secs; } sbx_wire_file_info;
typedef struct { const char *path; const char *staged; const char *unstaged; } sbx_wire_git_file;

typedef struct { uint32_t pid; } sbx_resp_started;
typedef struct { sbx_wire_bytes data; } sbx_resp_bytes; /* stdout, stderr, data */
typedef struct { int32_t code; } sbx_resp_exit;
typedef struct { sbx_wire_error_kind kind; const char *message; } sbx_resp_error;
typedef struct { const char *version; uint32_t proto; uint64_t uptime_secs; uint64_t procs; uint64_t sessions; } sbx_resp_info;
typedef struct { sbx_wire_proc_info *items; size_t len; } sbx_resp_procs;
typedef struct { sbx_wire_dir_entry *items; size_t len; } sbx_resp_entries;
typedef struct { sbx_wire_file_info info; } sbx_resp_stat;
typedef struct { const char *id; } sbx_resp_id; /* session_created */
typedef struct { const char *server_id; } sbx_resp_lsp_started;
typedef struct { sbx_wire_strv sessions; } sbx_resp_sessions;
typedef struct { const char *file; uint64_t line; const char *content; } sbx_resp_match;
typedef struct { const char *file; uint64_t replacements; } sbx_resp_replaced;
typedef struct { sbx_wire_event_kind kind; const char *path; } sbx_resp_event;
typedef struct {
  const char *branch;
  uint32_t ahead;
  uint32_t behind;
  sbx_wire_git_file *files;
  size_t files_len;
  bool truncated; /* emitted only when true */
} sbx_resp_git_status;
typedef struct { const char *hash; } sbx_resp_git_commit;
typedef struct { const char *current; sbx_wire_strv branches; } sbx_resp_git_branches;

typedef struct sbx_wire_resp {
  sbx_wire_type type;
  const char *nul_field;
  union {
    sbx_resp_started started;
    sbx_resp_bytes stdout_, stderr_, data;
    sbx_resp_exit exit;
    sbx_resp_error error;
    sbx_resp_info info;
    sbx_resp_procs procs;
    sbx_resp_entries entries;
    sbx_resp_stat stat;
    sbx_resp_id session_created;
    sbx_resp_lsp_started lsp_started;
    sbx_resp_sessions sessions;
    sbx_resp_match match;
    sbx_resp_replaced replaced;
    sbx_resp_event event;
    sbx_resp_git_status git_status_result;
    sbx_resp_git_commit git_commit_result;
    sbx_resp_git_branches git_branches;
  } u;
  sbx_wire_arena *arena;
} sbx_wire_resp;

/* ---- names ---- */
const char *sbx_wire_op_name(sbx_wire_op op);           /* "fs_stat"; NULL if out of range */
int sbx_wire_op_from_name(const char *s, size_t len);   /* -1 if unknown */
const char *sbx_wire_type_name(sbx_wire_type t);
int sbx_wire_type_from_name(const char *s, size_t len);
const char *sbx_wire_error_kind_name(sbx_wire_error_kind k);

/* ---- protocol facts (§2.3, §2.4, §2.6) ---- */
typedef enum { SBX_INPUT_NONE, SBX_INPUT_FED, SBX_INPUT_UPLOAD, SBX_INPUT_CANCEL } sbx_wire_input_mode;
bool sbx_wire_op_is_continuation(sbx_wire_op op);
/* exec is fed unless it runs in a session (then none). */
sbx_wire_input_mode sbx_wire_req_input_mode(const sbx_wire_req *req);

/* ---- decoding ----
 * line/len is one frame without its LF (trailing CR or spaces are fine).
 * Returns 0, or SBX_E_PARSE with err->msg naming the problem, e.g.
 * `member "pid": expected u32`. On failure *out holds nothing to free. */
int sbx_wire_decode_req(const char *line, size_t len, sbx_wire_req *out, sbx_error *err);
int sbx_wire_decode_resp(const char *line, size_t len, sbx_wire_resp *out, sbx_error *err);
void sbx_wire_req_free(sbx_wire_req *req);
void sbx_wire_resp_free(sbx_wire_resp *resp);

/* ---- encoding ----
 * Appends one frame and its LF to out. Strings are C strings (no NUL inside);
 * invalid UTF-8 in them is replaced by U+FFFD (names reported lossily, §1.6).
 * A frame over SBX_WIRE_FRAME_CAP fails with SBX_E_TOOBIG and out keeps its
 * previous content. */
int sbx_wire_encode_req(sbx_buf *out, const sbx_wire_req *req, sbx_error *err);
int sbx_wire_encode_resp(sbx_buf *out, const sbx_wire_resp *resp, sbx_error *err);

/* Convenience encoders for the frames a daemon sends most. */
int sbx_wire_encode_error(sbx_buf *out, sbx_wire_error_kind kind, const char *message, sbx_error *err);
int sbx_wire_encode_simple(sbx_buf *out, sbx_wire_type type, sbx_error *err); /* done, ready */
int sbx_wire_encode_exit(sbx_buf *out, int32_t code, sbx_error *err);
int sbx_wire_encode_started(sbx_buf *out, uint32_t pid, sbx_error *err);

/* ---- bulk fast path ----
 * The canonical shapes are {"type":"stdout","data":"<b64>"} (stderr, data
 * likewise) and {"v":1,"op":"data","data":"<b64>"} (stdin likewise). */
typedef enum {
  SBX_BULK_NONE = 0,
  SBX_BULK_STDOUT,   /* response */
  SBX_BULK_STDERR,   /* response */
  SBX_BULK_DATA,     /* response */
  SBX_BULK_REQ_DATA, /* request */
  SBX_BULK_REQ_STDIN /* request */
} sbx_wire_bulk;

/* Exact length of the encoded frame including its LF. */
size_t sbx_wire_bulk_frame_len(sbx_wire_bulk kind, size_t payload_len);
/* Writes the whole frame + LF into dst (sbx_wire_bulk_frame_len bytes). */
size_t sbx_wire_bulk_encode_into(char *dst, sbx_wire_bulk kind, const void *payload, size_t n);
/* Appends the frame + LF to out. */
int sbx_wire_bulk_encode(sbx_buf *out, sbx_wire_bulk kind, const void *payload, size_t n, sbx_error *err);

/* If line is a bulk frame (any of the five kinds, canonical shape), decode
 * its payload straight into dst (dst_cap >= sbx_b64_decoded_max of the data
 * string; SBX_WIRE_FRAME_CAP/4*3 always suffices) and return 1 with *kind
 * and *out_len set. Returns 0 if the line is not in canonical bulk shape
 * (the caller then uses the full decoder, which accepts any shape), or a
 * negative code for invalid base64. */
int sbx_wire_bulk_decode(const char *line, size_t len, sbx_wire_bulk *kind, void *dst, size_t dst_cap,
                         size_t *out_len, sbx_error *err);

/* ---- streaming frame reader ----
 * Feed input in chunks of any size; take complete lines out. Lines that
 * arrive whole inside one fed chunk are returned in place (no copy); a line
 * split across chunks is assembled in an internal buffer that never grows
 * past the cap. A line longer than the cap is an error, sticky until reset. */
typedef struct sbx_frame_reader sbx_frame_reader;

sbx_frame_reader *sbx_frame_reader_new(size_t cap); /* 0 = SBX_WIRE_FRAME_CAP */
void sbx_frame_reader_free(sbx_frame_reader *r);
/* The chunk must stay valid until sbx_frame_reader_next returns 0. */
void sbx_frame_reader_feed(sbx_frame_reader *r, const void *chunk, size_t n);
/* End of stream: a non-empty unterminated last line becomes a frame. */
void sbx_frame_reader_finish(sbx_frame_reader *r);
/* 1: *line and *len hold a frame without its LF, valid until the next call.
 * 0: the fed input is used up (or, after finish, the stream is over).
 * SBX_E_TOOBIG: a line passed the cap. */
int sbx_frame_reader_next(sbx_frame_reader *r, const char **line, size_t *len, sbx_error *err);
/* Fill mode, the zero-copy alternative to feed (use one or the other on a
 * reader): read at most *avail bytes into *where (room for at least min),
 * then commit the count. Every line is then returned in place, valid until
 * the next sbx_frame_reader_space. Take all lines out before asking for
 * space again. SBX_E_TOOBIG once a line passed the cap. */
int sbx_frame_reader_space(sbx_frame_reader *r, size_t min, char **where, size_t *avail, sbx_error *err);
void sbx_frame_reader_commit(sbx_frame_reader *r, size_t n);
/* Fill mode: give a buffer larger than keep back when it holds nothing. */
void sbx_frame_reader_trim(sbx_frame_reader *r, size_t keep);
/* Bytes held for an incomplete line. */
size_t sbx_frame_reader_pending(const sbx_frame_reader *r);
bool sbx_frame_reader_at_eof(const sbx_frame_reader *r);

#ifdef __cplusplus
}
#endif
#endif
