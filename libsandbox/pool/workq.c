/* workq.c - a fixed set of worker threads and one eventfd back to the loop.
 *
 * Jobs carry two halves: work runs on a worker and may block for seconds
 * (clone, destroy); done runs on the owner's thread when it next calls
 * dispatch, so everything done touches needs no lock. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "workq.h"

struct job {
  struct job *next;
  sbx_job_fn work;
  sbx_job_done_fn done;
  void *arg;
  bool urgent;
};

struct jobq {
  struct job *head, *tail;
};

struct sbx_workq {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct jobq todo, finished;
  bool stopping;
  int efd;
  unsigned nthreads;
  pthread_t *threads;
  sbx_pool_sched background; /* how non-urgent jobs run */
  bool spare_cpu;            /* lowered jobs keep off the first CPU */
};

static void q_push(struct jobq *q, struct job *j) {
  j->next = NULL;
  if (q->tail) q->tail->next = j;
  else q->head = j;
  q->tail = j;
}

static void q_push_front(struct jobq *q, struct job *j) {
  j->next = q->head;
  q->head = j;
  if (!q->tail) q->tail = j;
}

static struct job *q_pop(struct jobq *q) {
  struct job *j = q->head;
  if (j) {
    q->head = j->next;
    if (!q->head) q->tail = NULL;
  }
  return j;
}

static void signal_fd(int fd) {
  uint64_t one = 1;
  /* EAGAIN means the counter is already non-zero: the loop will wake. */
  ssize_t r = write(fd, &one, sizeof one);
  (void)r;
}

/* The CPUs background work may use: the ones the thread was started with
 * (sandboxd's own affinity), less the first of them when there are two or
 * more. That CPU stays free for the claim path (the event loop, a claimed
 * sandbox's silkd and its client): on a small node a claim woken behind a
 * clone's kernel work (mounts, namespaces) otherwise waits for it, whatever
 * the priorities, on a kernel built without preemption. */
static void background_cpus(const cpu_set_t *base, cpu_set_t *out) {
  *out = *base;
  if (CPU_COUNT(base) < 2) return;
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (CPU_ISSET(cpu, base)) {
      CPU_CLR(cpu, out);
      return;
    }
  }
}

/* Set the calling thread's class (Linux applies each call per thread);
 * what it forks, and the jail zygote's children for it, inherit it. Nice
 * values are relative to base_nice, the nice the process was started
 * with: normal means "as started", not nice 0, so an operator's `nice
 * sandboxd` holds for urgent jobs too. Raising it back needs CAP_SYS_NICE
 * or a permissive RLIMIT_NICE; without them the thread stays lowered. */
static void thread_sched(sbx_pool_sched s, bool spare_cpu, int base_nice, const cpu_set_t *base_cpus) {
  struct sched_param sp = {0};
  pid_t tid = (pid_t)syscall(SYS_gettid);
  sched_setscheduler(tid, s == SBX_POOL_SCHED_IDLE ? SCHED_IDLE : SCHED_OTHER, &sp);
  int nice = s == SBX_POOL_SCHED_NICE ? base_nice + SBX_POOL_NICE : base_nice;
  setpriority(PRIO_PROCESS, (id_t)tid, nice > 19 ? 19 : nice);
  cpu_set_t cpus = *base_cpus;
  if (s != SBX_POOL_SCHED_NORMAL && spare_cpu) background_cpus(base_cpus, &cpus);
  sched_setaffinity(tid, sizeof cpus, &cpus);
}

static void *worker(void *p) {
  sbx_workq *q = p;
  errno = 0;
  int base = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
  if (errno) base = 0;
  cpu_set_t base_cpus;
  if (sched_getaffinity(0, sizeof base_cpus, &base_cpus) < 0) {
    CPU_ZERO(&base_cpus);
    for (long i = 0, n = sysconf(_SC_NPROCESSORS_ONLN); i < n && i < CPU_SETSIZE; i++) CPU_SET(i, &base_cpus);
  }
  sbx_pool_sched cur = SBX_POOL_SCHED_NORMAL;
  bool cur_spare = false;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (!q->stopping && !q->todo.head) pthread_cond_wait(&q->cv, &q->mu);
    if (q->stopping) break;
    struct job *j = q_pop(&q->todo);
    sbx_pool_sched want = j->urgent ? SBX_POOL_SCHED_NORMAL : q->background;
    bool spare = q->spare_cpu;
    pthread_mutex_unlock(&q->mu);
    if (want != cur || spare != cur_spare) {
      thread_sched(want, spare, base, &base_cpus);
      cur = want;
      cur_spare = spare;
    }
    if (j->work) j->work(j->arg);
    pthread_mutex_lock(&q->mu);
    q_push(&q->finished, j);
    /* Wake the loop only once the lock is free: woken under it, the loop
     * went straight to sleep again on the mutex of a (lowered) worker. */
    pthread_mutex_unlock(&q->mu);
    signal_fd(q->efd);
    pthread_mutex_lock(&q->mu);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

int sbxi_workq_new(unsigned threads, sbx_workq **out, sbx_error *err) {
  if (threads == 0) threads = 1;
  sbx_workq *q = sbx_calloc(1, sizeof *q);
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  q->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (q->efd < 0) {
    int e = errno;
    sbx_free(q);
    return sbx_err_os(err, e, "eventfd");
  }
  q->threads = sbx_calloc(threads, sizeof *q->threads);
  for (unsigned i = 0; i < threads; i++) {
    int rc = pthread_create(&q->threads[i], NULL, worker, q);
    if (rc != 0) {
      q->nthreads = i;
      sbxi_workq_free(q);
      return sbx_err_os(err, rc, "pthread_create");
    }
  }
  q->nthreads = threads;
  *out = q;
  return 0;
}

void sbxi_workq_free(sbx_workq *q) {
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  q->stopping = true;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
  for (unsigned i = 0; i < q->nthreads; i++) pthread_join(q->threads[i], NULL);
  struct job *j;
  while ((j = q_pop(&q->finished))) {
    if (j->done) j->done(j->arg, false);
    sbx_free(j);
  }
  while ((j = q_pop(&q->todo))) {
    if (j->done) j->done(j->arg, true);
    sbx_free(j);
  }
  close(q->efd);
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
  sbx_free(q->threads);
  sbx_free(q);
}

void sbxi_workq_submit(sbx_workq *q, sbx_job_fn work, sbx_job_done_fn done, void *arg, bool urgent) {
  struct job *j = sbx_calloc(1, sizeof *j);
  j->work = work;
  j->done = done;
  j->arg = arg;
  j->urgent = urgent;
  pthread_mutex_lock(&q->mu);
  if (urgent) q_push_front(&q->todo, j);
  else q_push(&q->todo, j);
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

int sbxi_workq_fd(const sbx_workq *q) { return q->efd; }

void sbxi_workq_set_background(sbx_workq *q, sbx_pool_sched s, bool spare_cpu) {
  pthread_mutex_lock(&q->mu);
  q->background = s;
  q->spare_cpu = spare_cpu;
  pthread_mutex_unlock(&q->mu);
}

void sbxi_workq_wake(sbx_workq *q) { signal_fd(q->efd); }

int sbxi_workq_dispatch(sbx_workq *q) {
  uint64_t v;
  ssize_t r = read(q->efd, &v, sizeof v);
  (void)r;
  pthread_mutex_lock(&q->mu);
  struct jobq done = q->finished;
  q->finished.head = q->finished.tail = NULL;
  pthread_mutex_unlock(&q->mu);
  int n = 0;
  struct job *j;
  while ((j = q_pop(&done))) {
    if (j->done) j->done(j->arg, false);
    sbx_free(j);
    n++;
  }
  return n;
}
