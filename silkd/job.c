/* job.c - a verb that runs on a worker thread and streams encoded frames.
 *
 * fs_find and fs_replace read whole trees and run a regex engine: on the
 * loop they would stall every other connection for as long as they take
 * (and a catastrophic pattern takes up to its match limit). So they run on a
 * thread of their own, which encodes its frames and writes them into a pipe;
 * the loop moves the bytes from the pipe into the connection's output queue.
 * The pipe is the flow control: when the queue is over JOB_OUT_HIGH the loop
 * stops reading it, the pipe fills and the worker's next write blocks, so
 * the walk pauses.
 *
 * The worker always ends with its final frame and closes its end; the loop
 * ends the RPC at the pipe's EOF. A cancel (client input, §2.6d) or a
 * broken connection closes the loop's end instead: the worker sees EPIPE or
 * the cancelled flag and stops, and whichever side finishes last frees the
 * job.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "silkd.h"

/* Output bytes in flight before the pipe is left unread (§5.7's 16 MiB). */
#define JOB_OUT_HIGH (16u * 1024 * 1024)
#define JOB_FLUSH (64 * 1024) /* the worker writes in pieces of about this */

struct job {
  struct conn *c;
  struct event *ev;
  int rd, wr;
  pthread_t thread;
  atomic_int refs;
  atomic_bool cancelled;
  pthread_mutex_t wlock; /* several worker threads may write (find) */
  job_fn fn;
  void *arg;
  void (*arg_free)(void *arg);
  sbx_buf out; /* worker: frames not written yet */
};

static void job_unref(struct job *j) {
  if (atomic_fetch_sub(&j->refs, 1) != 1) return;
  if (j->arg_free) j->arg_free(j->arg);
  pthread_mutex_destroy(&j->wlock);
  sbx_buf_free(&j->out);
  sbx_free(j);
}

/* ---- worker side ---- */

bool job_cancelled(struct job *j) { return atomic_load(&j->cancelled); }

int job_write(struct job *j, const char *p, size_t n) {
  pthread_mutex_lock(&j->wlock); /* whole frames, never interleaved */
  while (n > 0 && !job_cancelled(j)) {
    ssize_t k = write(j->wr, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) { /* EPIPE: the loop closed its end */
      atomic_store(&j->cancelled, true);
      break;
    }
    p += k;
    n -= (size_t)k;
  }
  pthread_mutex_unlock(&j->wlock);
  return job_cancelled(j) ? -1 : 0;
}

int job_flush(struct job *j) {
  int rc = job_write(j, j->out.ptr, j->out.len);
  sbx_buf_reset(&j->out);
  return rc;
}

int job_emit(struct job *j, const sbx_wire_resp *r, sbx_error *err) {
  if (job_cancelled(j)) return sbx_err(err, SBX_E_BUSY, "cancelled");
  /* Over the frame cap, the buffer keeps what it had (wire.h). */
  if (sbx_wire_encode_resp(&j->out, r, err) < 0) return -1;
  if (j->out.len >= JOB_FLUSH && job_flush(j) < 0) return sbx_err(err, SBX_E_BUSY, "cancelled");
  return 0;
}

void job_error(struct job *j, sbx_wire_error_kind kind, const char *msg) {
  sbx_wire_resp r = {.type = SBX_RESP_ERROR, .u.error = {kind, msg}};
  sbx_error e;
  job_emit(j, &r, &e);
}

void job_os_error(struct job *j, int errnum, const char *ctx) {
  sbx_error e;
  sbx_err_os(&e, errnum, "%s", ctx);
  job_error(j, errnum == ENOENT ? SBX_ERR_NOT_FOUND : SBX_ERR_INTERNAL, e.msg);
}

static void *job_main(void *arg) {
  struct job *j = arg;
  j->fn(j, j->arg);
  job_flush(j);
  close(j->wr);
  job_unref(j);
  return NULL;
}

/* ---- loop side ---- */

static void job_end(struct job *j, bool cancel) {
  struct conn *c = j->c;
  atomic_store(&j->cancelled, cancel);
  event_free(j->ev);
  close(j->rd);
  if (cancel) pthread_detach(j->thread);
  else pthread_join(j->thread, NULL);
  job_unref(j);
  conn_rpc_done(c);
}

static void job_pump(struct job *j) {
  static char buf[SILKD_BULK];
  while (conn_out_len(j->c) < JOB_OUT_HIGH) {
    ssize_t n = read(j->rd, buf, sizeof buf);
    if (n > 0) {
      if (!conn_send_raw(j->c, buf, (size_t)n)) return; /* abort follows */
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      event_add(j->ev, NULL);
      return;
    }
    job_end(j, false); /* EOF: the worker sent its final frame */
    return;
  }
  event_del(j->ev);
  conn_want_writable(j->c);
}

static void job_on_read(evutil_socket_t fd, short what, void *arg) { job_pump(arg); }
static void job_writable(void *rpc) { job_pump(rpc); }
static void job_abort(void *rpc) { job_end(rpc, true); }

static const struct rpc_ops job_ops_none = {.mode = SBX_INPUT_NONE, .writable = job_writable, .abort = job_abort};
static const struct rpc_ops job_ops_cancel = {
    .mode = SBX_INPUT_CANCEL, .writable = job_writable, .abort = job_abort};

void job_start(struct conn *c, bool cancel_on_input, job_fn fn, void *arg, void (*arg_free)(void *arg)) {
  int fds[2];
  struct job *j = sbx_calloc(1, sizeof *j);
  j->c = c;
  j->fn = fn;
  j->arg = arg;
  j->arg_free = arg_free;
  sbx_buf_init(&j->out, SBX_WIRE_FRAME_CAP + JOB_FLUSH + 1024);
  atomic_init(&j->refs, 2);
  atomic_init(&j->cancelled, false);
  pthread_mutex_init(&j->wlock, NULL);
  if (pipe2(fds, O_CLOEXEC) < 0) {
    conn_send_error(c, SBX_ERR_INTERNAL, "pipe: %s (os error %d)", strerror(errno), errno);
    atomic_store(&j->refs, 1);
    job_unref(j);
    return;
  }
  j->rd = fds[0];
  j->wr = fds[1];
  set_nonblock(j->rd);
  fcntl(j->rd, F_SETPIPE_SZ, 1024 * 1024); /* fewer wakeups; a hint only */
  j->ev = event_new(silkd.base, j->rd, EV_READ, job_on_read, j);
  int rc = pthread_create(&j->thread, NULL, job_main, j);
  if (rc != 0) {
    conn_send_error(c, SBX_ERR_INTERNAL, "thread: %s (os error %d)", strerror(rc), rc);
    event_free(j->ev);
    close(j->rd);
    close(j->wr);
    atomic_store(&j->refs, 1);
    job_unref(j);
    return;
  }
  conn_rpc_begin(c, cancel_on_input ? &job_ops_cancel : &job_ops_none, j);
  event_add(j->ev, NULL);
}
