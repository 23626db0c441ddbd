/* dispatch.c - route a request frame to its verb. */
#include <time.h>

#include "silkd.h"

static void verb_info(struct conn *c, sbx_wire_req *req) {
  sbx_wire_resp r = {.type = SBX_RESP_INFO};
  r.u.info.version = SBX_VERSION;
  r.u.info.proto = SBX_WIRE_PROTO;
  r.u.info.uptime_secs = (sbx_now_ns() - silkd.start_ns) / 1000000000u;
  r.u.info.procs = proc_count();
  r.u.info.sessions = session_count();
  conn_send_resp(c, &r);
}

static void verb_unimplemented(struct conn *c, sbx_wire_req *req) {
  conn_send_error(c, SBX_ERR_UNIMPLEMENTED, "%s is not implemented yet", sbx_wire_op_name(req->op));
}

typedef void (*verb_fn)(struct conn *c, sbx_wire_req *req);

static const verb_fn verbs[SBX_OP__COUNT] = {
    [SBX_OP_INFO] = verb_info,
    [SBX_OP_EXEC] = verb_exec,
    [SBX_OP_PS] = verb_ps,
    [SBX_OP_KILL] = verb_kill,
    [SBX_OP_ATTACH] = verb_attach,
    [SBX_OP_LOGS] = verb_logs,
    [SBX_OP_SESSION_CREATE] = verb_session_create,
    [SBX_OP_SESSION_LIST] = verb_session_list,
    [SBX_OP_SESSION_RM] = verb_session_rm,
    [SBX_OP_FS_WRITE] = verb_fs_write,
    [SBX_OP_FS_READ] = verb_fs_read,
    [SBX_OP_FS_LIST] = verb_fs_list,
    [SBX_OP_FS_STAT] = verb_fs_stat,
    [SBX_OP_FS_MKDIR] = verb_fs_mkdir,
    [SBX_OP_FS_RM] = verb_fs_rm,
    [SBX_OP_FS_RENAME] = verb_fs_rename,
    [SBX_OP_FS_PUSH] = verb_fs_push,
    [SBX_OP_FS_PULL] = verb_fs_pull,
    [SBX_OP_PTY_OPEN] = verb_pty_open,
    [SBX_OP_PTY_RESIZE] = verb_pty_resize,
    [SBX_OP_PORT_FORWARD] = verb_port_forward,
    [SBX_OP_FS_FIND] = verb_fs_find,
    [SBX_OP_FS_REPLACE] = verb_fs_replace,
    [SBX_OP_FS_WATCH] = verb_fs_watch,
    /* git verbs (git.c) and the LSP broker (lsp.c) */
    [SBX_OP_GIT_CLONE] = verb_git,
    [SBX_OP_GIT_STATUS] = verb_git,
    [SBX_OP_GIT_ADD] = verb_git,
    [SBX_OP_GIT_COMMIT] = verb_git,
    [SBX_OP_GIT_PUSH] = verb_git,
    [SBX_OP_GIT_PULL] = verb_git,
    [SBX_OP_GIT_BRANCH] = verb_git,
    [SBX_OP_LSP_START] = verb_lsp_start,
    [SBX_OP_LSP_REQUEST] = verb_lsp_request,
    [SBX_OP_LSP_STOP] = verb_lsp_stop,
};

void dispatch(struct conn *c, sbx_wire_req *req) {
  verb_fn fn = (unsigned)req->op < SBX_OP__COUNT ? verbs[req->op] : NULL;
  sbx_debug("request %s", sbx_wire_op_name(req->op));
  (fn ? fn : verb_unimplemented)(c, req);
}
