/* tar.c - fs_push and fs_pull (§5.6) on the loop side, plus the archive
 * writer for fs_pull. libarchive's blocking reads and writes run on a worker
 * thread, fed through a block queue (push, tarq.c) or a pipe (pull), so the
 * loop keeps its usual backpressure: a slow client pauses the worker, a slow
 * disk pauses the client.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/util.h"
#include "silkd.h"
#include "tar.h"

/* ---- fs_push ---- */

struct push {
  struct conn *c; /* NULL once aborted */
  struct tar_job job;
  pthread_t thread;
  int notify_rd;
  struct event *notify_ev;
  int dest_fd;
  char stage[96];
  bool worker_reported, data_end, finished;
};

static int merge_dir(int sfd, int dfd, sbx_error *err) {
  DIR *d = fdopendir(dup(sfd));
  if (!d) return sbx_err_os(err, errno, "merge push");
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d))) {
    const char *n = de->d_name;
    if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
    struct stat es, ts;
    if (fstatat(sfd, n, &es, AT_SYMLINK_NOFOLLOW) < 0) {
      rc = sbx_err_os(err, errno, "merge push");
      break;
    }
    bool t_exists = fstatat(dfd, n, &ts, AT_SYMLINK_NOFOLLOW) == 0;
    if (S_ISDIR(es.st_mode) && t_exists && S_ISDIR(ts.st_mode)) {
      int s2 = openat(sfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      int d2 = openat(dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (s2 < 0 || d2 < 0) rc = sbx_err_os(err, errno, "merge push");
      else rc = merge_dir(s2, d2, err);
      if (s2 >= 0) close(s2);
      if (d2 >= 0) close(d2);
      continue;
    }
    if (S_ISDIR(es.st_mode) && t_exists && unlinkat(dfd, n, 0) < 0) {
      rc = sbx_err_os(err, errno, "merge push");
      break;
    }
    if (replace_at(sfd, n, dfd, n) < 0) rc = sbx_err_os(err, errno, "merge push");
  }
  closedir(d);
  return rc;
}

static void push_free(struct push *p) {
  if (p->notify_ev) event_free(p->notify_ev);
  if (p->notify_rd >= 0) close(p->notify_rd);
  if (p->job.notify_fd >= 0) close(p->job.notify_fd);
  if (p->job.root_fd >= 0) close(p->job.root_fd);
  if (p->dest_fd >= 0) {
    sbx_error e;
    rm_tree_at(p->dest_fd, p->stage, &e);
    close(p->dest_fd);
  }
  tarq_free(p->job.q);
  sbx_free(p);
}

/* Both the worker's verdict and (on success) data_end are in: finish the
 * RPC. */
static void push_finish(struct push *p) {
  if (p->finished) return;
  p->finished = true;
  tarq_end(p->job.q);
  pthread_join(p->thread, NULL);
  struct conn *c = p->c;
  sbx_error e;
  int rc = p->job.rc;
  if (rc < 0) sbx_err(&e, p->job.bad_request ? SBX_E_INVAL : SBX_E_INTERNAL, "%s", p->job.msg);
  else if (c) rc = merge_dir(p->job.root_fd, p->dest_fd, &e);
  /* Staging is gone before the client hears anything. */
  push_free(p);
  if (!c) return;
  if (rc < 0) conn_send_error(c, e.code == SBX_E_INVAL ? SBX_ERR_BAD_REQUEST : SBX_ERR_INTERNAL, "%s", e.msg);
  else conn_send_simple(c, SBX_RESP_DONE);
  conn_rpc_done(c);
}

static void push_maybe_finish(struct push *p) {
  if (!p->worker_reported) return;
  if (p->job.rc < 0 || !p->c) { /* failure or abort: stop feeding now */
    push_finish(p);
    return;
  }
  if (p->data_end) push_finish(p);
}

static void on_push_notify(evutil_socket_t fd, short what, void *arg) {
  struct push *p = arg;
  char b[16];
  ssize_t n = read(fd, b, sizeof b);
  bool result = false;
  for (ssize_t i = 0; i < n; i++) {
    if (b[i] == TARQ_NOTIFY_ROOM && p->c) conn_pause_input(p->c, false);
    if (b[i] == TARQ_NOTIFY_RESULT) result = true;
  }
  if (!result) return;
  p->worker_reported = true;
  push_maybe_finish(p); /* may free p */
}

static void push_data(void *rpc, sbx_wire_op op, const uint8_t *d, size_t n) {
  struct push *p = rpc;
  if (tarq_put(p->job.q, d, n)) conn_pause_input(p->c, true);
}

static void push_end(void *rpc) {
  struct push *p = rpc;
  p->data_end = true;
  tarq_end(p->job.q);
  push_maybe_finish(p);
}

static void push_abort(void *rpc) {
  struct push *p = rpc;
  struct conn *c = p->c;
  p->c = NULL;
  conn_rpc_done(c);
  /* The worker sees EOF (a truncated archive), reports, and we clean up. */
  tarq_end(p->job.q);
  push_maybe_finish(p);
}

static const struct rpc_ops push_ops = {
    .mode = SBX_INPUT_UPLOAD, .input = push_data, .input_end = push_end, .abort = push_abort};

void verb_fs_push(struct conn *c, sbx_wire_req *req) {
  const char *dest = req->u.fs_push.dest;
  sbx_error e;
  if (sbxi_mkdirs(dest, 0777) < 0) {
    sbx_err_os(&e, errno, "mkdir dest");
    conn_send_sbx_error(c, &e, SBX_ERR_INTERNAL);
    return;
  }
  struct push *p = sbx_calloc(1, sizeof *p);
  p->notify_rd = p->job.notify_fd = p->job.root_fd = p->job.pipe_fd = -1;
  p->dest_fd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (p->dest_fd < 0) {
    sbx_err_os(&e, errno, "mkdir dest");
    conn_send_sbx_error(c, &e, SBX_ERR_INTERNAL);
    push_free(p);
    return;
  }
  snprintf(p->stage, sizeof p->stage, ".silkd-push-%d-%llu", (int)silkd.pid, (unsigned long long)silkd_next_id());
  int nfd[2];
  if (mkdirat(p->dest_fd, p->stage, 0700) < 0 ||
      (p->job.root_fd = openat(p->dest_fd, p->stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
      pipe2(nfd, O_CLOEXEC) < 0) {
    sbx_err_os(&e, errno, "stage push");
    conn_send_sbx_error(c, &e, SBX_ERR_INTERNAL);
    if (p->job.root_fd < 0) { /* mkdirat may have failed: nothing to remove */
      struct stat st;
      if (fstatat(p->dest_fd, p->stage, &st, AT_SYMLINK_NOFOLLOW) < 0) p->stage[0] = 0;
    }
    push_free(p);
    return;
  }
  p->c = c;
  p->job.notify_fd = nfd[1];
  p->job.q = tarq_new(nfd[1]);
  p->notify_rd = nfd[0];
  set_nonblock(nfd[0]);
  p->notify_ev = event_new(silkd.base, nfd[0], EV_READ | EV_PERSIST, on_push_notify, p);
  event_add(p->notify_ev, NULL);
  pthread_create(&p->thread, NULL, tar_extract_worker, &p->job);
  conn_rpc_begin(c, &push_ops, p);
}

/* ---- fs_pull ---- */

struct pull {
  struct conn *c;
  struct tar_job job;
  pthread_t thread;
  int rd;
  struct event *ev;
};

static void pull_end(struct pull *p, bool send) {
  struct conn *c = p->c;
  event_free(p->ev);
  close(p->rd); /* a worker still writing gets EPIPE and stops */
  pthread_join(p->thread, NULL);
  if (send) {
    if (p->job.rc < 0) conn_send_error(c, SBX_ERR_INTERNAL, "%s", p->job.msg);
    else conn_send_simple(c, SBX_RESP_DONE);
  }
  close(p->job.root_fd);
  sbx_free((char *)p->job.base);
  sbx_free(p);
  conn_rpc_done(c);
}

static void on_pull_data(evutil_socket_t fd, short what, void *arg) {
  struct pull *p = arg;
  static uint8_t buf[SILKD_BULK];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    pull_end(p, true);
    return;
  }
  if (!conn_send_bulk(p->c, SBX_BULK_DATA, buf, (size_t)n)) {
    event_del(p->ev); /* abort follows */
    return;
  }
  if (conn_out_len(p->c) >= SILKD_OUT_HIGH) {
    event_del(p->ev);
    conn_want_writable(p->c);
  }
}

static void pull_writable(void *rpc) {
  struct pull *p = rpc;
  event_add(p->ev, NULL);
}

static void pull_abort(void *rpc) { pull_end(rpc, false); }

static const struct rpc_ops pull_ops = {.mode = SBX_INPUT_NONE, .writable = pull_writable, .abort = pull_abort};

void verb_fs_pull(struct conn *c, sbx_wire_req *req) {
  /* Drop trailing "/" and "." components; what remains ends in the basename. */
  char *path = sbx_strdup(req->u.fs_pull.path);
  size_t len = strlen(path);
  for (;;) {
    while (len > 1 && path[len - 1] == '/') path[--len] = 0;
    if (len >= 2 && path[len - 1] == '.' && path[len - 2] == '/') path[--len] = 0;
    else if (len == 1 && path[0] == '.') path[--len] = 0;
    else break;
  }
  char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  if (!*base || !strcmp(base, "..") || !strcmp(base, ".") || !strcmp(path, "/")) {
    sbx_free(path);
    conn_send_error(c, SBX_ERR_BAD_REQUEST, "invalid path");
    return;
  }
  const char *parent = ".";
  if (slash == path) parent = "/";
  else if (slash) {
    *slash = 0;
    parent = path;
  }
  struct pull *p = sbx_calloc(1, sizeof *p);
  p->c = c;
  p->job.base = sbx_strdup(base);
  p->job.root_fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  sbx_free(path);
  int fds[2];
  if (p->job.root_fd < 0 || pipe2(fds, O_CLOEXEC) < 0) {
    conn_send_error(c, SBX_ERR_INTERNAL, "tar create: %s: %s", p->job.base, strerror(errno));
    if (p->job.root_fd >= 0) close(p->job.root_fd);
    sbx_free((char *)p->job.base);
    sbx_free(p);
    return;
  }
  fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);
  p->rd = fds[0];
  set_nonblock(p->rd);
  p->job.pipe_fd = fds[1];
  p->ev = event_new(silkd.base, p->rd, EV_READ | EV_PERSIST, on_pull_data, p);
  event_add(p->ev, NULL);
  pthread_create(&p->thread, NULL, tar_create_worker, &p->job);
  conn_rpc_begin(c, &pull_ops, p);
}

/* ---- the archive writer (worker thread) ---- */

/* Files with several links, so later names are stored as hard links to the
 * first one, as tar does. */
struct linkseen {
  dev_t dev;
  ino_t ino;
  char *name;
};
struct links {
  struct linkseen *v;
  size_t n;
};

static const char *link_first(struct links *l, const struct stat *st, const char *arcname) {
  for (size_t i = 0; i < l->n; i++)
    if (l->v[i].dev == st->st_dev && l->v[i].ino == st->st_ino) return l->v[i].name;
  l->v = sbx_reallocarray(l->v, l->n + 1, sizeof *l->v);
  l->v[l->n++] = (struct linkseen){st->st_dev, st->st_ino, sbx_strdup(arcname)};
  return NULL;
}

static int add_tree(struct archive *a, int dirfd, const char *name, const char *arcname, struct tar_job *j,
                    uint8_t *buf, struct links *links) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    snprintf(j->msg, sizeof j->msg, "tar create: %s: Cannot stat: %s", arcname, strerror(errno));
    return -1;
  }
  struct archive_entry *e = archive_entry_new();
  archive_entry_copy_stat(e, &st);
  archive_entry_set_pathname(e, arcname);
  int fd = -1, rc = 0;
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    ssize_t n = readlinkat(dirfd, name, target, sizeof target - 1);
    if (n < 0) n = 0;
    target[n] = 0;
    archive_entry_set_symlink(e, target);
  } else if (S_ISREG(st.st_mode) && st.st_nlink > 1 && link_first(links, &st, arcname)) {
    archive_entry_set_hardlink(e, link_first(links, &st, arcname));
    archive_entry_set_size(e, 0);
  } else if (S_ISREG(st.st_mode)) {
    fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      snprintf(j->msg, sizeof j->msg, "tar create: %s: Cannot open: %s", arcname, strerror(errno));
      archive_entry_free(e);
      return -1;
    }
  } else if (!S_ISDIR(st.st_mode)) {
    archive_entry_set_size(e, 0);
  }
  if (archive_write_header(a, e) < ARCHIVE_WARN) {
    snprintf(j->msg, sizeof j->msg, "tar create: %s", archive_error_string(a));
    rc = -1;
  }
  archive_entry_free(e);
  if (rc == 0 && fd >= 0) {
    off_t left = st.st_size; /* a file that grows is cut at its header size */
    while (left > 0) {
      ssize_t n = read(fd, buf, left < SILKD_BULK ? (size_t)left : SILKD_BULK);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        snprintf(j->msg, sizeof j->msg, "tar create: %s: Read error", arcname);
        rc = -1;
        break;
      }
      if (archive_write_data(a, buf, (size_t)n) < 0) {
        snprintf(j->msg, sizeof j->msg, "tar create: %s", archive_error_string(a));
        rc = -1;
        break;
      }
      left -= n;
    }
  }
  if (fd >= 0) close(fd);
  if (rc == 0 && S_ISDIR(st.st_mode)) {
    int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = sub >= 0 ? fdopendir(sub) : NULL;
    if (!d) {
      if (sub >= 0) close(sub);
      snprintf(j->msg, sizeof j->msg, "tar create: %s: Cannot open: %s", arcname, strerror(errno));
      return -1;
    }
    struct dirent *de;
    size_t alen = strlen(arcname);
    while (rc == 0 && (de = readdir(d))) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      char *child = sbx_malloc(alen + strlen(de->d_name) + 2);
      sprintf(child, "%s/%s", arcname, de->d_name);
      rc = add_tree(a, sub, de->d_name, child, j, buf, links);
      sbx_free(child);
    }
    closedir(d);
  }
  return rc;
}

void *tar_create_worker(void *arg) {
  struct tar_job *j = arg;
  struct archive *a = archive_write_new();
  archive_write_set_format_gnutar(a);
  archive_write_set_bytes_per_block(a, 65536);
  uint8_t *buf = sbx_malloc(SILKD_BULK);
  struct links links = {0};
  j->rc = -1;
  if (archive_write_open_fd(a, j->pipe_fd) != ARCHIVE_OK) {
    snprintf(j->msg, sizeof j->msg, "tar create: %s", archive_error_string(a));
  } else if (add_tree(a, j->root_fd, j->base, j->base, j, buf, &links) == 0) {
    if (archive_write_close(a) == ARCHIVE_OK) j->rc = 0;
    else snprintf(j->msg, sizeof j->msg, "tar create: %s", archive_error_string(a));
  }
  archive_write_free(a);
  for (size_t i = 0; i < links.n; i++) sbx_free(links.v[i].name);
  sbx_free(links.v);
  sbx_free(buf);
  close(j->pipe_fd);
  return NULL;
}
