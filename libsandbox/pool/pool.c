/* pool.c - warm stacks, refill, backoff, capacity parking and the watermark
 * of sandboxd-http.md §5.2. All state lives on the owner's thread; only
 * provider calls run on the workers (see workq.c). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sandbox/core.h>
#include <sandbox/pool.h>

#include "core/opts.h"
#include "workq.h"

#define NS_PER_S 1000000000ull
#define REFILL_PROBE_MS 5000
#define FAIL_LIMIT 8
#define BACKOFF_MIN_NS (250ull * 1000000ull)
#define BACKOFF_MAX_NS (30ull * NS_PER_S)
#define PARK_NS (30ull * NS_PER_S)
#define PREPARE_RETRY_NS (30ull * NS_PER_S)
#define TRIM_AFTER_NS (60ull * NS_PER_S)
#define ALPHA 0.3
/* exp(-1/60): one silent 1 s bin under the 60 s time constant; kept as a
 * constant so the library needs no libm. */
#define SILENCE_DECAY 0.98347145397068

struct pool {
  sbx_pool_conf conf;
  void **stack;
  size_t n, cap;
  int refilling;
  bool golden, preparing, removed;
  uint64_t prepare_retry_ns;
  unsigned failures;
  uint64_t backoff_ns, backoff_until_ns;
  /* watermark */
  double rate;         /* claims per second, EWMA over 1 s bins */
  uint64_t bin_start_ns;
  unsigned bin_count;
  double lead_s;       /* provision lead time, EWMA */
  bool have_lead;
  uint64_t above_since_ns; /* 0 = not above target */
  char last_error[200];    /* what sbx_pool_stat shows; "" after a success */
  int64_t last_error_at;
};

struct sbx_pool_mgr {
  sbx_pool_provider prov;
  sbx_workq *q;
  unsigned budget;   /* refill_concurrency */
  unsigned inflight; /* refill provisions running, node-wide */
  struct pool **pools;
  size_t npools;
  bool draining, kick_pending;
  uint64_t kick_delay_ns, kick_due_ns;
  uint64_t parked_until_ns;
  bool at_capacity;
  char capacity_reason[128];
};

/* Operators read a pool's trouble from its stats (sandboxd's /v1/info),
 * not only from the log. */
static void note_error(struct pool *p, const char *what, const sbx_error *err) {
  snprintf(p->last_error, sizeof p->last_error, "%s: %.*s", what, (int)sizeof p->last_error - 32, err->msg);
  p->last_error_at = (int64_t)time(NULL);
}

bool sbx_pool_key_eq(const sbx_pool_key *a, const sbx_pool_key *b) {
  return strcmp(a->tmpl, b->tmpl) == 0 && strcmp(a->net, b->net) == 0 && strcmp(a->size, b->size) == 0;
}

int sbx_pool_mgr_new(const sbx_pool_provider *provider, unsigned workers, sbx_pool_mgr **out, sbx_error *err) {
  sbx_pool_provider copy;
  const sbx_pool_provider *prov = &copy;
  int rc = sbxi_opts_load(&copy, sizeof copy, provider, SBXI_SIZE_TO(sbx_pool_provider, ud), "pool provider", err);
  if (rc < 0) return rc;
  if (!provider || !prov->provision || !prov->destroy) return sbx_err(err, SBX_E_INVAL, "pool: provider incomplete");
  sbx_pool_mgr *m = sbx_calloc(1, sizeof *m);
  m->prov = *prov;
  m->budget = workers ? workers : 1;
  rc = sbxi_workq_new(m->budget, &m->q, err);
  if (rc < 0) {
    sbx_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

static void pool_free(struct pool *p) {
  sbx_free(p->stack);
  sbx_free(p);
}

void sbx_pool_mgr_free(sbx_pool_mgr *m) {
  if (!m) return;
  /* Completions still reference pools, so the queue goes first. */
  sbxi_workq_free(m->q);
  for (size_t i = 0; i < m->npools; i++) {
    struct pool *p = m->pools[i];
    if (m->prov.forget)
      for (size_t k = 0; k < p->n; k++) m->prov.forget(m->prov.ud, p->stack[k]);
    pool_free(p);
  }
  sbx_free(m->pools);
  sbx_free(m);
}

int sbx_pool_mgr_fd(const sbx_pool_mgr *m) { return sbxi_workq_fd(m->q); }

void sbx_pool_mgr_set_background(sbx_pool_mgr *m, sbx_pool_sched s, bool spare_cpu) {
  sbxi_workq_set_background(m->q, s, spare_cpu);
}

static struct pool *find_pool(const sbx_pool_mgr *m, const sbx_pool_key *key) {
  for (size_t i = 0; i < m->npools; i++)
    if (!m->pools[i]->removed && sbx_pool_key_eq(&m->pools[i]->conf.key, key)) return m->pools[i];
  return NULL;
}

bool sbx_pool_mgr_pooled(const sbx_pool_mgr *m, const sbx_pool_key *key) { return find_pool(m, key) != NULL; }

/* ---- watermark ---- */

static void rate_advance(struct pool *p, uint64_t now) {
  if (p->bin_start_ns == 0) {
    p->bin_start_ns = now;
    return;
  }
  while (now - p->bin_start_ns >= NS_PER_S) {
    if (p->bin_count > 0) p->rate = ALPHA * p->bin_count + (1 - ALPHA) * p->rate;
    else p->rate *= SILENCE_DECAY;
    p->bin_count = 0;
    p->bin_start_ns += NS_PER_S;
    /* After an hour of silence the rate is below e^-60: call it zero
     * instead of looping bin by bin. */
    if (now - p->bin_start_ns > 3600 * NS_PER_S) {
      p->rate = 0;
      p->bin_count = 0;
      p->bin_start_ns = now;
    }
  }
}

static void learn_lead(struct pool *p, uint64_t ns) {
  double lead = (double)ns / NS_PER_S;
  p->lead_s = p->have_lead ? ALPHA * lead + (1 - ALPHA) * p->lead_s : lead;
  p->have_lead = true;
}

static int pool_target(const struct pool *p) {
  const sbx_pool_conf *c = &p->conf;
  if (c->warm_max <= 0) return c->warm;
  double want = p->rate * (p->have_lead ? p->lead_s : 0) * 2;
  int t;
  if (want >= c->warm_max) t = c->warm_max;
  else t = (int)want + (want > (int)want); /* ceil */
  return t > c->warm ? t : c->warm;
}

/* ---- destroy ---- */

struct destroy_job {
  sbx_pool_mgr *m;
  void *inst;
};

static void destroy_work(void *arg) {
  struct destroy_job *j = arg;
  j->m->prov.destroy(j->m->prov.ud, j->inst);
}

static void destroy_done(void *arg, bool cancelled) {
  struct destroy_job *j = arg;
  /* Cancelled at shutdown: the instance stays for the next start. */
  if (cancelled && j->m->prov.forget) j->m->prov.forget(j->m->prov.ud, j->inst);
  sbx_free(j);
}

void sbx_pool_mgr_destroy(sbx_pool_mgr *m, void *inst) {
  if (!inst) return;
  struct destroy_job *j = sbx_malloc(sizeof *j);
  j->m = m;
  j->inst = inst;
  sbxi_workq_submit(m->q, destroy_work, destroy_done, j, false);
}

static void pool_destroy_top(sbx_pool_mgr *m, struct pool *p, size_t keep) {
  while (p->n > keep) sbx_pool_mgr_destroy(m, p->stack[--p->n]);
}

static bool inst_alive(const sbx_pool_mgr *m, void *inst) { return !m->prov.alive || m->prov.alive(m->prov.ud, inst); }

/* Warm instances that died in the stack (pid 1 killed, the VM gone) are
 * destroyed, keeping the order of the rest; refill makes up for them. */
static void drop_dead(sbx_pool_mgr *m, struct pool *p) {
  size_t w = 0;
  for (size_t i = 0; i < p->n; i++) {
    if (inst_alive(m, p->stack[i])) {
      p->stack[w++] = p->stack[i];
      continue;
    }
    sbx_warn("pool %s|%s|%s: a warm instance died; replacing it", p->conf.key.tmpl, p->conf.key.net,
             p->conf.key.size);
    sbx_pool_mgr_destroy(m, p->stack[i]);
  }
  p->n = w;
}

/* ---- prepare (golden) ---- */

struct prepare_job {
  sbx_pool_mgr *m;
  struct pool *p;
  int rc;
  sbx_error err;
};

static void prepare_work(void *arg) {
  struct prepare_job *j = arg;
  j->rc = j->m->prov.prepare(j->m->prov.ud, &j->p->conf.key, &j->err);
}

static void prepare_done(void *arg, bool cancelled) {
  struct prepare_job *j = arg;
  struct pool *p = j->p;
  p->preparing = false;
  if (!cancelled) {
    if (j->rc == 0) {
      p->golden = true;
      p->last_error[0] = '\0';
      sbx_pool_mgr_kick(j->m);
    } else {
      sbx_warn("pool %s|%s|%s: golden build failed: %s", p->conf.key.tmpl, p->conf.key.net, p->conf.key.size,
               j->err.msg);
      note_error(p, "golden build failed", &j->err);
      p->prepare_retry_ns = sbx_now_ns() + PREPARE_RETRY_NS;
    }
  }
  sbx_free(j);
}

/* ---- refill ---- */

struct refill_job {
  sbx_pool_mgr *m;
  struct pool *p;
  void *inst;
  int rc;
  uint64_t started_ns, ended_ns;
  sbx_error err;
};

static void refill_work(void *arg) {
  struct refill_job *j = arg;
  j->started_ns = sbx_now_ns();
  j->rc = j->m->prov.provision(j->m->prov.ud, &j->p->conf.key, REFILL_PROBE_MS, &j->inst, &j->err);
  j->ended_ns = sbx_now_ns();
}

static bool capacity_error(const char *msg) {
  return strstr(msg, "exchange full") || strstr(msg, "no space left on device") ||
         strstr(msg, "No space left on device");
}

static void refill_done(void *arg, bool cancelled) {
  struct refill_job *j = arg;
  sbx_pool_mgr *m = j->m;
  struct pool *p = j->p;
  p->refilling--;
  m->inflight--;
  if (cancelled) {
    sbx_free(j);
    return;
  }
  if (j->rc == 0) {
    p->failures = 0;
    p->backoff_ns = 0;
    p->last_error[0] = '\0';
    m->at_capacity = false;
    m->capacity_reason[0] = '\0';
    learn_lead(p, j->ended_ns - j->started_ns);
    if (p->removed || m->draining || p->n >= (size_t)pool_target(p)) {
      sbx_pool_mgr_destroy(m, j->inst);
    } else {
      if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 8;
        p->stack = sbx_reallocarray(p->stack, p->cap, sizeof *p->stack);
      }
      p->stack[p->n++] = j->inst;
    }
  } else {
    p->failures++;
    sbx_warn("pool %s|%s|%s: refill failed (%u in a row): %s", p->conf.key.tmpl, p->conf.key.net,
             p->conf.key.size, p->failures, j->err.msg);
    note_error(p, "refill failed", &j->err);
    if (p->failures >= FAIL_LIMIT) {
      p->backoff_ns = p->backoff_ns ? p->backoff_ns * 2 : BACKOFF_MIN_NS;
      if (p->backoff_ns > BACKOFF_MAX_NS) p->backoff_ns = BACKOFF_MAX_NS;
      p->backoff_until_ns = j->ended_ns + p->backoff_ns;
    }
    if (capacity_error(j->err.msg)) {
      m->at_capacity = true;
      m->parked_until_ns = j->ended_ns + PARK_NS;
      snprintf(m->capacity_reason, sizeof m->capacity_reason, "%.*s", (int)sizeof m->capacity_reason - 1, j->err.msg);
    }
  }
  sbx_free(j);
  /* A finished slot may let another pool start; merge into one pass. */
  sbx_pool_mgr_kick(m);
}

static void refill_pass(sbx_pool_mgr *m, uint64_t now) {
  if (m->draining) return;
  if (m->parked_until_ns > now) return;
  for (size_t i = 0; i < m->npools; i++) {
    struct pool *p = m->pools[i];
    if (p->removed) continue;
    if (!p->golden) {
      if (m->prov.prepare == NULL) {
        p->golden = true;
      } else {
        if (!p->preparing && now >= p->prepare_retry_ns) {
          struct prepare_job *j = sbx_calloc(1, sizeof *j);
          j->m = m;
          j->p = p;
          p->preparing = true;
          sbxi_workq_submit(m->q, prepare_work, prepare_done, j, false);
        }
        continue;
      }
    }
    if (p->backoff_until_ns > now) continue;
    int target = pool_target(p);
    while ((int)p->n + p->refilling < target && m->inflight < m->budget) {
      struct refill_job *j = sbx_calloc(1, sizeof *j);
      j->m = m;
      j->p = p;
      p->refilling++;
      m->inflight++;
      sbxi_workq_submit(m->q, refill_work, refill_done, j, false);
    }
  }
}

/* Removed pools stay allocated while a job still points at them. */
static void collect_removed(sbx_pool_mgr *m) {
  size_t w = 0;
  for (size_t i = 0; i < m->npools; i++) {
    struct pool *p = m->pools[i];
    if (p->removed && p->refilling == 0 && !p->preparing) {
      pool_free(p);
      continue;
    }
    m->pools[w++] = p;
  }
  m->npools = w;
}

void sbx_pool_mgr_set_kick_delay(sbx_pool_mgr *m, uint64_t delay_ns) { m->kick_delay_ns = delay_ns; }

uint64_t sbx_pool_mgr_kick_due(const sbx_pool_mgr *m) { return m->kick_due_ns; }

void sbx_pool_mgr_kick(sbx_pool_mgr *m) {
  m->kick_due_ns = 0;
  if (m->kick_pending) return;
  m->kick_pending = true;
  sbxi_workq_wake(m->q);
}

void sbx_pool_mgr_dispatch(sbx_pool_mgr *m) {
  sbxi_workq_dispatch(m->q);
  collect_removed(m);
  if (m->kick_pending) {
    m->kick_pending = false;
    refill_pass(m, sbx_now_ns());
  }
}

void sbx_pool_mgr_tick(sbx_pool_mgr *m, uint64_t now) {
  if (m->kick_due_ns && now >= m->kick_due_ns) m->kick_due_ns = 0;
  for (size_t i = 0; i < m->npools; i++) {
    struct pool *p = m->pools[i];
    if (p->removed) continue;
    rate_advance(p, now);
    drop_dead(m, p);
    size_t target = (size_t)pool_target(p);
    if (p->n > target) {
      if (p->above_since_ns == 0) p->above_since_ns = now;
      else if (now - p->above_since_ns >= TRIM_AFTER_NS) {
        pool_destroy_top(m, p, target);
        p->above_since_ns = 0;
      }
    } else {
      p->above_since_ns = 0;
    }
  }
  collect_removed(m);
  refill_pass(m, now);
}

static int set_pools(sbx_pool_mgr *m, const sbx_pool_conf *confs, size_t n, sbx_error *err);

/* The caller's confs are copied to the library's size first (core/opts.h). */
int sbx_pool_mgr_set_pools(sbx_pool_mgr *m, const sbx_pool_conf *in, size_t n, sbx_error *err) {
  sbx_pool_conf *confs = sbx_calloc(n ? n : 1, sizeof *confs);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = sbxi_opts_load_at(&confs[i], sizeof *confs, in, i, SBXI_SIZE_TO(sbx_pool_conf, warm_max), "pools", err);
  if (rc == 0) rc = set_pools(m, confs, n, err);
  sbx_free(confs);
  return rc;
}

static int set_pools(sbx_pool_mgr *m, const sbx_pool_conf *confs, size_t n, sbx_error *err) {
  for (size_t i = 0; i < n; i++) {
    if (confs[i].warm < 0 || confs[i].warm_max < 0)
      return sbx_err(err, SBX_E_INVAL, "pool %s: negative warm count", confs[i].key.tmpl);
    for (size_t k = 0; k < i; k++)
      if (sbx_pool_key_eq(&confs[i].key, &confs[k].key))
        return sbx_err(err, SBX_E_INVAL, "pool %s|%s|%s: duplicate key", confs[i].key.tmpl, confs[i].key.net,
                       confs[i].key.size);
  }
  /* Keep configuration order: the new set first, then removed leftovers. */
  struct pool **next = sbx_calloc(n + m->npools, sizeof *next);
  size_t w = 0;
  for (size_t i = 0; i < n; i++) {
    struct pool *p = find_pool(m, &confs[i].key);
    if (!p) p = sbx_calloc(1, sizeof *p);
    else p->removed = true; /* mark as taken so find_pool skips it */
    p->conf = confs[i];
    next[w++] = p;
  }
  for (size_t i = 0; i < m->npools; i++) {
    struct pool *p = m->pools[i];
    bool kept = false;
    for (size_t k = 0; k < w; k++) kept |= next[k] == p;
    if (kept) continue;
    if (!p->removed) pool_destroy_top(m, p, 0);
    p->removed = true;
    next[w++] = p;
  }
  for (size_t i = 0; i < n; i++) next[i]->removed = false;
  sbx_free(m->pools);
  m->pools = next;
  m->npools = w;
  collect_removed(m);
  sbx_pool_mgr_kick(m);
  return 0;
}

int sbx_pool_mgr_take(sbx_pool_mgr *m, const sbx_pool_key *key, void **inst) {
  struct pool *p = find_pool(m, key);
  if (!p) return SBX_E_NOTFOUND;
  uint64_t now = sbx_now_ns();
  rate_advance(p, now);
  p->bin_count++;
  if (p->n == 0 || m->kick_delay_ns == 0) sbx_pool_mgr_kick(m);
  else if (m->kick_due_ns == 0) m->kick_due_ns = now + m->kick_delay_ns;
  /* Never hand out one that died since the last tick. */
  while (p->n > 0 && !inst_alive(m, p->stack[p->n - 1])) {
    sbx_warn("pool %s|%s|%s: a warm instance died; replacing it", p->conf.key.tmpl, p->conf.key.net,
             p->conf.key.size);
    sbx_pool_mgr_destroy(m, p->stack[--p->n]);
    sbx_pool_mgr_kick(m);
  }
  if (p->n == 0) return SBX_E_NOTFOUND;
  *inst = p->stack[--p->n];
  return 0;
}

void sbx_pool_mgr_note_claim(sbx_pool_mgr *m, const sbx_pool_key *key) {
  struct pool *p = find_pool(m, key);
  if (!p) return;
  rate_advance(p, sbx_now_ns());
  p->bin_count++;
}

void sbx_pool_mgr_set_draining(sbx_pool_mgr *m, bool draining) {
  m->draining = draining;
  if (draining) {
    for (size_t i = 0; i < m->npools; i++) pool_destroy_top(m, m->pools[i], 0);
  } else {
    /* Uncordon refills at once, whatever parked it before. */
    for (size_t i = 0; i < m->npools; i++) m->pools[i]->backoff_until_ns = 0;
    sbx_pool_mgr_kick(m);
  }
}

bool sbx_pool_mgr_draining(const sbx_pool_mgr *m) { return m->draining; }

bool sbx_pool_mgr_at_capacity(const sbx_pool_mgr *m, const char **reason) {
  if (reason) *reason = m->capacity_reason[0] ? m->capacity_reason : NULL;
  return m->at_capacity;
}

size_t sbx_pool_mgr_stats(const sbx_pool_mgr *m, sbx_pool_stat *out, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < m->npools; i++) {
    const struct pool *p = m->pools[i];
    if (p->removed) continue;
    if (n < max) {
      out[n] = (sbx_pool_stat){.key = p->conf.key,
                               .warm = (int)p->n,
                               .refilling = p->refilling,
                               .target = pool_target(p),
                               .golden = p->golden,
                               .preparing = p->preparing,
                               .failures = p->failures,
                               .last_error_at = p->last_error_at};
      memcpy(out[n].last_error, p->last_error, sizeof out[n].last_error);
    }
    n++;
  }
  return n;
}

void sbx_pool_mgr_submit(sbx_pool_mgr *m, sbx_job_fn work, sbx_job_done_fn done, void *arg, bool urgent) {
  sbxi_workq_submit(m->q, work, done, arg, urgent);
}

/* ---- provision on a miss ---- */

struct prov_job {
  sbx_pool_mgr *m;
  sbx_pool_key key;
  int probe_ms;
  uint64_t started_ns, ended_ns;
  void *inst;
  int rc;
  sbx_error err;
  sbx_provision_done_fn done;
  void *arg;
};

static void prov_work(void *arg) {
  struct prov_job *j = arg;
  j->started_ns = sbx_now_ns();
  j->rc = j->m->prov.provision(j->m->prov.ud, &j->key, j->probe_ms, &j->inst, &j->err);
  j->ended_ns = sbx_now_ns();
}



static void prov_done(void *arg, bool cancelled) {
  struct prov_job *j = arg;
  if (cancelled) {
    sbx_err(&j->err, SBX_E_BUSY, "shutting down");
    j->done(j->arg, NULL, &j->err);
  } else {
    /* A clone on a miss teaches the lead time too; without it a pool at
     * warm 0 would never learn one and never grow (§5.2). */
    struct pool *p = find_pool(j->m, &j->key);
    if (p && j->rc == 0) learn_lead(p, j->ended_ns - j->started_ns);
    else if (p) note_error(p, "claim provision failed", &j->err);
    j->done(j->arg, j->rc == 0 ? j->inst : NULL, &j->err);
  }
  sbx_free(j);
}

void sbx_pool_mgr_provision(sbx_pool_mgr *m, const sbx_pool_key *key, int probe_ms, sbx_provision_done_fn done,
                            void *arg) {
  struct prov_job *j = sbx_calloc(1, sizeof *j);
  j->m = m;
  j->key = *key;
  j->probe_ms = probe_ms;
  j->done = done;
  j->arg = arg;
  sbxi_workq_submit(m->q, prov_work, prov_done, j, true);
}
