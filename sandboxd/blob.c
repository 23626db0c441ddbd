/* blob.c - a checkpoint record as a tar stream for peers (spec §4.17).
 *
 * GET (root): application/x-tar, close-delimited: meta.json (the record,
 * with its internal archive flag), then export/... (directories and regular
 * files only, never links or devices), then an empty ".record-complete":
 * a stream without it was cut short. HEAD: the ownership probe, without a
 * bearer: 200 when this node holds a record that can be branched (no
 * archive, its export present), else 404. This node has no cluster_key
 * (single node), so the probe is open as §4.17 says for that case.
 *
 * The connection is taken off the event loop and written with blocking
 * writes on a pool worker (a send timeout bounds a stalled reader); the
 * record is held in use meanwhile, so a delete removes it only afterwards. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/path.h"
#include "sandboxd.h"
#include "checkpoint.h"
#include "http.h"

#define BLOCK 512
#define SEND_TIMEOUT_S 30
#define DEPTH_MAX 256

struct blob_op {
  struct sbxd *d;
  int fd;
  char dir[PATH_MAX];
  char *meta;
  bool ok;
};

static bool put(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= (size_t)w;
  }
  return true;
}

static bool pad(int fd, size_t n) {
  static const char zero[BLOCK];
  return n % BLOCK == 0 || put(fd, zero, BLOCK - n % BLOCK);
}

/* One ustar header (a GNU long-name entry first when name needs it). */
static bool header(int fd, const char *name, char type, mode_t mode, size_t size, time_t mtime) {
  size_t nl = strlen(name);
  if (size > 077777777777ull) return false; /* 8 GiB, ustar's 11 octal digits: the stream ends cut */
  if (nl >= 100 && !(header(fd, "././@LongLink", 'L', 0644, nl + 1, 0) && put(fd, name, nl + 1) && pad(fd, nl + 1)))
    return false;
  char h[BLOCK];
  memset(h, 0, sizeof h);
  memcpy(h, name, nl < 100 ? nl : 99);
  snprintf(h + 100, 8, "%07o", (unsigned)(mode & 07777));
  snprintf(h + 108, 8, "%07o", 0u);
  snprintf(h + 116, 8, "%07o", 0u);
  snprintf(h + 124, 12, "%011llo", (unsigned long long)size & 077777777777ull);
  snprintf(h + 136, 12, "%011llo", (unsigned long long)(mtime > 0 ? mtime : 0) & 077777777777ull);
  h[156] = type;
  memcpy(h + 257, "ustar  ", 8); /* GNU magic: readers then take the long-name entries */
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < sizeof h; i++) sum += (unsigned char)h[i];
  snprintf(h + 148, 8, "%06o", sum);
  return put(fd, h, sizeof h);
}

static bool send_file(int fd, int dfd, const char *name, const char *path, const struct stat *st) {
  int in = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0 || !header(fd, path, '0', st->st_mode, (size_t)st->st_size, st->st_mtime)) {
    if (in >= 0) close(in);
    return false;
  }
  char buf[65536];
  off_t left = st->st_size;
  while (left > 0) {
    ssize_t n = read(in, buf, left < (off_t)sizeof buf ? (size_t)left : sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || !put(fd, buf, (size_t)n)) break; /* shorter than its header: the stream ends cut */
    left -= n;
  }
  close(in);
  return left == 0 && pad(fd, (size_t)st->st_size);
}

static bool send_dir(int fd, int dfd, const char *path, int depth) {
  if (depth > DEPTH_MAX) {
    close(dfd);
    return false;
  }
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return false;
  }
  bool ok = true;
  struct dirent *de;
  while (ok && (de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    char sub[PATH_MAX];
    struct stat st;
    if (sbxi_path_fmt(sub, sizeof sub, NULL, "%s/%s", path, de->d_name) < 0 ||
        fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      ok = false;
      break;
    }
    if (S_ISREG(st.st_mode)) {
      ok = send_file(fd, dirfd(d), de->d_name, sub, &st);
    } else if (S_ISDIR(st.st_mode)) {
      char dn[PATH_MAX];
      int c = sbxi_path_fmt(dn, sizeof dn, NULL, "%s/", sub) < 0
                  ? -1
                  : openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (c >= 0 && !header(fd, dn, '5', st.st_mode, 0, st.st_mtime)) {
        close(c);
        c = -1;
      }
      ok = c >= 0 && send_dir(fd, c, sub, depth + 1);
    } /* links, devices (whiteouts), fifos and sockets are not sent (§4.17) */
  }
  closedir(d);
  return ok;
}

static void blob_work(void *arg) {
  struct blob_op *op = arg;
  struct timeval tv = {.tv_sec = SEND_TIMEOUT_S};
  setsockopt(op->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int fl = fcntl(op->fd, F_GETFL);
  if (fl >= 0) fcntl(op->fd, F_SETFL, fl & ~O_NONBLOCK);
  static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\nConnection: close\r\n\r\n";
  size_t ml = strlen(op->meta);
  char exp[PATH_MAX];
  bool ok = put(op->fd, head, sizeof head - 1) && header(op->fd, "meta.json", '0', 0644, ml, time(NULL)) &&
            put(op->fd, op->meta, ml) && pad(op->fd, ml);
  int efd = ok && sbxi_path_fmt(exp, sizeof exp, NULL, "%s/export", op->dir) == 0
                ? open(exp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                : -1;
  struct stat st;
  ok = ok && efd >= 0 && fstat(efd, &st) == 0 && header(op->fd, "export/", '5', st.st_mode, 0, st.st_mtime);
  if (ok) {
    ok = send_dir(op->fd, efd, "export", 0);
    efd = -1; /* closed by send_dir */
  }
  if (efd >= 0) close(efd);
  static const char end[2 * BLOCK];
  op->ok = ok && header(op->fd, ".record-complete", '0', 0644, 0, time(NULL)) && put(op->fd, end, sizeof end);
}

static void blob_done(void *arg, bool cancelled) {
  struct blob_op *op = arg;
  if (cancelled || !op->ok) sbx_warn("checkpoint blob %s: the stream was cut short", op->dir);
  close(op->fd);
  checkpoint_use(op->dir, false);
  free(op->meta);
  sbx_free(op);
}

void h_checkpoint_blob(struct sbxd *d, struct http_req *req, const char *id, bool head) {
  char dir[PATH_MAX], exp[PATH_MAX];
  struct caller who;
  if (!head && auth_node(d, req, true, &who) < 0) return;
  json_t *rec = checkpoint_record(d, id, dir, sizeof dir);
  if (head) { /* the probe: a copy this node could branch */
    struct stat st;
    bool held = rec && !json_is_true(json_object_get(rec, "archive")) &&
                sbxi_path_fmt(exp, sizeof exp, NULL, "%s/export", dir) == 0 && stat(exp, &st) == 0;
    json_decref(rec);
    http_reply(req, held ? 200 : 404, NULL, NULL, 0, NULL);
    return;
  }
  if (!rec) {
    reply_error(req, 404, "unknown checkpoint");
    return;
  }
  char *meta = json_dumps(rec, JSON_COMPACT);
  json_decref(rec);
  struct evbuffer *pipelined = evbuffer_new();
  bool eof;
  int fd = meta && pipelined ? http_detach(req, pipelined, &eof) : -1;
  if (pipelined) evbuffer_free(pipelined);
  if (fd < 0) {
    free(meta);
    return; /* the client is gone */
  }
  struct blob_op *op = sbx_calloc(1, sizeof *op);
  op->d = d;
  op->fd = fd;
  op->meta = meta;
  snprintf(op->dir, sizeof op->dir, "%s", dir);
  checkpoint_use(op->dir, true);
  sbx_pool_mgr_submit(d->pm, blob_work, blob_done, op, false);
}
