/* provider.h - what the pool manager and the handlers need from a driver.
 *
 * Adapts libsandbox's driver table (include/sandbox/driver.h) to the pool
 * manager's provider callbacks. */
#ifndef SANDBOXD_PROVIDER_H
#define SANDBOXD_PROVIDER_H

#include <stdbool.h>
#include <stdint.h>

#include <sandbox/pool.h>

#include "config.h"

struct provider;
struct inst;

struct inst_stats {
  uint64_t mem_used;
  bool measured;
};

int provider_open(const struct config *cfg, struct provider **out, sbx_error *err);
void provider_close(struct provider *p);
const char *provider_name(const struct provider *p);
sbx_pool_provider provider_pool_ops(struct provider *p);
/* Whether a clone of this key would come from a built golden (tier clone)
 * rather than a cold boot. Safe from the loop thread. */
bool provider_has_golden(struct provider *p, const sbx_pool_key *key);
/* The warmup argv (NULL-terminated, copied; NULL = none) that a golden
 * built later for key runs once (sbx_golden_spec.warmup). A golden already
 * built is kept as it is. */
void provider_set_warmup(struct provider *p, const sbx_pool_key *key, char *const *argv);

const char *inst_name(const struct inst *s);
/* A connected, blocking-free stream to the instance's silkd. */
int inst_connect(struct inst *s, int *fd, sbx_error *err);
/* Drop our handle, leaving the sandbox running (shutdown). */
void inst_forget(struct inst *s);
int inst_stats(struct inst *s, struct inst_stats *out, sbx_error *err);

/* ---- pid 1 (watch.c) ----
 * An fd of the caller's (to close) that turns readable when the
 * instance's pid 1 (a VM's VMM process) exits; -1 when the driver offers
 * none. Also notes the OOM kills so far, for inst_death. */
int inst_watch_fd(struct inst *s);
/* false once pid 1 has exited (true when that cannot be told). */
bool inst_alive(struct inst *s);
/* Why pid 1 ended, once it has: a sentence for the sandbox's row and a
 * cause, "oom" (SIGKILL while the memory cgroup counted a new OOM kill),
 * "signal" or "exit". */
void inst_death(struct inst *s, char *reason, size_t len, char *cause, size_t clen);

/* After a restart: for each instance found, keep(ud, name) says whether to
 * adopt it; adopted instances are passed to adopted(); the rest destroyed. */
typedef bool (*provider_keep_fn)(void *ud, const char *name);
typedef void (*provider_adopt_fn)(void *ud, const char *name, struct inst *s);
int provider_reconcile(struct provider *p, provider_keep_fn keep, provider_adopt_fn adopted, void *ud,
                       sbx_error *err);

/* ---- lifecycle (lifecycle.c): the driver's pause and images ----
 * What a pause and an image keep ("memory", "filesystem"); NULL when the
 * driver cannot do that verb. */
const char *provider_pause_keeps(const struct provider *p);
const char *provider_image_keeps(const struct provider *p);
int inst_pause(struct inst *s, sbx_error *err);
int inst_resume(struct inst *s, sbx_error *err);
bool inst_paused(struct inst *s); /* as the driver reads it now */
/* An image of s in dir (created; complete when this returns 0). */
int inst_snapshot(struct inst *s, const char *dir, sbx_error *err);
/* A new instance of key started from an image: blocking, for a worker. */
int provider_restore(struct provider *p, const sbx_pool_key *key, const char *dir, int probe_ms, struct inst **out,
                     sbx_error *err);

#endif
