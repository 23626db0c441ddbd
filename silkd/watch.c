/* watch.c - fs_watch (§5.8): inotify on the loop, bound to its connection.
 *
 * A recursive watch adds a watch per directory, walking with O_NOFOLLOW and
 * IN_DONT_FOLLOW|IN_ONLYDIR so no symlink below the watched path leads it
 * elsewhere; a directory created (or moved in) later gets its own watch, and
 * what it already holds by then is reported as created, since those entries
 * came before its watch could see them. Events wait in a queue of 256 once
 * the connection's output passes WATCH_OUT_HIGH; a full queue, a kernel
 * queue overflow or a watcher failure end the watch with error{internal}.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "silkd.h"

#define WATCH_QUEUE 256              /* events waiting for the client (§6) */
#define WATCH_OUT_HIGH (64 * 1024)   /* output bytes before events queue up */
#define WATCH_MASK (IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_MOVE_SELF | IN_DELETE | IN_DELETE_SELF)

struct watch {
  struct conn *c;
  int ifd;
  struct event *ev;
  bool recursive;
  char **paths; /* by watch descriptor (the kernel numbers them from 1) */
  size_t npaths;
  char *queue[WATCH_QUEUE]; /* encoded frames, a ring */
  size_t qhead, qlen;
  size_t qbytes[WATCH_QUEUE];
  bool done;
};

static void watch_free(struct watch *w) {
  struct conn *c = w->c;
  if (w->ev) event_free(w->ev);
  if (w->ifd >= 0) close(w->ifd);
  for (size_t i = 0; i < w->npaths; i++) sbx_free(w->paths[i]);
  sbx_free(w->paths);
  for (size_t i = 0; i < w->qlen; i++) sbx_free(w->queue[(w->qhead + i) % WATCH_QUEUE]);
  sbx_free(w);
  conn_rpc_done(c);
}

static void set_path(struct watch *w, int wd, const char *path) {
  if (wd < 0) return;
  if ((size_t)wd >= w->npaths) {
    size_t n = (size_t)wd * 2 + 16;
    w->paths = sbx_realloc(w->paths, n * sizeof *w->paths);
    memset(w->paths + w->npaths, 0, (n - w->npaths) * sizeof *w->paths);
    w->npaths = n;
  }
  sbx_free(w->paths[wd]);
  w->paths[wd] = path ? sbx_strdup(path) : NULL;
}

/* Queued frames go out while the output is short. */
static void drain(struct watch *w) {
  while (w->qlen > 0 && conn_out_len(w->c) < WATCH_OUT_HIGH) {
    char *f = w->queue[w->qhead];
    size_t n = w->qbytes[w->qhead];
    w->qhead = (w->qhead + 1) % WATCH_QUEUE;
    w->qlen--;
    bool ok = conn_send_raw(w->c, f, n);
    sbx_free(f);
    if (!ok) return; /* abort follows */
  }
  if (w->qlen > 0) conn_want_writable(w->c);
}

/* The final frame: what is queued goes first, then the error. */
static void fail(struct watch *w, const char *msg) {
  if (w->done) return;
  w->done = true;
  while (w->qlen > 0) {
    char *f = w->queue[w->qhead];
    conn_send_raw(w->c, f, w->qbytes[w->qhead]);
    sbx_free(f);
    w->qhead = (w->qhead + 1) % WATCH_QUEUE;
    w->qlen--;
  }
  conn_send_error(w->c, SBX_ERR_INTERNAL, "%s", msg);
}

static void push(struct watch *w, sbx_wire_event_kind kind, const char *path) {
  if (w->done) return;
  sbx_buf b = SBX_BUF_INIT(SBX_WIRE_FRAME_CAP);
  sbx_error e;
  sbx_wire_resp r = {.type = SBX_RESP_EVENT, .u.event = {kind, path}};
  if (sbx_wire_encode_resp(&b, &r, &e) < 0) {
    sbx_buf_free(&b);
    return; /* a path cannot come near the cap */
  }
  if (w->qlen == 0 && conn_out_len(w->c) < WATCH_OUT_HIGH) {
    conn_send_raw(w->c, b.ptr, b.len);
    sbx_buf_free(&b);
    return;
  }
  if (w->qlen == WATCH_QUEUE) {
    sbx_buf_free(&b);
    fail(w, "watch event queue overflow");
    return;
  }
  size_t i = (w->qhead + w->qlen++) % WATCH_QUEUE;
  w->qbytes[i] = b.len;
  w->queue[i] = sbx_buf_steal(&b, NULL);
  conn_want_writable(w->c);
}

static char *join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = sbx_malloc(a + b + 2);
  memcpy(p, dir, a);
  if (a == 0 || dir[a - 1] != '/') p[a++] = '/'; /* "/" and "d/" join with a single slash */
  memcpy(p + a, name, b + 1);
  return p;
}

/* Watch dir and, recursively, the directories below it (never through a
 * symlink); report what is found as created when announce is set. Returns
 * an errno from inotify_add_watch that should end the watch, else 0. */
static int add_tree(struct watch *w, const char *dir, bool announce) {
  int wd = inotify_add_watch(w->ifd, dir, WATCH_MASK | IN_DONT_FOLLOW | IN_ONLYDIR);
  if (wd < 0) return errno == ENOSPC || errno == ENOMEM ? errno : 0; /* gone or replaced meanwhile */
  set_path(w, wd, dir);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0) close(fd);
    return 0;
  }
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && !w->done && (de = readdir(d)) != NULL) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char *p = join(dir, de->d_name);
    if (announce) push(w, SBX_EVENT_CREATED, p);
    unsigned char t = de->d_type;
    struct stat st;
    if (t == DT_UNKNOWN && fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) t = DT_DIR;
    if (t == DT_DIR) rc = add_tree(w, p, announce);
    sbx_free(p);
  }
  closedir(d);
  return rc;
}

/* A directory moved out of the tree keeps its watches, which would go on
 * reporting what happens there under its old path: drop them. A move
 * within the tree is a MOVED_FROM and a MOVED_TO, which adds them back. */
static void drop_tree(struct watch *w, const char *dir) {
  size_t n = strlen(dir);
  for (size_t wd = 0; wd < w->npaths; wd++) {
    const char *p = w->paths[wd];
    if (!p || strncmp(p, dir, n) != 0 || (p[n] != '\0' && p[n] != '/')) continue;
    inotify_rm_watch(w->ifd, (int)wd);
    set_path(w, (int)wd, NULL);
  }
}

static sbx_wire_event_kind kind_of(uint32_t mask) {
  if (mask & IN_CREATE) return SBX_EVENT_CREATED;
  if (mask & (IN_MOVED_FROM | IN_MOVED_TO | IN_MOVE_SELF)) return SBX_EVENT_RENAMED;
  if (mask & (IN_DELETE | IN_DELETE_SELF)) return SBX_EVENT_DELETED;
  return SBX_EVENT_MODIFIED;
}

static void handle(struct watch *w, const struct inotify_event *ev) {
  if (ev->mask & IN_Q_OVERFLOW) {
    fail(w, "watch event queue overflow (kernel)");
    return;
  }
  if (ev->wd < 0 || (size_t)ev->wd >= w->npaths || !w->paths[ev->wd]) return;
  if (ev->mask & IN_IGNORED) { /* the directory went away */
    set_path(w, ev->wd, NULL);
    return;
  }
  if (!(ev->mask & WATCH_MASK)) return;
  const char *dir = w->paths[ev->wd];
  char *p = ev->len && ev->name[0] ? join(dir, ev->name) : sbx_strdup(dir);
  push(w, kind_of(ev->mask), p);
  if (w->recursive && (ev->mask & IN_ISDIR) && (ev->mask & IN_MOVED_FROM) && ev->len) drop_tree(w, p);
  if (w->recursive && (ev->mask & IN_ISDIR) && (ev->mask & (IN_CREATE | IN_MOVED_TO))) {
    int rc = add_tree(w, p, true);
    if (rc) {
      char m[128];
      snprintf(m, sizeof m, "watch: %s (os error %d)", strerror(rc), rc);
      fail(w, m);
    }
  }
  sbx_free(p);
}

static void on_inotify(evutil_socket_t fd, short what, void *arg) {
  struct watch *w = arg;
  char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
  while (!w->done) {
    ssize_t n = read(w->ifd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      fail(w, n == 0 ? "watch: inotify closed" : "watch: inotify read failed");
      break;
    }
    for (char *p = buf; p < buf + n && !w->done;) {
      const struct inotify_event *ev = (const struct inotify_event *)p;
      handle(w, ev);
      p += sizeof *ev + ev->len;
    }
  }
  if (w->done) { /* the error went out: the RPC ends here */
    event_del(w->ev);
    watch_free(w);
  }
}

static void watch_writable(void *rpc) { drain(rpc); }
static void watch_abort(void *rpc) { watch_free(rpc); }
static const struct rpc_ops watch_ops = {.mode = SBX_INPUT_CANCEL, .writable = watch_writable, .abort = watch_abort};

void verb_fs_watch(struct conn *c, sbx_wire_req *req) {
  const char *path = req->u.fs_watch.path;
  struct stat st;
  if (stat(path, &st) < 0) {
    conn_send_error(c, errno == ENOENT ? SBX_ERR_NOT_FOUND : SBX_ERR_INTERNAL, "watch: %s (os error %d)",
                    strerror(errno), errno);
    return;
  }
  struct watch *w = sbx_calloc(1, sizeof *w);
  w->c = c;
  w->recursive = req->u.fs_watch.has_recursive && req->u.fs_watch.recursive;
  w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  /* The path itself is taken as given (§5.5); only what lies below it is
   * walked without following symlinks. */
  int wd = w->ifd < 0 ? -1 : inotify_add_watch(w->ifd, path, WATCH_MASK);
  int rc = wd < 0 ? errno : 0;
  if (rc == 0) set_path(w, wd, path);
  if (rc == 0 && w->recursive && S_ISDIR(st.st_mode)) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    while (d && rc == 0 && (de = readdir(d)) != NULL) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      struct stat cs;
      bool dir = de->d_type == DT_DIR ||
                 (de->d_type == DT_UNKNOWN && fstatat(fd, de->d_name, &cs, AT_SYMLINK_NOFOLLOW) == 0 &&
                  S_ISDIR(cs.st_mode));
      if (!dir) continue;
      char *p = join(path, de->d_name);
      rc = add_tree(w, p, false);
      sbx_free(p);
    }
    if (d) closedir(d);
    else if (fd >= 0) close(fd);
  }
  if (rc != 0) {
    conn_send_error(c, rc == ENOENT ? SBX_ERR_NOT_FOUND : SBX_ERR_INTERNAL, "watch: %s (os error %d)", strerror(rc),
                    rc);
    w->c = NULL;
    if (w->ifd >= 0) close(w->ifd);
    for (size_t i = 0; i < w->npaths; i++) sbx_free(w->paths[i]);
    sbx_free(w->paths);
    sbx_free(w);
    return;
  }
  w->ev = event_new(silkd.base, w->ifd, EV_READ | EV_PERSIST, on_inotify, w);
  event_add(w->ev, NULL);
  conn_rpc_begin(c, &watch_ops, w);
  conn_send_simple(c, SBX_RESP_READY);
}
