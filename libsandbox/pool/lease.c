/* lease.c - the claimed sandboxes of a node, admission caps with
 * reservations, ids and tokens from the CSPRNG, constant-time compare. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include <sandbox/core.h>
#include <sandbox/pool.h>

#include "secret.h"
#include "util/util.h"

struct reservation {
  char tenant[SBX_POOL_NAME_MAX];
  int count;
};

struct sbx_lease_table {
  sbx_lease **v;
  size_t n, cap;
  struct reservation *res;
  size_t nres;
  int reserved; /* all tenants */
};

sbx_lease_table *sbx_lease_table_new(void) { return sbx_calloc(1, sizeof(sbx_lease_table)); }

static void lease_free(sbx_lease *l) {
  sbx_free(l->claim_ref);
  sbx_free(l);
}

void sbx_lease_table_free(sbx_lease_table *t) {
  if (!t) return;
  for (size_t i = 0; i < t->n; i++) lease_free(t->v[i]);
  sbx_free(t->v);
  sbx_free(t->res);
  sbx_free(t);
}

static struct reservation *res_get(sbx_lease_table *t, const char *tenant, bool create) {
  for (size_t i = 0; i < t->nres; i++)
    if (strcmp(t->res[i].tenant, tenant) == 0) return &t->res[i];
  if (!create) return NULL;
  t->res = sbx_reallocarray(t->res, t->nres + 1, sizeof *t->res);
  struct reservation *r = &t->res[t->nres++];
  memset(r, 0, sizeof *r);
  snprintf(r->tenant, sizeof r->tenant, "%s", tenant);
  return r;
}

size_t sbx_lease_count(const sbx_lease_table *t) { return t->n; }

size_t sbx_lease_count_tenant(const sbx_lease_table *t, const char *tenant) {
  size_t c = 0;
  for (size_t i = 0; i < t->n; i++) c += strcmp(t->v[i]->tenant, tenant) == 0;
  return c;
}

int sbx_lease_reserve(sbx_lease_table *t, const char *tenant, int node_max, int tenant_max, sbx_error *err) {
  tenant = tenant ? tenant : "";
  if (node_max > 0 && t->n + (size_t)t->reserved >= (size_t)node_max) {
    sbx_err(err, SBX_E_BUSY, "node at capacity");
    if (err) err->detail = SBX_LEASE_CAP_NODE;
    return SBX_E_BUSY;
  }
  struct reservation *r = res_get(t, tenant, true);
  if (tenant_max > 0 && sbx_lease_count_tenant(t, tenant) + (size_t)r->count >= (size_t)tenant_max) {
    sbx_err(err, SBX_E_BUSY, "tenant at capacity");
    if (err) err->detail = SBX_LEASE_CAP_TENANT;
    return SBX_E_BUSY;
  }
  r->count++;
  t->reserved++;
  return 0;
}

void sbx_lease_unreserve(sbx_lease_table *t, const char *tenant) {
  struct reservation *r = res_get(t, tenant ? tenant : "", false);
  if (r && r->count > 0) {
    r->count--;
    t->reserved--;
  }
}

int sbxi_random_hex(char *out, size_t nbytes, sbx_error *err) {
  static const char hex[] = "0123456789abcdef";
  unsigned char raw[64];
  if (nbytes > sizeof raw) return sbx_err(err, SBX_E_INVAL, "random: %zu bytes is too many", nbytes);
  size_t got = 0;
  while (got < nbytes) {
    ssize_t r = getrandom(raw + got, nbytes - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return sbx_err_os(err, errno, "getrandom");
    }
    got += (size_t)r;
  }
  for (size_t i = 0; i < nbytes; i++) {
    out[2 * i] = hex[raw[i] >> 4];
    out[2 * i + 1] = hex[raw[i] & 15];
  }
  out[2 * nbytes] = '\0';
  return 0;
}

sbx_lease *sbx_lease_find(const sbx_lease_table *t, const char *id) {
  for (size_t i = 0; i < t->n; i++)
    if (strcmp(t->v[i]->id, id) == 0) return t->v[i];
  return NULL;
}

int sbx_lease_commit(sbx_lease_table *t, sbx_lease *tmpl, bool reserved, sbx_lease **out, sbx_error *err) {
  sbx_lease *l = sbx_malloc(sizeof *l);
  *l = *tmpl;
  l->claim_ref = tmpl->claim_ref ? sbx_strdup(tmpl->claim_ref) : NULL;
  if (l->id[0] == '\0') {
    /* 8 random bytes make collisions unlikely, not impossible: retry. */
    do {
      memcpy(l->id, SBXI_LEASE_ID_PREFIX, 3);
      int rc = sbxi_random_hex(l->id + 3, 8, err);
      if (rc < 0) {
        lease_free(l);
        return rc;
      }
    } while (sbx_lease_find(t, l->id));
  }
  if (l->token[0] == '\0') {
    int rc = sbxi_random_hex(l->token, 16, err);
    if (rc < 0) {
      lease_free(l);
      return rc;
    }
  }
  if (reserved) sbx_lease_unreserve(t, l->tenant);
  if (t->n == t->cap) {
    t->cap = t->cap ? t->cap * 2 : 16;
    t->v = sbx_reallocarray(t->v, t->cap, sizeof *t->v);
  }
  t->v[t->n++] = l;
  if (out) *out = l;
  return 0;
}

void sbx_lease_remove(sbx_lease_table *t, sbx_lease *l) {
  for (size_t i = 0; i < t->n; i++) {
    if (t->v[i] == l) {
      t->v[i] = t->v[--t->n];
      lease_free(l);
      return;
    }
  }
}

sbx_lease *sbx_lease_at(const sbx_lease_table *t, size_t i) { return i < t->n ? t->v[i] : NULL; }

bool sbxi_secret_eq(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  size_t n = la > lb ? la : lb;
  unsigned char diff = la != lb;
  /* Walk the longer length whatever happens; volatile keeps the compiler
   * from turning this back into an early exit. */
  for (size_t i = 0; i < n; i++) {
    unsigned char x = i < la ? (unsigned char)a[i] : 0;
    unsigned char y = i < lb ? (unsigned char)b[i] : 0;
    diff |= x ^ y;
  }
  volatile unsigned char v = diff;
  return v == 0;
}
