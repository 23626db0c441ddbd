/* archive.c - the archive tier below hibernate (spec §5.7).
 *
 * A hibernated sandbox idle for archive_after_seconds is exported to the
 * checkpoint store as a record flagged archive (never listed, deleted or
 * branched through the API), and its instance is destroyed. It keeps its
 * id and token; its lease becomes a retention deadline. A wake (explicit or
 * on use) restores the image in place, as a branch is cloned, and grants a
 * fresh lease of the last granted length. With the jail driver an archive
 * keeps the filesystem only: the woken sandbox runs fresh processes.
 *
 * Which sandboxes are archived is not journalled on its own: the store's
 * archive records name their sandbox, and a restart reads them back. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/path.h"
#include "sandboxd.h"
#include "checkpoint.h"

#define FOREVER_SECONDS (100ll * 366 * 86400)
#define PROBE_WAKE_MS 15000

struct arch {
  char id[SBX_LEASE_ID_LEN + 1];
  char ck[24];
};
static struct arch *arch;
static size_t narch;

static struct arch *arch_find(const char *id) {
  for (size_t i = 0; i < narch; i++)
    if (strcmp(arch[i].id, id) == 0) return &arch[i];
  return NULL;
}

static void arch_add(const char *id, const char *ck) {
  arch = sbx_reallocarray(arch, narch + 1, sizeof *arch);
  snprintf(arch[narch].id, sizeof arch[narch].id, "%s", id);
  /* ck is a checkpoint id ("ck_" + 16 hex), checked before it gets here */
  snprintf(arch[narch].ck, sizeof arch[narch].ck, "%.*s", (int)sizeof arch[narch].ck - 1, ck);
  narch++;
}

static void arch_del(struct arch *a) { *a = arch[--narch]; }

bool lease_archived(const sbx_lease *l) { return arch_find(l->id) != NULL; }

/* The key's archive settings: its pool's, else the node's. */
static void limits(struct sbxd *d, const sbx_lease *l, int *after, int *del) {
  *after = d->cfg->archive_after_seconds;
  *del = d->cfg->archive_delete_after_seconds;
  for (size_t i = 0; i < d->npools; i++) {
    const sbx_pool_key *k = &d->pools[i].pc.key;
    if (strcmp(k->tmpl, l->key.tmpl) == 0 && strcmp(k->net, l->key.net) == 0 && strcmp(k->size, l->key.size) == 0) {
      *after = d->pools[i].archive_after_seconds;
      *del = d->pools[i].archive_delete_after_seconds;
    }
  }
}

static int archive_now(struct sbxd *d, sbx_lease *l, int del, sbx_error *err) {
  char ck[24];
  json_t *rec = checkpoint_export(d, l, l->tenant, "", true, ck, err);
  if (!rec) return -1;
  json_decref(rec);
  /* Journalled before it is applied, as a claim is: a refused write leaves
   * the sandbox hibernated (its export dropped) and the tick tries again. */
  sbx_lease next = *l;
  next.deadline = now_unix() + (del > 0 ? del : FOREVER_SECONDS);
  sbx_lease ev = next;
  ev.vm[0] = '\0'; /* the event's vm is empty once archived (§6.1) */
  struct jmark jm;
  if (journal_begin(d, &jm, err) < 0) goto undo;
  if (journal_put(d, &next, err) < 0 || usage_event(d, "archive", &ev, NULL, err) < 0) {
    journal_abort(d, &jm, err);
    goto undo;
  }
  journal_commit(d);
  relays_close_for(d, l->id);
  watch_disarm(d, l); /* its pid 1 ends here on purpose */
  sbx_pool_mgr_destroy(d->pm, l->inst);
  l->inst = NULL;
  l->deadline = next.deadline;
  arch_add(l->id, ck);
  sbx_info("archived %s as %s", l->id, ck);
  return 0;
undo:
  checkpoint_remove(d, ck);
  return -1;
}

void archive_tick(struct sbxd *d, int64_t idle_since_fn(const char *id)) {
  int64_t now = now_unix();
  for (size_t i = 0; i < sbx_lease_count(d->leases);) {
    sbx_lease *l = sbx_lease_at(d->leases, i);
    struct arch *a = arch_find(l->id);
    int after, del;
    limits(d, l, &after, &del);
    if (a && l->deadline <= now) { /* retention over: purge (§5.7) */
      /* lease_end drops the export (archive_forget) once the journal has the end */
      sbx_error err;
      if (lease_end(d, l, "archive_delete", &err) < 0) { /* the journal refused: next tick */
        sbx_warn("archive %s: purge: %s", l->id, err.msg);
        i++;
        continue;
      }
      continue; /* removal moved another lease into slot i */
    }
    i++;
    if (a || after <= 0 || !l->inst || !inst_paused(l->inst)) continue;
    if (now - idle_since_fn(l->id) < after && l->deadline > now) continue;
    sbx_error err;
    if (archive_now(d, l, del, &err) < 0) sbx_warn("archive %s: %s", l->id, err.msg);
  }
}

int archive_wake(struct sbxd *d, sbx_lease *l, sbx_error *err) {
  struct arch *a = arch_find(l->id);
  if (!a) return sbx_err(err, SBX_E_NOTFOUND, "%s is not archived", l->id);
  char exp[PATH_MAX];
  checkpoint_export_path(d, a->ck, exp, sizeof exp);
  struct inst *s = NULL;
  int rc = provider_restore(d->prov, &l->key, exp, PROBE_WAKE_MS, &s, err);
  if (rc < 0) return rc;
  /* Journalled before it is applied: a refused write destroys the restored
   * instance and the sandbox stays archived (the wake fails). */
  sbx_lease next = *l;
  snprintf(next.vm, sizeof next.vm, "%s", inst_name(s));
  next.deadline = now_unix() + l->ttl; /* a fresh lease of the last granted length */
  struct jmark jm;
  if (journal_begin(d, &jm, err) < 0) goto undo;
  if (journal_put(d, &next, err) < 0 || usage_event(d, "unarchive", &next, NULL, err) < 0 ||
      usage_event(d, "wake", &next, NULL, err) < 0) {
    journal_abort(d, &jm, err);
    goto undo;
  }
  journal_commit(d);
  l->inst = s;
  snprintf(l->vm, sizeof l->vm, "%s", next.vm);
  l->deadline = next.deadline;
  watch_arm(d, l);
  checkpoint_remove(d, a->ck);
  arch_del(a);
  sbx_info("unarchived %s", l->id);
  return 0;
undo:
  sbx_pool_mgr_destroy(d->pm, s);
  return -1;
}

void archive_forget(struct sbxd *d, const sbx_lease *l) {
  struct arch *a = arch_find(l->id);
  if (!a) return;
  checkpoint_remove(d, a->ck);
  arch_del(a);
}

size_t archive_count(void) { return narch; }

/* After recover(): a journalled claim without an instance whose archive
 * record exists is archived, not failed. */
void archive_recover(struct sbxd *d) {
  char store[PATH_MAX], probe[PATH_MAX];
  checkpoint_export_path(d, "x", probe, sizeof probe);
  snprintf(store, sizeof store, "%s", probe);
  *strrchr(store, '/') = '\0';
  *strrchr(store, '/') = '\0';
  DIR *dir = opendir(store);
  struct dirent *de;
  while (dir && (de = readdir(dir))) {
    if (strncmp(de->d_name, "ck_", 3) != 0) continue;
    char meta[PATH_MAX];
    if (sbxi_path_fmt(meta, sizeof meta, NULL, "%s/%s/meta.json", store, de->d_name) < 0) continue;
    json_t *rec = read_json(meta);
    const char *sid = json_string_value(json_object_get(rec, "sandbox_id"));
    sbx_lease *l = sid && json_is_true(json_object_get(rec, "archive")) ? sbx_lease_find(d->leases, sid) : NULL;
    if (l && !l->inst && !arch_find(l->id)) {
      l->failed = false;
      arch_add(l->id, de->d_name);
    } else if (json_is_true(json_object_get(rec, "archive")) && !arch_find(sid ? sid : "")) {
      /* its sandbox was released meanwhile, or the archive never finished
       * (the instance is still there, adopted as hibernated) */
      checkpoint_remove(d, de->d_name);
    }
    json_decref(rec);
  }
  if (dir) closedir(dir);
}
