/* config_pools.c - the "pools" array (spec sandboxd-http.md §7.2-7.3), shared by
 * the config file and PUT /v1/pools, and its JSON form for GET. */
#include <stdio.h>
#include <string.h>

#include <sandbox/core.h>

#include "config.h"
#include "config_json.h"

void config_free_pools(struct pool_cfg *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (p[i].warmup)
      for (char **a = p[i].warmup; *a; a++) sbx_free(*a);
    sbx_free(p[i].warmup);
  }
  sbx_free(p);
}

static char **dup_argv(char *const *argv) {
  size_t n = 0;
  while (argv[n]) n++;
  char **o = sbx_calloc(n + 1, sizeof *o);
  for (size_t i = 0; i < n; i++) o[i] = sbx_strdup(argv[i]);
  return o;
}

/* The warmup argv of the config file; the builder execs argv[0] as is,
 * without a PATH search, so a relative name would only fail at the golden
 * build, far from here. */
static int parse_warmup(const json_t *val, const char *field, struct pool_cfg *p, sbx_error *err) {
  if (!json_is_array(val) || json_array_size(val) == 0)
    return sbx_err(err, SBX_E_INVAL, "%s: must be a non-empty array of strings", field);
  p->warmup = sbx_calloc(json_array_size(val) + 1, sizeof *p->warmup);
  for (size_t a = 0; a < json_array_size(val); a++) {
    const json_t *s = json_array_get(val, a);
    if (!json_is_string(s) || json_string_length(s) == 0)
      return sbx_err(err, SBX_E_INVAL, "%s[%zu]: must be a non-empty string", field, a);
    p->warmup[a] = sbx_strdup(json_string_value(s));
  }
  if (p->warmup[0][0] != '/')
    return sbx_err(err, SBX_E_INVAL, "%s[0]: must be an absolute path, not \"%.64s\"", field, p->warmup[0]);
  return 0;
}

/* One member of a pool object; have_warm/have_max note which counts came. */
static int parse_pool_field(const char *k, const json_t *val, const char *field, bool from_api, struct pool_cfg *p,
                            bool *have_warm, bool *have_max, sbx_error *err) {
  if (strcmp(k, "template") == 0) {
    if (!json_is_string(val) || !valid_name(json_string_value(val)))
      return sbx_err(err, SBX_E_INVAL, "%s: invalid template name", field);
    snprintf(p->pc.key.tmpl, sizeof p->pc.key.tmpl, "%s", json_string_value(val));
  } else if (strcmp(k, "net") == 0) {
    if (!json_is_string(val) || !valid_net(json_string_value(val)))
      return sbx_err(err, SBX_E_INVAL, "%s: invalid net (none or egress)", field);
    snprintf(p->pc.key.net, sizeof p->pc.key.net, "%s", json_string_value(val));
  } else if (strcmp(k, "size") == 0) {
    if (!json_is_string(val) || !valid_size(json_string_value(val)))
      return sbx_err(err, SBX_E_INVAL, "%s: invalid size (small, medium, large, xlarge, 2xlarge)", field);
    snprintf(p->pc.key.size, sizeof p->pc.key.size, "%s", json_string_value(val));
  } else if (strcmp(k, "warm") == 0) {
    *have_warm = true;
    return config_get_int(val, field, 0, &p->pc.warm, err);
  } else if (strcmp(k, "warm_max") == 0) {
    *have_max = true;
    return config_get_int(val, field, 0, &p->pc.warm_max, err);
  } else if (strcmp(k, "idle_hibernate_seconds") == 0) {
    return config_get_int(val, field, 0, &p->idle_hibernate_seconds, err);
  } else if (strcmp(k, "archive_after_seconds") == 0) {
    return config_get_int(val, field, 0, &p->archive_after_seconds, err);
  } else if (strcmp(k, "archive_delete_after_seconds") == 0) {
    return config_get_int(val, field, 0, &p->archive_delete_after_seconds, err);
  } else if (!from_api && strcmp(k, "warmup") == 0) {
    return parse_warmup(val, field, p, err);
  } else if (!from_api && strcmp(k, "egress") == 0) {
    if (!json_is_object(val)) return sbx_err(err, SBX_E_INVAL, "%s: must be an object", field);
    sbx_warn("config: %s is accepted but not acted on by this build", field);
  } else if (from_api && (strcmp(k, "egress") == 0 || strcmp(k, "warmup") == 0)) {
    return sbx_err(err, SBX_E_INVAL, "%s: owned by the config file, not settable here", field);
  } else {
    return sbx_err(err, SBX_E_INVAL, "%s: unknown field", field);
  }
  return 0;
}

/* The rules across a pool's fields, and its key unique among v[0..i). */
static int check_pool(const struct pool_cfg *v, size_t i, const char *what, sbx_error *err) {
  const struct pool_cfg *p = &v[i];
  if (!p->pc.key.tmpl[0]) return sbx_err(err, SBX_E_INVAL, "%s.template: required", what);
  if (p->pc.warm_max > 0 && p->pc.warm_max < p->pc.warm)
    return sbx_err(err, SBX_E_INVAL, "%s.warm_max: must be >= warm", what);
  if (p->idle_hibernate_seconds > 0 && strcmp(p->pc.key.net, "egress") == 0)
    return sbx_err(err, SBX_E_INVAL, "%s.idle_hibernate_seconds: not allowed on an egress pool", what);
  if ((p->archive_after_seconds > 0 &&
       (p->idle_hibernate_seconds == 0 || p->archive_after_seconds <= p->idle_hibernate_seconds)) ||
      (p->archive_delete_after_seconds > 0 && p->archive_after_seconds == 0))
    return sbx_err(err, SBX_E_INVAL, "%s: bad archive window", what);
  for (size_t k = 0; k < i; k++)
    if (sbx_pool_key_eq(&v[k].pc.key, &p->pc.key))
      return sbx_err(err, SBX_E_INVAL, "%s: duplicate key %s|%s|%s", what, p->pc.key.tmpl, p->pc.key.net,
                     p->pc.key.size);
  return 0;
}

/* One pool object: defaults, its fields, the checks across them, and (from
 * the API) the config file's warmup for the same key. */
static int parse_pool(const json_t *o, const char *what, bool from_api, const struct config *base,
                      struct pool_cfg *v, size_t i, sbx_error *err) {
  struct pool_cfg *p = &v[i];
  if (!json_is_object(o)) return sbx_err(err, SBX_E_INVAL, "%s: must be an object", what);
  bool have_warm = false, have_max = false;
  snprintf(p->pc.key.net, sizeof p->pc.key.net, "none");
  snprintf(p->pc.key.size, sizeof p->pc.key.size, "small");
  const char *k;
  json_t *val;
  json_object_foreach((json_t *)o, k, val) {
    char field[96];
    snprintf(field, sizeof field, "%s.%s", what, k);
    int rc = parse_pool_field(k, val, field, from_api, p, &have_warm, &have_max, err);
    if (rc < 0) return rc;
  }
  if (!have_warm && !have_max) p->pc.warm = 4;
  int rc = check_pool(v, i, what, err);
  if (rc < 0) return rc;
  if (from_api && base) {
    for (size_t b = 0; b < base->npools; b++)
      if (sbx_pool_key_eq(&base->pools[b].pc.key, &p->pc.key) && base->pools[b].warmup)
        p->warmup = dup_argv(base->pools[b].warmup);
  }
  return 0;
}

int config_parse_pools(const json_t *arr, bool from_api, const struct config *base, struct pool_cfg **out,
                       size_t *n_out, sbx_error *err) {
  if (!json_is_array(arr)) return sbx_err(err, SBX_E_INVAL, "pools: must be an array");
  size_t n = json_array_size(arr);
  if (n > 1024) return sbx_err(err, SBX_E_INVAL, "pools: too many pools (at most 1024)");
  struct pool_cfg *v = sbx_calloc(n ? n : 1, sizeof *v);
  for (size_t i = 0; i < n; i++) {
    char what[64];
    snprintf(what, sizeof what, "pools[%zu]", i);
    int rc = parse_pool(json_array_get(arr, i), what, from_api, base, v, i, err);
    if (rc < 0) {
      config_free_pools(v, n);
      return rc;
    }
  }
  *out = v;
  *n_out = n;
  return 0;
}

json_t *config_pools_json(const struct pool_cfg *p, size_t n) {
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_pack("{s:s,s:s,s:s,s:i,s:i}", "template", p[i].pc.key.tmpl, "net", p[i].pc.key.net, "size",
                          p[i].pc.key.size, "warm", p[i].pc.warm, "warm_max", p[i].pc.warm_max);
    if (p[i].idle_hibernate_seconds)
      json_object_set_new(o, "idle_hibernate_seconds", json_integer(p[i].idle_hibernate_seconds));
    if (p[i].archive_after_seconds)
      json_object_set_new(o, "archive_after_seconds", json_integer(p[i].archive_after_seconds));
    if (p[i].archive_delete_after_seconds)
      json_object_set_new(o, "archive_delete_after_seconds", json_integer(p[i].archive_delete_after_seconds));
    json_array_append_new(arr, o);
  }
  return arr;
}
