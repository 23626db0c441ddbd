/* proc.c - the process table (§5.3): output pipes, the 256 KiB ring, the
 * live stream to attachers, exit publication and retention; plus the
 * verbs that only look at the table (ps, kill, attach, logs).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "silkd.h"

struct seg {
  struct seg *next;
  enum piece_kind kind;
  size_t len;
  uint8_t data[];
};

struct sub { /* one attach RPC */
  struct sub *next;
  struct conn *c;
  struct proc *p;
};

struct proc {
  struct proc *next;
  pid_t pid;
  char **argv;
  size_t argc;
  bool detached, is_pty;
  uint64_t started_at;
  bool reaped;
  int reap_code;
  bool exited; /* published: output done (or drain deadline) and reaped */
  int code;
  struct seg *ring_head, *ring_tail;
  size_t ring_bytes;
  struct sub *subs;
  const struct proc_owner_ops *oops;
  void *owner;
  int fd[2];
  struct event *ev[2];
  bool paused;
  int drain_ms;
  struct event *drain_timer;
  struct event *expire_timer;
  int pty_master;
};

static struct proc *procs;

static void proc_finish(struct proc *p);

size_t proc_count(void) {
  size_t n = 0;
  for (struct proc *p = procs; p; p = p->next) n++;
  return n;
}

struct proc *proc_find(pid_t pid) {
  for (struct proc *p = procs; p; p = p->next)
    if (p->pid == pid) return p;
  return NULL;
}

pid_t proc_pid(const struct proc *p) { return p->pid; }
bool proc_exited(const struct proc *p) { return p->exited; }
int proc_code(const struct proc *p) { return p->code; }
int proc_pty_master(const struct proc *p) { return p->is_pty ? p->pty_master : -1; }
void proc_set_pty_master(struct proc *p, int fd) { p->pty_master = fd; }

static void on_reap(void *arg, pid_t pid, int status) {
  struct proc *p = arg;
  p->reaped = true;
  p->reap_code = child_exit_code(status);
  if (p->fd[0] < 0 && p->fd[1] < 0) {
    proc_finish(p);
    return;
  }
  struct timeval tv = {p->drain_ms / 1000, (p->drain_ms % 1000) * 1000};
  event_add(p->drain_timer, &tv);
}

static void on_drain_deadline(evutil_socket_t fd, short what, void *arg) { proc_finish(arg); }
static void on_expire(evutil_socket_t fd, short what, void *arg) { proc_remove(arg); }

struct proc *proc_new(pid_t pid, const char *const *argv, bool detached, bool is_pty) {
  struct proc *p = sbx_calloc(1, sizeof *p);
  p->pid = pid;
  while (argv[p->argc]) p->argc++;
  p->argv = sbx_calloc(p->argc + 1, sizeof *p->argv);
  for (size_t i = 0; i < p->argc; i++) p->argv[i] = sbx_strdup(argv[i]);
  p->detached = detached;
  p->is_pty = is_pty;
  p->started_at = (uint64_t)time(NULL);
  p->fd[0] = p->fd[1] = -1;
  p->pty_master = -1;
  p->drain_timer = evtimer_new(silkd.base, on_drain_deadline, p);
  p->expire_timer = evtimer_new(silkd.base, on_expire, p);
  child_watch(pid, on_reap, p);
  /* Keep the table sorted by pid: ps lists it that way. */
  struct proc **pp = &procs;
  while (*pp && (*pp)->pid < pid) pp = &(*pp)->next;
  p->next = *pp;
  *pp = p;
  return p;
}

void proc_set_owner(struct proc *p, const struct proc_owner_ops *ops, void *owner) {
  p->oops = ops;
  p->owner = owner;
}

/* ---- ring and live stream ---- */

static void ring_add(struct proc *p, enum piece_kind k, const uint8_t *d, size_t n) {
  struct seg *s = sbx_malloc(sizeof *s + n);
  s->next = NULL;
  s->kind = k;
  s->len = n;
  memcpy(s->data, d, n);
  if (p->ring_tail) p->ring_tail->next = s;
  else p->ring_head = s;
  p->ring_tail = s;
  p->ring_bytes += n;
  while (p->ring_bytes > SILKD_RING_CAP && p->ring_head) {
    struct seg *o = p->ring_head;
    p->ring_head = o->next;
    if (!p->ring_head) p->ring_tail = NULL;
    p->ring_bytes -= o->len;
    sbx_free(o);
  }
}

static sbx_wire_bulk bulk_of(enum piece_kind k) { return k == PIECE_STDERR ? SBX_BULK_STDERR : SBX_BULK_STDOUT; }

static void live_send(struct proc *p, enum piece_kind k, const uint8_t *d, size_t n) {
  for (struct sub *s = p->subs; s; s = s->next) {
    /* The live stream is lossy past 256 pieces (§5.3). */
    if (conn_out_len(s->c) > SILKD_OUT_HIGH) continue;
    conn_send_bulk(s->c, bulk_of(k), d, n);
  }
}

static void subs_end(struct proc *p, bool with_exit) {
  while (p->subs) {
    struct sub *s = p->subs;
    p->subs = s->next;
    if (with_exit) conn_send_exit(s->c, p->code);
    else conn_send_simple(s->c, SBX_RESP_DONE);
    conn_rpc_done(s->c);
    sbx_free(s);
  }
}

/* ---- output pipes ---- */

static void close_fd(struct proc *p, int i) {
  if (p->fd[i] < 0) return;
  event_free(p->ev[i]);
  p->ev[i] = NULL;
  if (p->fd[i] != p->pty_master) close(p->fd[i]);
  p->fd[i] = -1;
}

static void on_output(evutil_socket_t fd, short what, void *arg) {
  struct proc *p = arg;
  int i = fd == p->fd[0] ? 0 : 1;
  uint8_t buf[SILKD_PIECE];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) { /* EOF, or EIO from a pty master whose slave is gone */
    close_fd(p, i);
    if (p->fd[0] < 0 && p->fd[1] < 0 && p->reaped) proc_finish(p);
    return;
  }
  enum piece_kind k = i == 0 ? PIECE_STDOUT : PIECE_STDERR;
  ring_add(p, k, buf, (size_t)n);
  live_send(p, k, buf, (size_t)n);
  if (p->oops && !p->oops->piece(p->owner, k, buf, (size_t)n)) {
    p->paused = true;
    for (int j = 0; j < 2; j++)
      if (p->ev[j]) event_del(p->ev[j]);
  }
}

void proc_attach_output(struct proc *p, int out_fd, int err_fd, int drain_ms) {
  int fds[2] = {out_fd, err_fd};
  p->drain_ms = drain_ms;
  for (int i = 0; i < 2; i++) {
    if (fds[i] < 0) continue;
    set_nonblock(fds[i]);
    p->fd[i] = fds[i];
    p->ev[i] = event_new(silkd.base, fds[i], EV_READ | EV_PERSIST, on_output, p);
    event_add(p->ev[i], NULL);
  }
}

void proc_resume_output(struct proc *p) {
  if (!p->paused) return;
  p->paused = false;
  for (int j = 0; j < 2; j++)
    if (p->ev[j]) event_add(p->ev[j], NULL);
}

static void proc_finish(struct proc *p) {
  if (p->exited) return;
  event_del(p->drain_timer);
  /* Output not delivered by the deadline is dropped (§5.2). */
  close_fd(p, 0);
  close_fd(p, 1);
  p->exited = true;
  p->code = p->reap_code;
  subs_end(p, true);
  if (p->oops) {
    const struct proc_owner_ops *o = p->oops;
    p->oops = NULL;
    o->finished(p->owner, p->code); /* the owner removes the entry */
    return;
  }
  struct timeval tv = {SILKD_DETACH_KEEP_SECS, 0};
  event_add(p->expire_timer, &tv);
}

void proc_remove(struct proc *p) {
  for (struct proc **pp = &procs; *pp; pp = &(*pp)->next) {
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  }
  if (!p->reaped) child_unwatch(p->pid); /* the reap loop still collects it */
  subs_end(p, p->exited);
  close_fd(p, 0);
  close_fd(p, 1);
  if (p->pty_master >= 0) close(p->pty_master);
  event_free(p->drain_timer);
  event_free(p->expire_timer);
  while (p->ring_head) {
    struct seg *s = p->ring_head;
    p->ring_head = s->next;
    sbx_free(s);
  }
  for (size_t i = 0; i < p->argc; i++) sbx_free(p->argv[i]);
  sbx_free(p->argv);
  sbx_free(p);
}

/* ---- killing the tree ---- */

/* The session of a process from /proc/<pid>/stat (field 6), or -1. */
static pid_t stat_session(const char *pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char *rp = strrchr(buf, ')'); /* comm may hold spaces and parens */
  int ppid, pgrp, sid;
  char state;
  if (!rp || sscanf(rp + 1, " %c %d %d %d", &state, &ppid, &pgrp, &sid) != 4) return -1;
  return sid;
}

/* SIGKILL every process of session sid: a pty shell's jobs sit in process
 * groups of their own, which the shell's group kill misses. A pidfd taken
 * before the session is checked pins the process the check saw, so a pid
 * reused in between is never signalled. */
static void kill_session(pid_t sid) {
  DIR *d = opendir("/proc");
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    char *end;
    long pid = strtol(de->d_name, &end, 10);
    if (*end || pid <= 1 || pid == sid) continue;
    int pfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (pfd < 0 && errno != ENOSYS) continue;
    if (stat_session(de->d_name) == sid) {
      if (pfd >= 0) syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
      else kill((pid_t)pid, SIGKILL); /* a kernel before 5.3: the small race stays */
    }
    if (pfd >= 0) close(pfd);
  }
  closedir(d);
}

/* Every exec and pty leads its own process group, so a signal reaches the
 * whole tree a shell started (`sh -c 'sleep 300 & sleep 300'`), and a
 * SIGKILL of a pty reaches every job of its session too. Only an unreaped
 * leader is signalled: until it is reaped its pid, and so its group and
 * session ids, cannot be reused. A workload that left the group (setsid)
 * is not reached; it dies with the sandbox. */
void proc_signal(struct proc *p, int sig) {
  if (p->reaped) return;
  if (kill(-p->pid, sig) < 0) kill(p->pid, sig);
  if (p->is_pty && sig == SIGKILL) kill_session(p->pid);
}

void proc_orphan(struct proc *p) {
  p->oops = NULL;
  proc_signal(p, SIGKILL);
  p->code = p->reaped ? p->reap_code : -1;
  p->exited = true;
  proc_remove(p);
}

void proc_kill_all(void) {
  for (struct proc *p = procs; p; p = p->next) proc_signal(p, SIGKILL);
}

/* ---- verbs ---- */

void verb_ps(struct conn *c, sbx_wire_req *req) {
  size_t n = proc_count(), i = 0;
  sbx_wire_proc_info *items = sbx_calloc(n ? n : 1, sizeof *items);
  for (struct proc *p = procs; p; p = p->next, i++) {
    items[i].pid = (uint32_t)p->pid;
    items[i].argv.items = (const char **)p->argv;
    items[i].argv.len = p->argc;
    items[i].detached = p->detached;
    items[i].state = p->exited ? SBX_PROC_EXITED : SBX_PROC_RUNNING;
    items[i].has_exit_code = p->exited;
    items[i].exit_code = p->code;
    items[i].started_at_epoch_secs = p->started_at;
  }
  sbx_wire_resp r = {.type = SBX_RESP_PROCS, .u.procs = {items, n}};
  conn_send_resp(c, &r);
  sbx_free(items);
}

static bool pid_valid(struct conn *c, uint32_t pid) {
  if (pid == 0 || pid > 2147483647u) {
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "invalid pid");
    return false;
  }
  return true;
}

void verb_kill(struct conn *c, sbx_wire_req *req) {
  if (!pid_valid(c, req->u.kill.pid)) return;
  struct proc *p = proc_find((pid_t)req->u.kill.pid);
  if (!p) {
    conn_send_error(c, SBX_ERR_NOT_FOUND, "no such pid");
    return;
  }
  /* Never signal a reaped pid: it may belong to someone else by now. */
  proc_signal(p, req->u.kill.has_signal ? req->u.kill.signal : SIGKILL);
  conn_send_simple(c, SBX_RESP_DONE);
}

static void replay(struct conn *c, struct proc *p) {
  for (struct seg *s = p->ring_head; s; s = s->next) conn_send_bulk(c, bulk_of(s->kind), s->data, s->len);
}

void verb_logs(struct conn *c, sbx_wire_req *req) {
  if (!pid_valid(c, req->u.logs.pid)) return;
  struct proc *p = proc_find((pid_t)req->u.logs.pid);
  if (!p) {
    conn_send_error(c, SBX_ERR_NOT_FOUND, "no such pid");
    return;
  }
  replay(c, p);
  if (p->exited) conn_send_exit(c, p->code);
  conn_send_simple(c, SBX_RESP_DONE);
}

static void attach_abort(void *arg) {
  struct sub *s = arg;
  for (struct sub **ps = &s->p->subs; *ps; ps = &(*ps)->next) {
    if (*ps == s) {
      *ps = s->next;
      break;
    }
  }
  conn_rpc_done(s->c);
  sbx_free(s);
}

static const struct rpc_ops attach_ops = {.mode = SBX_INPUT_NONE, .abort = attach_abort};

void verb_attach(struct conn *c, sbx_wire_req *req) {
  if (!pid_valid(c, req->u.attach.pid)) return;
  struct proc *p = proc_find((pid_t)req->u.attach.pid);
  if (!p) {
    conn_send_error(c, SBX_ERR_NOT_FOUND, "no such pid");
    return;
  }
  /* Replay and subscription happen in one loop turn: no seam. */
  replay(c, p);
  if (p->exited) {
    conn_send_exit(c, p->code);
    return;
  }
  struct sub *s = sbx_calloc(1, sizeof *s);
  s->c = c;
  s->p = p;
  s->next = p->subs;
  p->subs = s;
  conn_rpc_begin(c, &attach_ops, s);
}
