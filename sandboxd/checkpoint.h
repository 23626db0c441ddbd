/* checkpoint.h - what checkpoint.c and promote.c share: the store's small
 * files, ownership, and the restore of an export into a new sandbox. */
#ifndef SANDBOXD_CHECKPOINT_H
#define SANDBOXD_CHECKPOINT_H

#include <limits.h>

#include "sandboxd.h"

struct restore_op {
  struct sbxd *d;
  struct http_req *req;
  bool client_gone;
  sbx_lease proto;
  char *claim_ref;
  char held[PATH_MAX];   /* the record or generation in use */
  char export[PATH_MAX];
  char ref[80];          /* usage ref: the checkpoint id or the template name */
  char from_checkpoint[24];
  char digest[80];
  struct inst *inst;
  sbx_error err;
};

/* Admission (drain, node and tenant caps), then the restore on a worker and
 * the commit of the new sandbox; answers the request itself. Takes op
 * (allocated, proto.key/tenant/ttl, held, export and ref filled). */
void restore_start(struct sbxd *d, struct http_req *req, struct restore_op *op, const struct caller *who);
/* held stays until the restore has its own copy; then removed if doomed. */
void remove_when_unused(const char *dir);
/* A record's directory in use (take) or no longer (a delete meanwhile
 * removes it at the last drop); loop thread only. */
void checkpoint_use(const char *dir, bool take);
/* The record of id (meta.json, archive records too) and its directory in
 * dir; NULL for a bad or unknown id. */
json_t *checkpoint_record(struct sbxd *d, const char *id, char *dir, size_t cap);

json_t *key_obj(const sbx_pool_key *k);
bool owns(const struct caller *who, const char *tenant); /* §2.6 */
/* text as dir/name: temp file, fsync, rename, fsync of dir. */
int commit_file(const char *dir, const char *name, const char *text, sbx_error *err);
json_t *read_json(const char *path); /* an object of at most 64 KiB, or NULL */
void rm_path(const char *path);       /* rm -rf, never following links */

#endif
