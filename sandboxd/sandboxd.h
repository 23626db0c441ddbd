/* sandboxd.h - the daemon's shared state and the helpers its parts share. */
#ifndef SANDBOXD_SANDBOXD_H
#define SANDBOXD_SANDBOXD_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>
#include <jansson.h>

#include <sandbox/core.h>
#include <sandbox/pool.h>
#include <sandbox/wire.h>

#include "auth.h"
#include "config.h"
#include "http.h"
#include "provider.h"
#include "util/util.h" /* libsandbox's internal utility layer */

#define TTL_DEFAULT 300
#define TTL_MAX 86400
#define EXEC_OUTPUT_MAX (8 * 1024 * 1024)

#define METRICS_CLAIM_BUCKETS 16
#define METRICS_EXEC_OUTCOMES 5

struct metrics {
  uint64_t claims_warm, claims_clone, claims_cold;
  double claim_seconds;
  /* per tier (metrics_tier): the histogram of claim durations */
  uint64_t claim_bucket[3][METRICS_CLAIM_BUCKETS], claim_count[3];
  double claim_sum[3];
  uint64_t execs[METRICS_EXEC_OUTCOMES]; /* metrics_exec's outcomes */
  uint64_t releases, reaps;
  uint64_t journal_errors; /* journal writes that failed (journal.c) */
  uint64_t lifecycle[8];   /* transitions by usage event, in admin.c's order */
  double wake_seconds;
};

struct relay;
struct exec_op;
struct watch;

struct delayed_destroy {
  struct delayed_destroy *next;
  struct inst *inst;
  int64_t due; /* unix seconds */
};

struct sbxd {
  struct event_base *base;
  const char *config_path; /* NULL = embedded default */
  struct config *cfg;
  struct provider *prov;
  sbx_pool_mgr *pm;
  sbx_lease_table *leases;
  struct http_server *http;
  struct pool_cfg *pools; /* the effective set: pools.json, else the config's */
  size_t npools;
  bool pools_from_file;
  int data_fd; /* data_dir, O_DIRECTORY */
  int usage_fd;
  int64_t usage_size; /* usage.jsonl's length, kept here instead of an fstat per event */
  int log_fd; /* claims.log */
  int64_t log_size; /* claims.log's length: where a failed append is cut back to */
  bool log_torn, usage_torn; /* a failed append could not be cut off yet */
  /* The last journal write's error while journal writes fail, else "":
   * shown in /v1/info and /metrics, cleared by the next success. */
  char journal_error[200];
  unsigned log_records;
  uint64_t log_seq;        /* records appended to claims.log, ever */
  struct durable *durable; /* group commit (durable.c) */
  struct metrics m;
  struct relay *relays;
  struct exec_op *execs;
  struct delayed_destroy *delayed;
  struct watch *watches; /* claimed sandboxes' pid 1 (watch.c) */
  struct event *ev_pool, *ev_refill, *ev_reap, *ev_hup, *ev_term, *ev_int, *ev_kick;
  char owner_addr[256];
  bool stopping;
};

/* ---- util.c ---- */
/* First 16 bytes of SHA-256("template|net|size") as 32 hex (spec §1.5). */
void key_hash(const sbx_pool_key *k, char out[33]);
int64_t now_unix(void);
/* RFC 3339 UTC, with nanoseconds when ns is true. */
void fmt_time(int64_t secs, long nsec, bool ns, char *buf, size_t len);
void reply_json(struct http_req *req, int status, json_t *body); /* steals body */
void reply_error(struct http_req *req, int status, const char *msg);
/* Decode a request body: an empty body is {}; strict rejects duplicates.
 * On failure answers 400 and returns NULL. */
json_t *decode_body(struct http_req *req, bool strict);
/* Copy valid UTF-8 into a JSON string, bad bytes as U+FFFD. */
json_t *json_string_lossy(const char *p, size_t n);

/* ---- journal.c ---- */
int journal_open(struct sbxd *d, sbx_error *err);
/* Rewrite claims.json from the lease table (temp file, rename) and empty
 * claims.log. */
int journal_write_claims(struct sbxd *d, sbx_error *err);
/* A journalled change: journal_begin, then journal_put / journal_del /
 * usage_event, then journal_commit once all of them succeeded, or
 * journal_abort, which cuts both files back to the mark (nothing of the
 * change stays on disk) and records the error for /v1/info and /metrics.
 * The change is applied in memory only after the commit. */
struct jmark {
  int64_t log_size, usage_size;
  unsigned log_records;
};
int journal_begin(struct sbxd *d, struct jmark *m, sbx_error *err);
void journal_abort(struct sbxd *d, const struct jmark *m, const sbx_error *err);
void journal_commit(struct sbxd *d);
/* Count a failed journal write and show it (journal_abort does this). */
void journal_failed(struct sbxd *d, const sbx_error *err);
/* A synced snapshot in place of the log; clears the error state when it
 * works (the reap tick retries it while journal writes fail). */
int journal_repair(struct sbxd *d, sbx_error *err);
/* Record one change in claims.log (folded into claims.json now and then). */
int journal_put(struct sbxd *d, const sbx_lease *l, sbx_error *err);
int journal_del(struct sbxd *d, const char *id, sbx_error *err);
/* Journalled claims (snapshot + log) as a JSON array; caller decrefs. */
json_t *journal_read_claims(struct sbxd *d);
/* One §6.1 line; "fail" adds the lease's failed_reason as "reason". */
int usage_event(struct sbxd *d, const char *ev, const sbx_lease *l, const char *ref, sbx_error *err);
/* The same with "children" (the fork event, §6.1). */
int usage_event_children(struct sbxd *d, const char *ev, const sbx_lease *l, const char *ref,
                         const char *const *children, size_t nchildren, sbx_error *err);
/* usage_event for a transition already made (the lifecycle verbs): a line
 * that cannot be written is logged, not undone. */
void usage_note(struct sbxd *d, const char *ev, const sbx_lease *l, const char *ref);
int journal_write_pools(struct sbxd *d, const struct pool_cfg *p, size_t n, sbx_error *err);
/* pools.json if present: 1 and the pools, 0 if absent, a negative sbx_code
 * on error. */
int journal_read_pools(struct sbxd *d, struct pool_cfg **p, size_t *n, sbx_error *err);

/* ---- durable.c ---- */
/* The sync thread for sync_claims; started once the loop exists. */
int durable_start(struct sbxd *d, sbx_error *err);
/* Answer once every claims.log record appended so far is on disk (at once
 * when sync_claims is off); steals body, NULL for none. */
void durable_reply(struct sbxd *d, struct http_req *req, const char *verb, int status, json_t *body);
/* true when records are synced by the thread rather than in line. */
bool durable_async(const struct sbxd *d);
/* Last sync, pending answers written, thread joined. */
void durable_stop(struct sbxd *d);

/* ---- router.c ---- */
void router_handle(struct http_req *req, void *arg);
/* The head check (http_head_fn): refuses at the head a request whose
 * token would fail, before its body is read. */
bool router_head(struct http_req *req, void *arg);

/* ---- claims.c ---- */
void h_claim(struct sbxd *d, struct http_req *req);
void h_release(struct sbxd *d, struct http_req *req, const char *id);
void h_renew(struct sbxd *d, struct http_req *req, const char *id);
void h_list(struct sbxd *d, struct http_req *req);
void h_get(struct sbxd *d, struct http_req *req, const char *id);
void h_stats(struct sbxd *d, struct http_req *req, const char *id);
void h_owner(struct sbxd *d, struct http_req *req, const char *id);
/* Remove a lease: journalled (del record and usage event ev), then relays
 * closed and the instance destroyed. -1 with nothing changed when the
 * journal refuses it. */
int lease_end(struct sbxd *d, sbx_lease *l, const char *ev, sbx_error *err);
/* The 500 of a change the journal refused: the verb and the cause. */
void reply_journal_error(struct http_req *req, const char *verb, const sbx_error *err);
void reap_tick(struct sbxd *d);

/* ---- admin.c ---- */
void h_info(struct sbxd *d, struct http_req *req);
void h_pools(struct sbxd *d, struct http_req *req);
void h_drain(struct sbxd *d, struct http_req *req, bool on);
void h_peers(struct sbxd *d, struct http_req *req);
void h_volumes(struct sbxd *d, struct http_req *req);
void h_metrics(struct sbxd *d, struct http_req *req);
/* Counts a lifecycle transition for /metrics by its usage event name
 * (journal.c calls it for each event written). */
void metrics_event(struct sbxd *d, const char *ev);
json_t *node_info(struct sbxd *d);
int apply_pools(struct sbxd *d, struct pool_cfg *p, size_t n, sbx_error *err); /* takes p */
int recover(struct sbxd *d, sbx_error *err);

/* ---- metrics.c ---- */
void metric_head(sbx_buf *b, const char *name, const char *type, const char *help);
int metrics_tier(const char *tier); /* warm 0, clone 1, cold 2 */
void metrics_claim(struct metrics *m, int tier, double secs);
/* An exec's answer: its status and body (exit_code when 200). */
void metrics_exec(struct metrics *m, int status, const json_t *body);
/* The histogram, exec and request outcomes, build and process series. */
void metrics_write(struct sbxd *d, sbx_buf *b);

/* ---- main.c ---- */
/* Arm the deferred refill kick the pool manager asked for, if any. */
void arm_kick(struct sbxd *d);

/* ---- watch.c ---- */
/* Watch a claimed sandbox's pid 1: its death marks the lease failed. */
void watch_arm(struct sbxd *d, sbx_lease *l);
void watch_arm_all(struct sbxd *d); /* the adopted ones, once the loop exists */
void watch_disarm(struct sbxd *d, sbx_lease *l);
void watch_disarm_all(struct sbxd *d);

/* ---- lifecycle.c: hibernate, wake, fork, idle hibernate (§4.5, 4.6,
 * 4.10, 5.5, 5.6, 5.8) ---- */
void h_hibernate(struct sbxd *d, struct http_req *req, const char *id);
void h_wake(struct sbxd *d, struct http_req *req, const char *id);
void h_fork(struct sbxd *d, struct http_req *req, const char *id);
/* Hibernated now (the driver's view, which survives a restart). */
bool lease_hibernated(struct sbxd *d, const sbx_lease *l);
/* A data-plane use (agent, ports, exec): wakes a hibernated sandbox
 * first and restarts its idle clock. -1 with 500 "wake failed" answered. */
int lease_touch(struct sbxd *d, struct http_req *req, sbx_lease *l);
/* Idle auto-hibernate, on the reap tick. */
void lifecycle_tick(struct sbxd *d);
/* At start: transient images a killed daemon left. */
void lifecycle_recover(struct sbxd *d);
/* The ownership proof of §2.5 (body "token"); NULL with the error answered. */
sbx_lease *auth_proof(struct sbxd *d, struct http_req *req, const char *id, json_t *body, const struct caller *who);
/* ttl_seconds per §1.9 (claims.c); -1 with 400 answered. */
int body_ttl(struct http_req *req, json_t *body, int *out);

/* ---- checkpoint.c, promote.c (§4.11-4.16, 5.9, 5.10) ---- */
void h_checkpoint_create(struct sbxd *d, struct http_req *req, const char *id);
void h_checkpoint_list(struct sbxd *d, struct http_req *req);
void h_checkpoint_delete(struct sbxd *d, struct http_req *req, const char *id);
void h_checkpoint_claim(struct sbxd *d, struct http_req *req, const char *id);
/* blob.c: GET (root) streams the record as tar for peers, HEAD probes (§4.17). */
void h_checkpoint_blob(struct sbxd *d, struct http_req *req, const char *id, bool head);
/* TTL sweep; at startup also removes exports that never committed. */
void checkpoint_sweep(struct sbxd *d, bool startup);
void h_promote(struct sbxd *d, struct http_req *req, const char *id);
void h_template_delete(struct sbxd *d, struct http_req *req);
void promote_sweep(struct sbxd *d); /* generations no meta.json names */
/* "sha256:<hex>" of the canonical stream of §5.10 over root's files. */
int content_digest(const char *root, char out[80], sbx_error *err);
/* A claim of a key promoted here and owned by the caller: started (and
 * answered) from the promoted export; 0 when the key is not promoted. */
int promoted_claim(struct sbxd *d, struct http_req *req, const struct caller *who, const sbx_pool_key *key, int ttl,
                   const char *claim_ref);

/* An export of l into the checkpoint store (the record, or NULL); archive
 * records are the archive tier's. */
json_t *checkpoint_export(struct sbxd *d, sbx_lease *l, const char *tenant, const char *name, bool archive,
                          char ckid[24], sbx_error *err);
void checkpoint_remove(struct sbxd *d, const char *id);
void checkpoint_export_path(struct sbxd *d, const char *id, char *out, size_t cap);

/* ---- archive.c (§5.7) ---- */
bool lease_archived(const sbx_lease *l);
void archive_tick(struct sbxd *d, int64_t idle_since_fn(const char *id));
int archive_wake(struct sbxd *d, sbx_lease *l, sbx_error *err); /* fresh lease, same id and token */
void archive_forget(struct sbxd *d, const sbx_lease *l);        /* on release */
void archive_recover(struct sbxd *d);
size_t archive_count(void);

/* ---- exec.c ---- */
void h_exec(struct sbxd *d, struct http_req *req, const char *id);
void exec_shutdown(struct sbxd *d);

/* ---- frames.c: silkd frames through libsandbox's codec ---- */
struct evbuffer;
/* Append req, encoded, to out. */
int frame_send(struct evbuffer *out, const sbx_wire_req *req, sbx_error *err);
/* The next complete line of in, without its LF, in place (drain len + 1
 * once done with it): 1, 0 when none is complete yet, -1 when more than
 * max bytes wait with no LF. */
int frame_next(struct evbuffer *in, size_t max, const char **line, size_t *len);

/* ---- relay.c ---- */
void h_agent(struct sbxd *d, struct http_req *req, const char *id);
void h_port(struct sbxd *d, struct http_req *req, const char *id, const char *port);
void relays_close_for(struct sbxd *d, const char *id);
void relays_close_all(struct sbxd *d);
size_t relays_count(struct sbxd *d);

#endif
