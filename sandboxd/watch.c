/* watch.c - notice at once when a claimed sandbox's pid 1 dies.
 *
 * Without a watch a dead silkd (kill -9, an OOM kill, a crash) showed only
 * as 502s on the next exec or agent call, while its row, /stats and
 * sandboxd_failed looked healthy. Each claimed sandbox's pid 1 pidfd (the
 * VMM process for a VM) sits on the event loop; when it turns readable the
 * sandbox is marked failed with the reason (exit status, signal, OOM kill)
 * in its row and /stats, a "fail" usage event, the journal and the
 * metrics, its relays are closed and its remains destroyed. The row stays,
 * counted in sandboxd_failed, until it is released or reaped (§5.13).
 * Warm sandboxes are the pool manager's: it drops dead ones (alive). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sandboxd.h"

struct watch {
  struct watch *next;
  struct sbxd *d;
  sbx_lease *l;
  struct event *ev;
  int fd;
};

static void watch_free(struct watch *w) {
  event_free(w->ev);
  close(w->fd);
  sbx_free(w);
}

static struct watch *unlink_watch(struct sbxd *d, const sbx_lease *l) {
  for (struct watch **pp = &d->watches; *pp; pp = &(*pp)->next) {
    if ((*pp)->l != l) continue;
    struct watch *w = *pp;
    *pp = w->next;
    return w;
  }
  return NULL;
}

/* Journal it, then let go of what is left of the instance. The failure
 * is kept in memory even when the journal refuses it: it happened, and a
 * restart finds the instance gone anyway. */
static void lease_fail(struct sbxd *d, sbx_lease *l, const char *reason, const char *cause) {
  l->failed = true;
  snprintf(l->failed_reason, sizeof l->failed_reason, "%s", reason);
  snprintf(l->failed_cause, sizeof l->failed_cause, "%s", cause);
  l->failed_at = now_unix();
  sbx_warn("sandbox %s (%s) failed: %s", l->id, l->vm, reason);
  struct jmark jm;
  sbx_error err;
  if (journal_begin(d, &jm, &err) == 0) {
    if (journal_put(d, l, &err) < 0 || usage_event(d, "fail", l, NULL, &err) < 0) journal_abort(d, &jm, &err);
    else journal_commit(d);
  }
  relays_close_for(d, l->id);
  sbx_pool_mgr_destroy(d->pm, l->inst);
  l->inst = NULL;
}

static void on_exit_of_pid1(evutil_socket_t fd, short what, void *arg) {
  struct watch *w = arg;
  struct sbxd *d = w->d;
  sbx_lease *l = w->l;
  unlink_watch(d, l);
  watch_free(w);
  char reason[sizeof l->failed_reason], cause[sizeof l->failed_cause];
  inst_death(l->inst, reason, sizeof reason, cause, sizeof cause);
  lease_fail(d, l, reason, cause);
}

void watch_arm(struct sbxd *d, sbx_lease *l) {
  if (!d->base || !l->inst || l->failed) return;
  int fd = inst_watch_fd(l->inst);
  if (fd < 0) return; /* the driver offers no pidfd: found dead on use */
  struct watch *w = sbx_calloc(1, sizeof *w);
  w->d = d;
  w->l = l;
  w->fd = fd;
  w->ev = event_new(d->base, fd, EV_READ, on_exit_of_pid1, w);
  event_add(w->ev, NULL);
  w->next = d->watches;
  d->watches = w;
}

void watch_arm_all(struct sbxd *d) {
  sbx_lease *l;
  for (size_t i = 0; (l = sbx_lease_at(d->leases, i)); i++) watch_arm(d, l);
}

void watch_disarm(struct sbxd *d, sbx_lease *l) {
  struct watch *w = unlink_watch(d, l);
  if (w) watch_free(w);
}

void watch_disarm_all(struct sbxd *d) {
  while (d->watches) {
    struct watch *w = d->watches;
    d->watches = w->next;
    watch_free(w);
  }
}
