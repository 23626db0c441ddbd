/* silkd.h - shared declarations of the daemon's parts.
 *
 * silkd is one libevent loop: every connection, child pipe, pty and forwarded
 * socket is a non-blocking descriptor on it, so a stuck peer can only ever
 * stall its own RPC. The only threads are the tar workers (fs_push/fs_pull),
 * because libarchive pulls and pushes with blocking calls, and the jobs of
 * fs_find/fs_replace (job.c), whose walks and regexes must not hold the loop.
 */
#ifndef SILKD_H
#define SILKD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include <sandbox/core.h>
#include <sandbox/error.h>
#include <sandbox/wire.h>

/* Connections read into their frame reader's buffer, at least this much
 * room per read; it grows for bulk frames and is given back between RPCs
 * when it passed SILKD_READ_KEEP. */
#define SILKD_READ_MIN (64 * 1024)
#define SILKD_READ_KEEP (1024 * 1024)
#define SILKD_SNDBUF (1024 * 1024) /* SO_SNDBUF of client sockets; the kernel doubles it */
#define SILKD_CARRY_MAX (64 * 1024) /* pipelined bytes a handoff carrier may bring (conn.c) */
#define SILKD_PIECE (32 * 1024)        /* process output read size (§6) */
#define SILKD_BULK (256 * 1024)        /* fs_read, fs_pull, port_forward reads */
#define SILKD_RING_CAP (256 * 1024)    /* per-process output ring */
#define SILKD_OUT_PIECES 256           /* foreground output queue (§5.2) */
/* The queue of 256 pieces, measured in encoded bytes: a full 32 KiB piece is
 * about 43.7 KiB of frame, so this is the spec's "about 8 MiB" of payload. */
#define SILKD_OUT_HIGH ((size_t)SILKD_OUT_PIECES * (SILKD_PIECE / 3 * 4 + 64))
#define SILKD_OUT_LOW (SILKD_OUT_HIGH / 2)
#define SILKD_STDIN_HIGH (8u * 1024 * 1024) /* pending child stdin before we stop reading the client */
#define SILKD_DETACH_KEEP_SECS 300
#define SILKD_DRAIN_MS 2000
#define SILKD_PTY_DRAIN_MS 1000

/* ---- global daemon state ---- */
struct silkd_state {
  struct event_base *base;
  uint64_t start_ns;
  pid_t pid;
  uint64_t counter; /* temp names, staging dirs, session ids */
  bool shutting_down;
};
extern struct silkd_state silkd;

uint64_t silkd_next_id(void);

/* ---- connections (conn.c) ---- */
struct conn;

/* What a running RPC does with the connection's input and output. Every
 * callback may be NULL. */
struct rpc_ops {
  sbx_wire_input_mode mode;
  /* fed: a continuation frame; upload: data frames (op DATA only). */
  void (*input)(void *rpc, sbx_wire_op op, const uint8_t *data, size_t n);
  /* fed: the input ended (request frame, bad frame, end of stream).
   * upload: data_end arrived. */
  void (*input_end)(void *rpc);
  /* The output queue drained below the low mark after the RPC asked. */
  void (*writable)(void *rpc);
  /* The connection broke (write failure, or end of stream while uploading
   * after the error went out): stop and call conn_rpc_done soon. */
  void (*abort)(void *rpc);
};

void conn_start(int fd_in, int fd_out);
void conn_close_all(void);
/* Begin an RPC that stays open past the dispatch call. */
void conn_rpc_begin(struct conn *c, const struct rpc_ops *ops, void *rpc);
/* The RPC sent its final frame (or gave up): serve the next request. */
void conn_rpc_done(struct conn *c);
/* Output. All of these return false once the connection is broken. */
bool conn_send_resp(struct conn *c, const sbx_wire_resp *r);
bool conn_send_error(struct conn *c, sbx_wire_error_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Error from an sbx_error: NOTFOUND -> not_found, else the given kind. */
bool conn_send_sbx_error(struct conn *c, const sbx_error *e, sbx_wire_error_kind other);
bool conn_send_simple(struct conn *c, sbx_wire_type t);
bool conn_send_exit(struct conn *c, int32_t code);
bool conn_send_started(struct conn *c, uint32_t pid);
bool conn_send_bulk(struct conn *c, sbx_wire_bulk kind, const void *p, size_t n);
/* Frames already encoded elsewhere (a worker's pipe): queued as they are. */
bool conn_send_raw(struct conn *c, const void *p, size_t n);
size_t conn_out_len(const struct conn *c);
bool conn_broken(const struct conn *c);
/* Ask for rpc_ops.writable once the queue falls below SILKD_OUT_LOW. */
void conn_want_writable(struct conn *c);
/* Stop / resume reading the client (upload and stdin backpressure). */
void conn_pause_input(struct conn *c, bool paused);

/* ---- dispatch (dispatch.c): serve one request frame ---- */
void dispatch(struct conn *c, sbx_wire_req *req);

/* ---- children (child.c) ---- */
typedef void (*child_cb)(void *arg, pid_t pid, int status);
void child_watch(pid_t pid, child_cb cb, void *arg);
void child_unwatch(pid_t pid);
void child_reap_all(void); /* SIGCHLD: waitpid(-1) loop */
int child_exit_code(int status);

/* Environment per §7.1: NULL-terminated, owned by the caller (envp_free). */
char **env_build(const sbx_wire_map *req_env, const char *home, const char *user);
void envp_free(char **envp);
/* §7.2 (git, language servers): the daemon's environment, proxy rule
 * applied; envp_set adds or replaces KEY (envp may be reallocated). */
char **env_inherit(void);
char **envp_set(char **envp, const char *key, const char *value);
/* §8.2 exec/pty env key rule; fills msg on rejection. */
bool env_keys_valid(const sbx_wire_map *env, char *msg, size_t msglen);
void env_init(void); /* snapshot proxy variables at startup */
bool net_has_direct_route(void);
bool net_has_nic(void); /* §7.3: may git_clone, git_push and git_pull run */

struct spawn_opts {
  const char *const *argv; /* argv[0] searched in env PATH if it has no '/' */
  char **envp;
  const char *cwd;
  bool has_user;
  uid_t uid;
  gid_t gid;
  int fd0, fd1, fd2; /* become 0, 1, 2 in the child */
  bool new_pgrp;     /* execs and session shells: lead a process group */
  bool setsid_ctty;  /* pty shells: setsid + TIOCSCTTY on fd0 */
};
/* vfork + exec; chdir/exec failures come back (in memory the vfork child
 * shares) before we answer started. err->os_errno holds the errno on failure. */
int spawn_child(const struct spawn_opts *o, pid_t *pid, sbx_error *err);
/* The shell of pty_open and of sessions: bash where the root has one,
 * else /bin/sh (the qemu driver's host template is busybox only). */
const char *silkd_shell(void);
/* Passwd lookup without NSS (static binary): /etc/passwd only. */
int user_lookup(const char *name, uid_t *uid, gid_t *gid, char **home);

int set_nonblock(int fd);

/* ---- process table (proc.c) ---- */
enum piece_kind { PIECE_STDOUT = 0, PIECE_STDERR = 1 };

struct proc;
/* The foreground owner of a process (exec or pty RPC). */
struct proc_owner_ops {
  /* one output piece; return false to stop reading (backpressure) */
  bool (*piece)(void *owner, enum piece_kind k, const uint8_t *p, size_t n);
  /* output pipes closed and child reaped (or drain deadline passed) */
  void (*finished)(void *owner, int code);
};

struct proc *proc_new(pid_t pid, const char *const *argv, bool detached, bool is_pty);
void proc_set_owner(struct proc *p, const struct proc_owner_ops *ops, void *owner);
/* Hand the parent ends of the output pipes to the table (fd2 may be -1). */
void proc_attach_output(struct proc *p, int out_fd, int err_fd, int drain_ms);
void proc_resume_output(struct proc *p);
void proc_remove(struct proc *p);
struct proc *proc_find(pid_t pid);
pid_t proc_pid(const struct proc *p);
bool proc_exited(const struct proc *p);
int proc_code(const struct proc *p);
int proc_pty_master(const struct proc *p);
void proc_set_pty_master(struct proc *p, int fd);
size_t proc_count(void);
void proc_kill_all(void);
/* Signal the entry's process group (and, for SIGKILL of a pty, its whole
 * session); nothing once the leader is reaped. */
void proc_signal(struct proc *p, int sig);
/* Owner gone (client write failed): kill, publish code, remove later. */
void proc_orphan(struct proc *p);

void verb_ps(struct conn *c, sbx_wire_req *req);
void verb_kill(struct conn *c, sbx_wire_req *req);
void verb_attach(struct conn *c, sbx_wire_req *req);
void verb_logs(struct conn *c, sbx_wire_req *req);

/* ---- verbs ---- */
void verb_exec(struct conn *c, sbx_wire_req *req);
void verb_session_create(struct conn *c, sbx_wire_req *req);
void verb_session_list(struct conn *c, sbx_wire_req *req);
void verb_session_rm(struct conn *c, sbx_wire_req *req);
void session_exec(struct conn *c, sbx_wire_req *req);
size_t session_count(void);
void session_init(void);
void session_kill_all(void);

void verb_fs_write(struct conn *c, sbx_wire_req *req);
void verb_fs_read(struct conn *c, sbx_wire_req *req);
void verb_fs_list(struct conn *c, sbx_wire_req *req);
void verb_fs_stat(struct conn *c, sbx_wire_req *req);
void verb_fs_mkdir(struct conn *c, sbx_wire_req *req);
void verb_fs_rm(struct conn *c, sbx_wire_req *req);
void verb_fs_rename(struct conn *c, sbx_wire_req *req);
int rm_tree_at(int dirfd, const char *name, sbx_error *err);
/* rename(2) semantics (atomic replace of a file or symlink; a directory
 * target fails) without ext4's flush of the source on replace (replace.c). */
int replace_at(int fromdir, const char *from, int todir, const char *to);

void verb_fs_push(struct conn *c, sbx_wire_req *req);
void verb_fs_pull(struct conn *c, sbx_wire_req *req);

void verb_pty_open(struct conn *c, sbx_wire_req *req);
void verb_pty_resize(struct conn *c, sbx_wire_req *req);
void verb_port_forward(struct conn *c, sbx_wire_req *req);

/* ---- verbs on a worker thread streaming encoded frames (job.c) ---- */
struct job;
typedef void (*job_fn)(struct job *j, void *arg);
/* Run fn(j, arg) on a thread as the connection's RPC; fn sends every frame
 * with job_emit, the final one included. arg_free(arg) runs when the job is
 * gone. cancel_on_input: input mode cancel (§2.6d), else none. */
void job_start(struct conn *c, bool cancel_on_input, job_fn fn, void *arg, void (*arg_free)(void *arg));
/* Worker side. job_emit fails (-1) on a frame over the cap (err says so)
 * or once cancelled; job_cancelled is cheap enough to poll per file. */
int job_emit(struct job *j, const sbx_wire_resp *r, sbx_error *err);
int job_flush(struct job *j);
/* Encoded frames from any worker thread, written whole (a mutex). */
int job_write(struct job *j, const char *p, size_t n);
bool job_cancelled(struct job *j);
void job_error(struct job *j, sbx_wire_error_kind kind, const char *msg);
void job_os_error(struct job *j, int errnum, const char *ctx); /* ENOENT: not_found */

void verb_fs_find(struct conn *c, sbx_wire_req *req);
void verb_fs_replace(struct conn *c, sbx_wire_req *req);
void verb_fs_watch(struct conn *c, sbx_wire_req *req);
/* ---- git verbs (git.c) and the LSP broker (lsp.c) ---- */
void verb_git(struct conn *c, sbx_wire_req *req);
void verb_lsp_start(struct conn *c, sbx_wire_req *req);
void verb_lsp_request(struct conn *c, sbx_wire_req *req);
void verb_lsp_stop(struct conn *c, sbx_wire_req *req);
extern unsigned silkd_lsp_ttl_secs; /* unattached server reap (§6), --lsp-ttl */
void lsp_kill_all(void);

/* ---- a non-blocking writer into a pipe or socket (fdwriter.c) ---- */
struct fdwriter;
typedef void (*fdwriter_cb)(void *arg, int err); /* drained (err 0) or failed */
struct fdwriter *fdwriter_new(int fd, fdwriter_cb cb, void *arg);
/* Queue bytes; returns the amount still pending. */
size_t fdwriter_write(struct fdwriter *w, const void *p, size_t n);
size_t fdwriter_pending(const struct fdwriter *w);
bool fdwriter_failed(const struct fdwriter *w);
/* Close the fd once everything queued is written (or at once if failed). */
void fdwriter_close_when_done(struct fdwriter *w);
void fdwriter_free(struct fdwriter *w); /* closes the fd if still open */
/* The fd, so a port forward can shutdown(SHUT_WR) instead of close. */
void fdwriter_set_shutdown(struct fdwriter *w);

#endif
