/* durable.c - group commit of the claims log when sync_claims is on.
 *
 * A claim, renew or release must not be acknowledged before its claims.log
 * record is on disk (§5.13). An fdatasync in the event loop would stall
 * every other client for its length (0.4 ms median, over 1 ms at p90 on
 * this node's disk) and sync each record alone. Instead the record is
 * appended at once, the answer waits here, and one thread runs
 * fdatasync: every record appended before a sync starts is covered by it,
 * so claims that arrive while one sync runs share the next one. The loop
 * keeps serving meanwhile. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "sandboxd.h"

struct waiter {
  struct waiter *next;
  uint64_t seq;
  struct http_req *req;
  int status;
  json_t *body; /* NULL: no body (204) */
  const char *verb;
};

struct durable {
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int fd;        /* claims.log */
  int efd;       /* thread -> loop */
  struct event *ev;
  uint64_t want; /* sync requested up to this record */
  uint64_t done; /* synced up to this record */
  int err;       /* errno of a failed sync, 0 if none */
  bool stop;
  struct waiter *head, **tail; /* loop only, in record order */
};

static void *sync_thread(void *arg) {
  struct durable *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->stop && s->want <= s->done) pthread_cond_wait(&s->cv, &s->mu);
    if (s->stop) break;
    uint64_t target = s->want;
    pthread_mutex_unlock(&s->mu);
    int rc = fdatasync(s->fd);
    int e = errno;
    pthread_mutex_lock(&s->mu);
    s->done = target;
    if (rc < 0) s->err = e;
    uint64_t one = 1;
    ssize_t w = write(s->efd, &one, sizeof one);
    (void)w;
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* lost: neither the log nor a snapshot could be synced, so the change is
 * not known to be on disk and must not be acknowledged. It stays applied
 * in memory (unlike a failed append, nothing undoes it here). */
static void answer(struct waiter *w, bool lost) {
  if (lost) {
    json_decref(w->body);
    char msg[96];
    snprintf(msg, sizeof msg, "%s failed: journal sync failed", w->verb);
    reply_error(w->req, 500, msg);
  } else if (w->body) {
    reply_json(w->req, w->status, w->body);
  } else {
    http_reply(w->req, w->status, NULL, NULL, 0, NULL);
  }
  sbx_free(w);
}

/* After a failed fdatasync of the log: a synced snapshot holds every
 * record as well. false when that failed too. */
static bool resync(struct sbxd *d, int e) {
  sbx_error err;
  sbx_error_log("claims journal: fdatasync claims.log: %s; writing a snapshot", strerror(e));
  if (journal_repair(d, &err) == 0) return true;
  journal_failed(d, &err);
  return false;
}

/* Answer every waiter whose record is covered by a finished sync; ask for
 * the next sync if some still wait. */
static void flush(struct sbxd *d) {
  struct durable *s = d->durable;
  pthread_mutex_lock(&s->mu);
  uint64_t done = s->done;
  int e = s->err;
  s->err = 0;
  pthread_mutex_unlock(&s->mu);
  bool lost = e && !resync(d, e);
  while (s->head && s->head->seq <= done) {
    struct waiter *w = s->head;
    s->head = w->next;
    if (!s->head) s->tail = &s->head;
    answer(w, lost);
  }
  if (s->head) {
    pthread_mutex_lock(&s->mu);
    if (s->want <= s->done) {
      s->want = d->log_seq;
      pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
  }
}

static void on_synced(evutil_socket_t fd, short what, void *arg) {
  struct sbxd *d = arg;
  uint64_t v;
  ssize_t r = read(d->durable->efd, &v, sizeof v);
  (void)r;
  flush(d);
}

bool durable_async(const struct sbxd *d) { return d->durable != NULL; }

int durable_start(struct sbxd *d, sbx_error *err) {
  struct durable *s = sbx_calloc(1, sizeof *s);
  s->fd = d->log_fd;
  s->tail = &s->head;
  s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->efd < 0) {
    int e = errno;
    sbx_free(s);
    return sbx_err_os(err, e, "eventfd");
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->done = s->want = d->log_seq;
  int rc = pthread_create(&s->th, NULL, sync_thread, s);
  if (rc != 0) {
    close(s->efd);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    sbx_free(s);
    return sbx_err_os(err, rc, "pthread_create");
  }
  s->ev = event_new(d->base, s->efd, EV_READ | EV_PERSIST, on_synced, d);
  event_add(s->ev, NULL);
  d->durable = s;
  return 0;
}

void durable_reply(struct sbxd *d, struct http_req *req, const char *verb, int status, json_t *body) {
  struct durable *s = d->durable;
  if (!s || !d->cfg->sync_claims) {
    if (body) reply_json(req, status, body);
    else http_reply(req, status, NULL, NULL, 0, NULL);
    return;
  }
  struct waiter *w = sbx_calloc(1, sizeof *w);
  w->seq = d->log_seq;
  w->req = req;
  w->status = status;
  w->body = body;
  w->verb = verb;
  /* The handler's state is gone once this returns; a client that leaves
   * meanwhile just loses the answer (http_reply drops it). */
  req->on_close = NULL;
  *s->tail = w;
  s->tail = &w->next;
  pthread_mutex_lock(&s->mu);
  bool covered = s->done >= w->seq;
  if (!covered && s->want <= s->done) {
    s->want = d->log_seq;
    pthread_cond_signal(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  if (covered) flush(d);
}

void durable_stop(struct sbxd *d) {
  struct durable *s = d->durable;
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->th, NULL);
  /* What still waits is answered after one last sync. */
  bool lost = s->head && fdatasync(s->fd) < 0 && !resync(d, errno);
  while (s->head) {
    struct waiter *w = s->head;
    s->head = w->next;
    answer(w, lost);
  }
  event_free(s->ev);
  close(s->efd);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  sbx_free(s);
  d->durable = NULL;
}
