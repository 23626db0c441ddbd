/* tarq.c - the fs_push upload queue between the loop and the extract worker.
 *
 * The loop copies each decoded `data` payload into 1 MiB blocks and hands
 * full blocks over; libarchive reads them in place through its read
 * callback. A pipe here cost a copy into the kernel and another out of it
 * for every byte, and the two threads contended on the pipe's lock; now a
 * block changes hands under a mutex once per MiB. At most TARQ_BLOCKS blocks
 * are in use: past that the loop pauses the client, and the worker wakes it
 * with one byte on the notify pipe when it gives a block back. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "silkd.h"
#include "tar.h"

#define TARQ_BLOCK (1024 * 1024)
#define TARQ_BLOCKS 8 /* 8 MiB, as SILKD_STDIN_HIGH */

struct block {
  struct block *next;
  size_t len;
  uint8_t data[TARQ_BLOCK];
};

struct tarq {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct block *head, *tail; /* full blocks for the worker */
  struct block *spare;       /* given back by the worker */
  struct block *cur;         /* loop: being filled */
  struct block *reading;     /* worker: libarchive's current buffer */
  int in_use;                /* blocks not on the spare list */
  bool eof;                  /* loop: nothing more will come */
  bool dead;                 /* worker: done, drop whatever comes */
  bool waiting;              /* loop paused until a block comes back */
  int notify_fd;
};

struct tarq *tarq_new(int notify_fd) {
  struct tarq *q = sbx_calloc(1, sizeof *q);
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  q->notify_fd = notify_fd;
  return q;
}

static void free_list(struct block *b) {
  while (b) {
    struct block *n = b->next;
    sbx_free(b);
    b = n;
  }
}

void tarq_free(struct tarq *q) {
  if (!q) return;
  free_list(q->head);
  free_list(q->spare);
  sbx_free(q->cur);
  sbx_free(q->reading);
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
  sbx_free(q);
}

/* Under the lock. */
static void hand_over(struct tarq *q) {
  q->cur->next = NULL;
  if (q->tail) q->tail->next = q->cur;
  else q->head = q->cur;
  q->tail = q->cur;
  q->cur = NULL;
  pthread_cond_signal(&q->cv);
}

bool tarq_put(struct tarq *q, const uint8_t *d, size_t n) {
  while (n > 0) {
    if (!q->cur) {
      pthread_mutex_lock(&q->mu);
      if (q->dead) {
        pthread_mutex_unlock(&q->mu);
        return false;
      }
      q->cur = q->spare;
      if (q->cur) q->spare = q->cur->next;
      q->in_use++;
      pthread_mutex_unlock(&q->mu);
      /* Past TARQ_BLOCKS only for the rest of one frame: the caller pauses. */
      if (!q->cur) q->cur = sbx_malloc(sizeof *q->cur);
      q->cur->len = 0;
    }
    size_t k = TARQ_BLOCK - q->cur->len;
    if (k > n) k = n;
    memcpy(q->cur->data + q->cur->len, d, k);
    q->cur->len += k;
    d += k;
    n -= k;
    if (q->cur->len == TARQ_BLOCK) {
      pthread_mutex_lock(&q->mu);
      hand_over(q);
      pthread_mutex_unlock(&q->mu);
    }
  }
  pthread_mutex_lock(&q->mu);
  bool pause = !q->dead && q->in_use >= TARQ_BLOCKS;
  if (pause) q->waiting = true;
  pthread_mutex_unlock(&q->mu);
  return pause;
}

void tarq_end(struct tarq *q) {
  pthread_mutex_lock(&q->mu);
  if (q->cur && q->cur->len > 0 && !q->dead) hand_over(q);
  q->eof = true;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

/* Under the lock: the block libarchive was reading goes back. */
static bool give_back(struct tarq *q) {
  if (!q->reading) return false;
  q->reading->next = q->spare;
  q->spare = q->reading;
  q->reading = NULL;
  q->in_use--;
  if (q->waiting && q->in_use < TARQ_BLOCKS) {
    q->waiting = false;
    return true;
  }
  return false;
}

static void wake_loop(struct tarq *q) {
  char b = TARQ_NOTIFY_ROOM;
  if (write(q->notify_fd, &b, 1) < 0) {}
}

la_ssize_t tarq_read(struct archive *a, void *arg, const void **buf) {
  struct tarq *q = arg;
  pthread_mutex_lock(&q->mu);
  bool wake = give_back(q);
  while (!q->head && !q->eof) pthread_cond_wait(&q->cv, &q->mu);
  la_ssize_t n = 0;
  if (q->head) {
    q->reading = q->head;
    q->head = q->head->next;
    if (!q->head) q->tail = NULL;
    *buf = q->reading->data;
    n = (la_ssize_t)q->reading->len;
  }
  pthread_mutex_unlock(&q->mu);
  if (wake) wake_loop(q);
  return n;
}

void tarq_close_reader(struct tarq *q) {
  pthread_mutex_lock(&q->mu);
  q->dead = true;
  bool wake = give_back(q);
  while (q->head) {
    struct block *b = q->head;
    q->head = b->next;
    b->next = q->spare;
    q->spare = b;
    q->in_use--;
  }
  q->tail = NULL;
  if (q->waiting) {
    q->waiting = false;
    wake = true;
  }
  pthread_mutex_unlock(&q->mu);
  if (wake) wake_loop(q);
}
