/* sandbox/pool.h - warm pools, provisioning budget and leases, without HTTP.
 *
 * The pool manager keeps, per pool key (template, net, size), a LIFO stack
 * of claim-ready instances and refills it on worker threads (spec
 * sandboxd-http.md §5.2). It knows sandboxes only through a provider: two
 * callbacks that make and unmake one instance. sandboxd plugs the driver
 * in; tests plug in a fake.
 *
 * Threads: every sbx_pool_* call is made from one thread (the owner's event
 * loop). Provider callbacks and submitted jobs run on the manager's worker
 * threads; their results come back through sbx_pool_mgr_fd(), which turns
 * readable when sbx_pool_mgr_dispatch() has completions to run. So the loop
 * never waits on a clone or a destroy, and pool state needs no lock.
 */
#ifndef SANDBOX_POOL_H
#define SANDBOX_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sandbox/error.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SBX_POOL_NAME_MAX 64 /* template grammar: at most 63 bytes */

typedef struct sbx_pool_key {
  char tmpl[SBX_POOL_NAME_MAX];
  char net[8];  /* "none" | "egress" */
  char size[8]; /* "small" ... "2xlarge" */
} sbx_pool_key;

bool sbx_pool_key_eq(const sbx_pool_key *a, const sbx_pool_key *b);

/* sbx_pool_conf and sbx_pool_provider are growable option structs:
 * struct_size first, set by their SBX_*_INIT(...) macro (see
 * sandbox/client.h, "option structs"). In an array, the first element's
 * struct_size is the stride. */
typedef struct sbx_pool_conf {
  size_t struct_size; /* SBX_POOL_CONF_INIT */
  sbx_pool_key key;
  int warm;     /* floor of the target */
  int warm_max; /* > 0 turns on the adaptive target (§5.2) */
} sbx_pool_conf;
#define SBX_POOL_CONF_INIT(...) {.struct_size = sizeof(sbx_pool_conf), __VA_ARGS__}

/* How the manager makes and unmakes instances. provision, prepare and
 * destroy run on worker threads, may block, and must be safe to run
 * concurrently for different instances. */
typedef struct sbx_pool_provider {
  size_t struct_size; /* SBX_POOL_PROVIDER_INIT */
  /* Build whatever a key needs before it can be cloned (the golden);
   * called once per key, retried after 30 s on failure. NULL = nothing. */
  int (*prepare)(void *ud, const sbx_pool_key *key, sbx_error *err);
  /* Make one claim-ready instance (clone + readiness probe, probe_ms). */
  int (*provision)(void *ud, const sbx_pool_key *key, int probe_ms, void **inst, sbx_error *err);
  void (*destroy)(void *ud, void *inst);
  /* Drop the handle of an instance left running at shutdown; NULL = none. */
  void (*forget)(void *ud, void *inst);
  void *ud;
  /* Whether a warm instance still runs (owner's thread, must not block);
   * dead ones are dropped at the tick and never handed out by take, and
   * refill replaces them. NULL = always. */
  bool (*alive)(void *ud, void *inst);
} sbx_pool_provider;
#define SBX_POOL_PROVIDER_INIT(...) {.struct_size = sizeof(sbx_pool_provider), __VA_ARGS__}

typedef struct sbx_pool_mgr sbx_pool_mgr;

typedef struct sbx_pool_stat {
  sbx_pool_key key;
  int warm;      /* ready instances in the stack */
  int refilling; /* provisions in flight */
  int target;    /* effective target now */
  bool golden;   /* prepare succeeded */
  bool preparing; /* prepare in flight */
  unsigned failures; /* consecutive refill failures */
  /* The most recent failed golden build, refill or claim provision of
   * this key ("" = none since the last success) and when (unix seconds). */
  char last_error[200];
  int64_t last_error_at;
} sbx_pool_stat;

/* workers: the provisioning budget (refill_concurrency). */
int sbx_pool_mgr_new(const sbx_pool_provider *prov, unsigned workers, sbx_pool_mgr **out, sbx_error *err);
/* Stops the workers (waiting for jobs in flight; queued jobs are dropped
 * after their done callbacks ran with cancelled = true). Warm instances
 * are left running: the next start reconciles them (§5.13). */
void sbx_pool_mgr_free(sbx_pool_mgr *m);

/* Readable when completions wait; the owner then calls dispatch. */
int sbx_pool_mgr_fd(const sbx_pool_mgr *m);
void sbx_pool_mgr_dispatch(sbx_pool_mgr *m);

/* How the workers run background work (refill, prepare, destroy and
 * submitted jobs not marked urgent); a claim waiting on a clone always runs
 * at normal priority. On a node with few cores, background work at normal
 * priority shows up as claim latency: lowered, the event loop, the
 * sandboxes and their clients come first, and background work takes the
 * CPU time they leave. With spare_cpu, lowered work also keeps off the
 * first CPU of the process's affinity when it has two or more, so a claim
 * does not wait behind a clone's kernel work (on 2 CPUs this halves the
 * refill rate). The jail's setup children inherit the class and CPUs of
 * the worker that forks them. Default: SBX_POOL_SCHED_NORMAL, all CPUs. */
typedef enum sbx_pool_sched {
  SBX_POOL_SCHED_NORMAL, /* SCHED_OTHER, nice 0 */
  SBX_POOL_SCHED_NICE,   /* SCHED_OTHER, nice SBX_POOL_NICE */
  SBX_POOL_SCHED_IDLE,   /* SCHED_IDLE: runs only on CPU time nothing else wants */
} sbx_pool_sched;
#define SBX_POOL_NICE 10
void sbx_pool_mgr_set_background(sbx_pool_mgr *m, sbx_pool_sched s, bool spare_cpu);

/* Replace the configured set: kept keys change targets in place, new keys
 * are prepared, omitted keys lose their warm instances. */
int sbx_pool_mgr_set_pools(sbx_pool_mgr *m, const sbx_pool_conf *confs, size_t n, sbx_error *err);
bool sbx_pool_mgr_pooled(const sbx_pool_mgr *m, const sbx_pool_key *key);

/* The 2 s refill tick (also trims above-target pools after 60 s). */
void sbx_pool_mgr_tick(sbx_pool_mgr *m, uint64_t now_ns);
/* Ask for a refill pass soon; kicks that arrive together merge. */
void sbx_pool_mgr_kick(sbx_pool_mgr *m);

/* Warm pop (LIFO). Records the claim for the watermark and kicks refill
 * (after the kick delay, if one is set). SBX_E_NOTFOUND when the key is
 * not pooled or its stack is empty. */
int sbx_pool_mgr_take(sbx_pool_mgr *m, const sbx_pool_key *key, void **inst);
/* Defer the refill kick after a warm pop by delay_ns, so the clone that
 * replaces it does not compete for the CPUs with the claimant's first
 * requests; pops within the delay merge into one kick. 0 = kick at once.
 * The owner arms a timer for sbx_pool_mgr_kick_due() and then kicks. */
void sbx_pool_mgr_set_kick_delay(sbx_pool_mgr *m, uint64_t delay_ns);
/* Monotonic time of the deferred kick, or 0 when none is pending. */
uint64_t sbx_pool_mgr_kick_due(const sbx_pool_mgr *m);
/* Count a claim of a key for the watermark without popping (a miss). */
void sbx_pool_mgr_note_claim(sbx_pool_mgr *m, const sbx_pool_key *key);

/* Draining destroys every warm instance and stops refill. */
void sbx_pool_mgr_set_draining(sbx_pool_mgr *m, bool draining);
bool sbx_pool_mgr_draining(const sbx_pool_mgr *m);
/* Refill parked because the host is full (§5.2); reason may be NULL. */
bool sbx_pool_mgr_at_capacity(const sbx_pool_mgr *m, const char **reason);

/* Fills up to max entries in configuration order; returns the pool count. */
size_t sbx_pool_mgr_stats(const sbx_pool_mgr *m, sbx_pool_stat *out, size_t max);

/* Run work(arg) on a worker, then done(arg, cancelled) on the owner's
 * thread. urgent jobs (a claim waiting on a clone) go ahead of refill. */
typedef void (*sbx_job_fn)(void *arg);
typedef void (*sbx_job_done_fn)(void *arg, bool cancelled);
void sbx_pool_mgr_submit(sbx_pool_mgr *m, sbx_job_fn work, sbx_job_done_fn done, void *arg, bool urgent);
/* Provision one instance for a claim on a miss (probe_ms as §5.4). */
typedef void (*sbx_provision_done_fn)(void *arg, void *inst, const sbx_error *err);
void sbx_pool_mgr_provision(sbx_pool_mgr *m, const sbx_pool_key *key, int probe_ms, sbx_provision_done_fn done,
                            void *arg);
/* Destroy an instance on a worker (fire and forget). */
void sbx_pool_mgr_destroy(sbx_pool_mgr *m, void *inst);

/* ---- leases: the claimed sandboxes of this node ----
 * Admission reserves a slot first, so concurrent claims cannot pass a cap
 * while their clones run (§4.1 step 3); commit turns the reservation into
 * a lease, cancel gives it back. */
#define SBX_LEASE_ID_LEN 19    /* "sb_" + 16 hex */
#define SBX_LEASE_TOKEN_LEN 32 /* 32 hex */

typedef struct sbx_lease {
  char id[SBX_LEASE_ID_LEN + 1];
  char token[SBX_LEASE_TOKEN_LEN + 1];
  char tenant[SBX_POOL_NAME_MAX]; /* "" = root */
  char *claim_ref;                /* owned; NULL = none */
  char from_checkpoint[24];       /* the checkpoint it was branched from; "" = none */
  sbx_pool_key key;
  char vm[SBX_POOL_NAME_MAX];     /* the instance's name at the driver */
  int64_t claimed_at; /* unix seconds */
  int64_t deadline;   /* unix seconds */
  int ttl;            /* last granted length */
  int holds;          /* data-plane uses in flight */
  bool failed;        /* instance found dead */
  void *inst;         /* provider instance; NULL when failed */
  void *owner_data;   /* for the lease table's owner (relays etc.) */
  /* With failed: why, as the owner found it (pid 1's exit status or
   * signal, an OOM kill, gone at a restart), and when (unix seconds). */
  char failed_reason[128];
  char failed_cause[8]; /* "oom" | "signal" | "exit" | "gone" */
  int64_t failed_at;
} sbx_lease;

typedef struct sbx_lease_table sbx_lease_table;

sbx_lease_table *sbx_lease_table_new(void);
void sbx_lease_table_free(sbx_lease_table *t); /* frees leases, not instances */

/* Which cap a refused reservation hit, in err->detail. */
enum { SBX_LEASE_CAP_NODE = 1, SBX_LEASE_CAP_TENANT = 2 };
/* 0, or SBX_E_BUSY with err naming "node" or "tenant" and err->detail the
 * SBX_LEASE_CAP_* it hit. A cap of 0 is unlimited. */
int sbx_lease_reserve(sbx_lease_table *t, const char *tenant, int node_max, int tenant_max, sbx_error *err);
void sbx_lease_unreserve(sbx_lease_table *t, const char *tenant);
/* Fresh id and token from the OS CSPRNG; the lease is owned by the table.
 * Consumes one reservation of its tenant (pass reserved=false for adoption). */
int sbx_lease_commit(sbx_lease_table *t, sbx_lease *tmpl, bool reserved, sbx_lease **out, sbx_error *err);
sbx_lease *sbx_lease_find(const sbx_lease_table *t, const char *id);
/* Removes it from the table and frees it (the instance is the caller's). */
void sbx_lease_remove(sbx_lease_table *t, sbx_lease *l);
size_t sbx_lease_count(const sbx_lease_table *t);
size_t sbx_lease_count_tenant(const sbx_lease_table *t, const char *tenant);
/* Iterate: i from 0 while it returns non-NULL. */
sbx_lease *sbx_lease_at(const sbx_lease_table *t, size_t i);

#ifdef __cplusplus
}
#endif
#endif
