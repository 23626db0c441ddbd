/* Member tables of every request op and response type, in fixture order. */
#include <stddef.h>

#include "schema.h"

/* ---- enums: names and order pinned by wire-fixtures/v1/enums.json ---- */
static const char *const error_kind_values[] = {"bad_request", "not_found", "unimplemented", "internal"};
static const char *const event_kind_values[] = {"created", "modified", "deleted", "renamed"};
static const char *const file_kind_values[] = {"file", "dir", "symlink", "other"};
static const char *const git_branch_action_values[] = {"list", "create", "delete", "checkout"};
static const char *const proc_state_values[] = {"running", "exited"};

static const sbx_wire_enum wire_enums[] = {
    {"error_kind", error_kind_values, 4},
    {"event_kind", event_kind_values, 4},
    {"file_kind", file_kind_values, 4},
    {"git_branch_action", git_branch_action_values, 4},
};
#define ENUM_ERROR_KIND (&wire_enums[0])
#define ENUM_EVENT_KIND (&wire_enums[1])
#define ENUM_FILE_KIND (&wire_enums[2])
#define ENUM_GIT_BRANCH_ACTION (&wire_enums[3])
const sbx_wire_enum sbxi_enum_proc_state = {"proc_state", proc_state_values, 2};

const sbx_wire_enum *sbx_wire_enums(size_t *count) {
  if (count) *count = sizeof wire_enums / sizeof wire_enums[0];
  return wire_enums;
}

const char *sbx_wire_error_kind_name(sbx_wire_error_kind k) {
  return (unsigned)k < 4 ? error_kind_values[k] : "internal";
}

/* ---- field constructors ---- */
#define NAME(n) n, sizeof(n) - 1
/* required member */
#define REQ(n, t, S, m) {NAME(n), t, FF_REQUIRED, offsetof(S, m), -1, NULL}
/* optional member whose absence is its own value (NULL string, empty map) */
#define OPT(n, t, S, m) {NAME(n), t, 0, offsetof(S, m), -1, NULL}
/* optional scalar with a has_ flag */
#define OPTH(n, t, S, m, h) {NAME(n), t, 0, offsetof(S, m), offsetof(S, h), NULL}
#define ENUMF(n, S, m, e) {NAME(n), FT_ENUM, FF_REQUIRED, offsetof(S, m), -1, e}
#define OBJ(n, S, m, d) {NAME(n), FT_OBJ, FF_REQUIRED, offsetof(S, m), -1, d}
#define OBJV(n, S, m, l, d) {NAME(n), FT_OBJV, FF_REQUIRED, offsetof(S, m), offsetof(S, l), d}
#define COUNT(a) (uint8_t)(sizeof(a) / sizeof((a)[0]))
#define DESC(tag, fields, S) {NAME(tag), COUNT(fields), sizeof(S), fields}
#define DESC0(tag) {NAME(tag), 0, 0, NULL}

/* ---- nested objects ---- */
static const wire_field proc_info_fields[] = {
    REQ("pid", FT_U32, sbx_wire_proc_info, pid),
    REQ("argv", FT_STRV, sbx_wire_proc_info, argv),
    REQ("detached", FT_BOOL, sbx_wire_proc_info, detached),
    {NAME("state"), FT_ENUM, FF_REQUIRED, offsetof(sbx_wire_proc_info, state), -1, &sbxi_enum_proc_state},
    {NAME("exit_code"), FT_I32, FF_IFF_EXITED, offsetof(sbx_wire_proc_info, exit_code),
     offsetof(sbx_wire_proc_info, has_exit_code), NULL},
    REQ("started_at_epoch_secs", FT_U64, sbx_wire_proc_info, started_at_epoch_secs),
};
static const wire_desc proc_info_desc = DESC("ProcInfo", proc_info_fields, sbx_wire_proc_info);

static const wire_field dir_entry_fields[] = {
    REQ("name", FT_STR, sbx_wire_dir_entry, name),
    ENUMF("kind", sbx_wire_dir_entry, kind, ENUM_FILE_KIND),
    REQ("size", FT_U64, sbx_wire_dir_entry, size),
};
static const wire_desc dir_entry_desc = DESC("DirEntry", dir_entry_fields, sbx_wire_dir_entry);

static const wire_field file_info_fields[] = {
    ENUMF("kind", sbx_wire_file_info, kind, ENUM_FILE_KIND),
    REQ("size", FT_U64, sbx_wire_file_info, size),
    REQ("mode", FT_U32, sbx_wire_file_info, mode),
    REQ("mtime_epoch_secs", FT_U64, sbx_wire_file_info, mtime_epoch_secs),
};
static const wire_desc file_info_desc = DESC("FileInfo", file_info_fields, sbx_wire_file_info);

static const wire_field git_file_fields[] = {
    REQ("path", FT_STR, sbx_wire_git_file, path),
    REQ("staged", FT_STR, sbx_wire_git_file, staged),
    REQ("unstaged", FT_STR, sbx_wire_git_file, unstaged),
};
static const wire_desc git_file_desc = DESC("GitFile", git_file_fields, sbx_wire_git_file);

/* ---- requests ---- */
static const wire_field exec_f[] = {
    REQ("argv", FT_STRV, sbx_req_exec, argv),      OPT("cwd", FT_STR, sbx_req_exec, cwd),
    OPT("env", FT_MAP, sbx_req_exec, env),         OPT("user", FT_STR, sbx_req_exec, user),
    OPTH("detach", FT_BOOL, sbx_req_exec, detach, has_detach), OPT("session", FT_STR, sbx_req_exec, session),
};
static const wire_field kill_f[] = {REQ("pid", FT_U32, sbx_req_kill, pid),
                                    OPTH("signal", FT_I32, sbx_req_kill, signal, has_signal)};
static const wire_field pid_f[] = {REQ("pid", FT_U32, sbx_req_pid, pid)};
static const wire_field session_create_f[] = {OPT("cwd", FT_STR, sbx_req_session_create, cwd),
                                              OPT("env", FT_MAP, sbx_req_session_create, env),
                                              OPT("id", FT_STR, sbx_req_session_create, id)};
static const wire_field session_rm_f[] = {REQ("id", FT_STR, sbx_req_session_rm, id)};
static const wire_field fs_write_f[] = {REQ("path", FT_STR, sbx_req_fs_write, path),
                                        OPTH("mode", FT_U32, sbx_req_fs_write, mode, has_mode)};
static const wire_field path_f[] = {REQ("path", FT_STR, sbx_req_path, path)};
static const wire_field fs_mkdir_f[] = {REQ("path", FT_STR, sbx_req_fs_mkdir, path),
                                        OPTH("parents", FT_BOOL, sbx_req_fs_mkdir, parents, has_parents)};
static const wire_field fs_rm_f[] = {REQ("path", FT_STR, sbx_req_fs_rm, path),
                                     OPTH("recursive", FT_BOOL, sbx_req_fs_rm, recursive, has_recursive)};
static const wire_field fs_rename_f[] = {REQ("from", FT_STR, sbx_req_fs_rename, from),
                                         REQ("to", FT_STR, sbx_req_fs_rename, to)};
static const wire_field fs_push_f[] = {REQ("dest", FT_STR, sbx_req_fs_push, dest)};
static const wire_field fs_find_f[] = {REQ("path", FT_STR, sbx_req_fs_find, path),
                                       REQ("pattern", FT_STR, sbx_req_fs_find, pattern),
                                       OPT("glob", FT_STR, sbx_req_fs_find, glob)};
static const wire_field fs_replace_f[] = {REQ("files", FT_STRV, sbx_req_fs_replace, files),
                                          REQ("pattern", FT_STR, sbx_req_fs_replace, pattern),
                                          REQ("replacement", FT_STR, sbx_req_fs_replace, replacement)};
static const wire_field fs_watch_f[] = {REQ("path", FT_STR, sbx_req_fs_watch, path),
                                        OPTH("recursive", FT_BOOL, sbx_req_fs_watch, recursive, has_recursive)};
static const wire_field pty_open_f[] = {
    REQ("cols", FT_U16, sbx_req_pty_open, cols), REQ("rows", FT_U16, sbx_req_pty_open, rows),
    OPT("cwd", FT_STR, sbx_req_pty_open, cwd),   OPT("env", FT_MAP, sbx_req_pty_open, env),
    OPT("user", FT_STR, sbx_req_pty_open, user),
};
static const wire_field pty_resize_f[] = {REQ("pid", FT_U32, sbx_req_pty_resize, pid),
                                          REQ("cols", FT_U16, sbx_req_pty_resize, cols),
                                          REQ("rows", FT_U16, sbx_req_pty_resize, rows)};
static const wire_field port_forward_f[] = {REQ("port", FT_U16, sbx_req_port_forward, port)};
static const wire_field git_clone_f[] = {
    REQ("url", FT_STR, sbx_req_git_clone, url),       REQ("path", FT_STR, sbx_req_git_clone, path),
    OPT("branch", FT_STR, sbx_req_git_clone, branch), OPTH("depth", FT_U32, sbx_req_git_clone, depth, has_depth),
    OPT("auth", FT_STR, sbx_req_git_clone, auth),
};
static const wire_field git_add_f[] = {REQ("path", FT_STR, sbx_req_git_add, path),
                                       REQ("files", FT_STRV, sbx_req_git_add, files)};
static const wire_field git_commit_f[] = {REQ("path", FT_STR, sbx_req_git_commit, path),
                                          REQ("message", FT_STR, sbx_req_git_commit, message),
                                          REQ("author", FT_STR, sbx_req_git_commit, author)};
static const wire_field git_remote_f[] = {REQ("path", FT_STR, sbx_req_git_remote, path),
                                          OPT("auth", FT_STR, sbx_req_git_remote, auth)};
static const wire_field git_branch_f[] = {REQ("path", FT_STR, sbx_req_git_branch, path),
                                          ENUMF("action", sbx_req_git_branch, action, ENUM_GIT_BRANCH_ACTION),
                                          OPT("name", FT_STR, sbx_req_git_branch, name)};
static const wire_field lsp_start_f[] = {REQ("language", FT_STR, sbx_req_lsp_start, language),
                                         OPT("root", FT_STR, sbx_req_lsp_start, root)};
static const wire_field lsp_id_f[] = {REQ("server_id", FT_STR, sbx_req_lsp_id, server_id)};
static const wire_field bytes_f[] = {REQ("data", FT_B64, sbx_req_bytes, data)};

const wire_desc sbxi_req_desc[SBX_OP__COUNT] = {
    [SBX_OP_INFO] = DESC0("info"),
    [SBX_OP_EXEC] = DESC("exec", exec_f, sbx_req_exec),
    [SBX_OP_PS] = DESC0("ps"),
    [SBX_OP_KILL] = DESC("kill", kill_f, sbx_req_kill),
    [SBX_OP_ATTACH] = DESC("attach", pid_f, sbx_req_pid),
    [SBX_OP_LOGS] = DESC("logs", pid_f, sbx_req_pid),
    [SBX_OP_SESSION_CREATE] = DESC("session_create", session_create_f, sbx_req_session_create),
    [SBX_OP_SESSION_LIST] = DESC0("session_list"),
    [SBX_OP_SESSION_RM] = DESC("session_rm", session_rm_f, sbx_req_session_rm),
    [SBX_OP_FS_WRITE] = DESC("fs_write", fs_write_f, sbx_req_fs_write),
    [SBX_OP_FS_READ] = DESC("fs_read", path_f, sbx_req_path),
    [SBX_OP_FS_LIST] = DESC("fs_list", path_f, sbx_req_path),
    [SBX_OP_FS_STAT] = DESC("fs_stat", path_f, sbx_req_path),
    [SBX_OP_FS_MKDIR] = DESC("fs_mkdir", fs_mkdir_f, sbx_req_fs_mkdir),
    [SBX_OP_FS_RM] = DESC("fs_rm", fs_rm_f, sbx_req_fs_rm),
    [SBX_OP_FS_RENAME] = DESC("fs_rename", fs_rename_f, sbx_req_fs_rename),
    [SBX_OP_FS_PUSH] = DESC("fs_push", fs_push_f, sbx_req_fs_push),
    [SBX_OP_FS_PULL] = DESC("fs_pull", path_f, sbx_req_path),
    [SBX_OP_FS_FIND] = DESC("fs_find", fs_find_f, sbx_req_fs_find),
    [SBX_OP_FS_REPLACE] = DESC("fs_replace", fs_replace_f, sbx_req_fs_replace),
    [SBX_OP_FS_WATCH] = DESC("fs_watch", fs_watch_f, sbx_req_fs_watch),
    [SBX_OP_PTY_OPEN] = DESC("pty_open", pty_open_f, sbx_req_pty_open),
    [SBX_OP_PTY_RESIZE] = DESC("pty_resize", pty_resize_f, sbx_req_pty_resize),
    [SBX_OP_PORT_FORWARD] = DESC("port_forward", port_forward_f, sbx_req_port_forward),
    [SBX_OP_GIT_CLONE] = DESC("git_clone", git_clone_f, sbx_req_git_clone),
    [SBX_OP_GIT_STATUS] = DESC("git_status", path_f, sbx_req_path),
    [SBX_OP_GIT_ADD] = DESC("git_add", git_add_f, sbx_req_git_add),
    [SBX_OP_GIT_COMMIT] = DESC("git_commit", git_commit_f, sbx_req_git_commit),
    [SBX_OP_GIT_PUSH] = DESC("git_push", git_remote_f, sbx_req_git_remote),
    [SBX_OP_GIT_PULL] = DESC("git_pull", git_remote_f, sbx_req_git_remote),
    [SBX_OP_GIT_BRANCH] = DESC("git_branch", git_branch_f, sbx_req_git_branch),
    [SBX_OP_LSP_START] = DESC("lsp_start", lsp_start_f, sbx_req_lsp_start),
    [SBX_OP_LSP_REQUEST] = DESC("lsp_request", lsp_id_f, sbx_req_lsp_id),
    [SBX_OP_LSP_STOP] = DESC("lsp_stop", lsp_id_f, sbx_req_lsp_id),
    [SBX_OP_STDIN] = DESC("stdin", bytes_f, sbx_req_bytes),
    [SBX_OP_STDIN_CLOSE] = DESC0("stdin_close"),
    [SBX_OP_DATA] = DESC("data", bytes_f, sbx_req_bytes),
    [SBX_OP_DATA_END] = DESC0("data_end"),
};

/* ---- responses ---- */
static const wire_field started_f[] = {REQ("pid", FT_U32, sbx_resp_started, pid)};
static const wire_field rbytes_f[] = {REQ("data", FT_B64, sbx_resp_bytes, data)};
static const wire_field exit_f[] = {REQ("code", FT_I32, sbx_resp_exit, code)};
static const wire_field error_f[] = {ENUMF("kind", sbx_resp_error, kind, ENUM_ERROR_KIND),
                                     REQ("message", FT_STR, sbx_resp_error, message)};
static const wire_field info_f[] = {
    REQ("version", FT_STR, sbx_resp_info, version),   REQ("proto", FT_U32, sbx_resp_info, proto),
    REQ("uptime_secs", FT_U64, sbx_resp_info, uptime_secs), REQ("procs", FT_U64, sbx_resp_info, procs),
    REQ("sessions", FT_U64, sbx_resp_info, sessions),
};
static const wire_field procs_f[] = {OBJV("procs", sbx_resp_procs, items, len, &proc_info_desc)};
static const wire_field entries_f[] = {OBJV("entries", sbx_resp_entries, items, len, &dir_entry_desc)};
static const wire_field stat_f[] = {OBJ("info", sbx_resp_stat, info, &file_info_desc)};
static const wire_field session_created_f[] = {REQ("id", FT_STR, sbx_resp_id, id)};
static const wire_field lsp_started_f[] = {REQ("server_id", FT_STR, sbx_resp_lsp_started, server_id)};
static const wire_field sessions_f[] = {REQ("sessions", FT_STRV, sbx_resp_sessions, sessions)};
static const wire_field match_f[] = {REQ("file", FT_STR, sbx_resp_match, file), REQ("line", FT_U64, sbx_resp_match, line),
                                     REQ("content", FT_STR, sbx_resp_match, content)};
static const wire_field replaced_f[] = {REQ("file", FT_STR, sbx_resp_replaced, file),
                                        REQ("replacements", FT_U64, sbx_resp_replaced, replacements)};
static const wire_field event_f[] = {ENUMF("kind", sbx_resp_event, kind, ENUM_EVENT_KIND),
                                     REQ("path", FT_STR, sbx_resp_event, path)};
static const wire_field git_status_f[] = {
    REQ("branch", FT_STR, sbx_resp_git_status, branch),
    REQ("ahead", FT_U32, sbx_resp_git_status, ahead),
    REQ("behind", FT_U32, sbx_resp_git_status, behind),
    OBJV("files", sbx_resp_git_status, files, files_len, &git_file_desc),
    {NAME("truncated"), FT_BOOL, FF_ONLY_TRUE, offsetof(sbx_resp_git_status, truncated), -1, NULL},
};
static const wire_field git_commit_result_f[] = {REQ("hash", FT_STR, sbx_resp_git_commit, hash)};
static const wire_field git_branches_f[] = {REQ("current", FT_STR, sbx_resp_git_branches, current),
                                            REQ("branches", FT_STRV, sbx_resp_git_branches, branches)};

const wire_desc sbxi_resp_desc[SBX_RESP__COUNT] = {
    [SBX_RESP_STARTED] = DESC("started", started_f, sbx_resp_started),
    [SBX_RESP_STDOUT] = DESC("stdout", rbytes_f, sbx_resp_bytes),
    [SBX_RESP_STDERR] = DESC("stderr", rbytes_f, sbx_resp_bytes),
    [SBX_RESP_EXIT] = DESC("exit", exit_f, sbx_resp_exit),
    [SBX_RESP_DONE] = DESC0("done"),
    [SBX_RESP_READY] = DESC0("ready"),
    [SBX_RESP_ERROR] = DESC("error", error_f, sbx_resp_error),
    [SBX_RESP_INFO] = DESC("info", info_f, sbx_resp_info),
    [SBX_RESP_PROCS] = DESC("procs", procs_f, sbx_resp_procs),
    [SBX_RESP_DATA] = DESC("data", rbytes_f, sbx_resp_bytes),
    [SBX_RESP_ENTRIES] = DESC("entries", entries_f, sbx_resp_entries),
    [SBX_RESP_STAT] = DESC("stat", stat_f, sbx_resp_stat),
    [SBX_RESP_SESSION_CREATED] = DESC("session_created", session_created_f, sbx_resp_id),
    [SBX_RESP_LSP_STARTED] = DESC("lsp_started", lsp_started_f, sbx_resp_lsp_started),
    [SBX_RESP_SESSIONS] = DESC("sessions", sessions_f, sbx_resp_sessions),
    [SBX_RESP_MATCH] = DESC("match", match_f, sbx_resp_match),
    [SBX_RESP_REPLACED] = DESC("replaced", replaced_f, sbx_resp_replaced),
    [SBX_RESP_EVENT] = DESC("event", event_f, sbx_resp_event),
    [SBX_RESP_GIT_STATUS_RESULT] = DESC("git_status_result", git_status_f, sbx_resp_git_status),
    [SBX_RESP_GIT_COMMIT_RESULT] = DESC("git_commit_result", git_commit_result_f, sbx_resp_git_commit),
    [SBX_RESP_GIT_BRANCHES] = DESC("git_branches", git_branches_f, sbx_resp_git_branches),
};

/* ---- names ---- */
const char *sbx_wire_op_name(sbx_wire_op op) { return (unsigned)op < SBX_OP__COUNT ? sbxi_req_desc[op].tag : NULL; }
const char *sbx_wire_type_name(sbx_wire_type t) { return (unsigned)t < SBX_RESP__COUNT ? sbxi_resp_desc[t].tag : NULL; }

static int find_tag(const wire_desc *table, int count, const char *s, size_t len) {
  for (int i = 0; i < count; i++)
    if (table[i].tag_len == len && __builtin_memcmp(table[i].tag, s, len) == 0) return i;
  return -1;
}

int sbx_wire_op_from_name(const char *s, size_t len) { return find_tag(sbxi_req_desc, SBX_OP__COUNT, s, len); }
int sbx_wire_type_from_name(const char *s, size_t len) { return find_tag(sbxi_resp_desc, SBX_RESP__COUNT, s, len); }

/* ---- protocol facts ---- */
bool sbx_wire_op_is_continuation(sbx_wire_op op) {
  return op == SBX_OP_STDIN || op == SBX_OP_STDIN_CLOSE || op == SBX_OP_DATA || op == SBX_OP_DATA_END;
}

sbx_wire_input_mode sbx_wire_req_input_mode(const sbx_wire_req *req) {
  switch (req->op) {
  case SBX_OP_EXEC: return req->u.exec.session ? SBX_INPUT_NONE : SBX_INPUT_FED;
  case SBX_OP_PTY_OPEN:
  case SBX_OP_PORT_FORWARD:
  case SBX_OP_LSP_REQUEST: return SBX_INPUT_FED;
  case SBX_OP_FS_WRITE:
  case SBX_OP_FS_PUSH: return SBX_INPUT_UPLOAD;
  case SBX_OP_FS_FIND:
  case SBX_OP_FS_WATCH: return SBX_INPUT_CANCEL;
  default: return SBX_INPUT_NONE;
  }
}
