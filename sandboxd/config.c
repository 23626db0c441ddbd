/* config.c - load, validate and default sandboxd's JSON configuration.
 *
 * Every key of spec §7.2 is known; the ones this build does not act on yet
 * (egress, volumes, previews, checkpoints, cluster) are type-checked and
 * logged, so a config written for the full daemon still loads. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandbox/core.h>
#include <sandbox/driver.h>

#include "config.h"
#include "config_json.h"
#include "core/cleanup.h"
#include "core/path.h"

bool valid_name(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n > 63) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (i == 0 ? !alnum : !(alnum || c == '.' || c == '_' || c == ':' || c == '/' || c == '-')) return false;
  }
  return true;
}

bool valid_size(const char *s) { return sbx_size_tier_get(s) != NULL; }

bool valid_net(const char *s) { return strcmp(s, "none") == 0 || strcmp(s, "egress") == 0; }

int config_get_int(const json_t *v, const char *what, int min, int *out, sbx_error *err) {
  if (!json_is_integer(v)) return sbx_err(err, SBX_E_INVAL, "%s: must be an integer", what);
  json_int_t i = json_integer_value(v);
  if (i < min) return sbx_err(err, SBX_E_INVAL, "%s: must be >= %d", what, min);
  if (i > INT_MAX) return sbx_err(err, SBX_E_INVAL, "%s: too large", what);
  *out = (int)i;
  return 0;
}

static int get_str(const json_t *v, const char *what, char **out, sbx_error *err) {
  if (!json_is_string(v)) return sbx_err(err, SBX_E_INVAL, "%s: must be a string", what);
  if (strlen(json_string_value(v)) != json_string_length(v))
    return sbx_err(err, SBX_E_INVAL, "%s: must not contain NUL", what);
  sbx_free(*out);
  *out = sbx_strdup(json_string_value(v));
  return 0;
}

static int get_bool(const json_t *v, const char *what, bool *out, sbx_error *err) {
  if (!json_is_boolean(v)) return sbx_err(err, SBX_E_INVAL, "%s: must be true or false", what);
  *out = json_is_true(v);
  return 0;
}

static int parse_listen(const char *s, char **host, int *port, sbx_error *err) {
  const char *colon = strrchr(s, ':');
  if (!colon) return sbx_err(err, SBX_E_INVAL, "listen: \"%s\" is not host:port", s);
  char *e;
  errno = 0;
  long p = strtol(colon + 1, &e, 10);
  if (errno || *e || e == colon + 1 || p < 0 || p > 65535)
    return sbx_err(err, SBX_E_INVAL, "listen: bad port in \"%s\"", s);
  size_t hl = (size_t)(colon - s);
  const char *h = s;
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
    h++;
    hl -= 2;
  }
  sbx_free(*host);
  *host = sbx_strndup(h, hl);
  if (strcmp(*host, "0.0.0.0") == 0 || strcmp(*host, "::") == 0) (*host)[0] = '\0';
  *port = (int)p;
  return 0;
}


static void free_qemu(struct config *c);

void config_free(struct config *c) {
  if (!c) return;
  sbx_free(c->listen_host);
  sbx_free(c->data_dir);
  sbx_free(c->checkpoint_dir);
  sbx_free(c->driver);
  sbx_free(c->templates_dir);
  sbx_free(c->advertise_addr);
  sbx_free(c->client_advertise);
  sbx_free(c->api_token);
  for (size_t i = 0; i < c->ntenants; i++) {
    sbx_free(c->tenants[i].name);
    sbx_free(c->tenants[i].token);
  }
  sbx_free(c->tenants);
  sbx_free(c->jail_scratch_dir);
  sbx_free(c->jail_cgroup_root);
  sbx_free(c->jail_seccomp);
  free_qemu(c);
  config_free_pools(c->pools, c->npools);
  sbx_free(c);
}

static char *default_data_dir(void) {
  if (geteuid() == 0) return sbx_strdup("/var/lib/sandboxd");
  const char *x = getenv("XDG_STATE_HOME");
  char buf[PATH_MAX];
  const char *home = getenv("HOME") ? getenv("HOME") : "/tmp";
  int rc = x && x[0] == '/' ? sbxi_path_fmt(buf, sizeof buf, NULL, "%s/sandboxd", x)
                            : sbxi_path_fmt(buf, sizeof buf, NULL, "%s/.local/state/sandboxd", home);
  return sbx_strdup(rc < 0 ? "" : buf); /* "": config_finish refuses it as not absolute */
}

static struct config *config_new(void) {
  struct config *c = sbx_calloc(1, sizeof *c);
  /* A file without listen stays on this host: a config copied from the
   * docs must not put an exec API on the network by accident. */
  c->listen_host = sbx_strdup("127.0.0.1");
  c->listen_port = 7777;
  c->driver = sbx_strdup("auto");
  c->max_fork_count = 16;
  /* Off: the handed-off client socket is of the host's network namespace,
   * and silkd, which would hold it, runs in the sandbox (docs/security.md). */
  c->relay_handoff = false;
  c->reserve_claim_cpu = true;
  return c;
}

/* Defaults that depend on other keys. */
static int config_finish(struct config *c, sbx_error *err) {
  if (!c->data_dir) c->data_dir = sbx_strdup("/var/lib/sandboxd");
  if (c->data_dir[0] != '/') return sbx_err(err, SBX_E_INVAL, "data_dir: must be an absolute path");
  if (!c->templates_dir) {
    char buf[PATH_MAX];
    if (sbxi_path_fmt(buf, sizeof buf, NULL, "%s/templates", c->data_dir) < 0)
      return sbx_err(err, SBX_E_INVAL, "data_dir: too long");
    c->templates_dir = sbx_strdup(buf);
  }
  if (!c->jail_cgroup_root) c->jail_cgroup_root = sbx_strdup("sandbox");
  if (c->refill_concurrency == 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long rc = cpus * 2 / 3;
    c->refill_concurrency = (int)(rc < 4 ? 4 : rc > 256 ? 256 : rc);
  }
  if (c->ntenants && !c->api_token) return sbx_err(err, SBX_E_INVAL, "tenants: need api_token");
  for (size_t i = 0; i < c->ntenants; i++)
    for (size_t k = 0; k < i; k++) {
      if (strcmp(c->tenants[i].name, c->tenants[k].name) == 0)
        return sbx_err(err, SBX_E_INVAL, "tenants[%zu].name: duplicate \"%s\"", i, c->tenants[i].name);
      if (strcmp(c->tenants[i].token, c->tenants[k].token) == 0)
        return sbx_err(err, SBX_E_INVAL, "tenants[%zu].token: duplicate token", i);
    }
  for (size_t i = 0; i < c->ntenants; i++)
    if (c->api_token && strcmp(c->tenants[i].token, c->api_token) == 0)
      return sbx_err(err, SBX_E_INVAL, "tenants[%zu].token: equals api_token", i);
  return config_check_exposure(c, err);
}

static bool loopback_host(const char *h) {
  return strcmp(h, "localhost") == 0 || strncmp(h, "127.", 4) == 0 || strcmp(h, "::1") == 0 ||
         strncmp(h, "::ffff:127.", 11) == 0;
}

int config_check_exposure(const struct config *c, sbx_error *err) {
  if (c->api_token || c->allow_open_mode || loopback_host(c->listen_host)) return 0;
  return sbx_err(err, SBX_E_INVAL,
                 "listen: open mode (no api_token) on %s would serve the exec API to the network without "
              "authentication; set api_token, listen on 127.0.0.1, or set allow_open_mode: true",
              c->listen_host[0] ? c->listen_host : "every address");
}

const char *config_exposure_warning(const struct config *c, char *buf, size_t len) {
  if (c->api_token || loopback_host(c->listen_host)) return NULL;
  snprintf(buf, len,
           "open mode on %s (allow_open_mode): anyone who can reach port %d can claim sandboxes and run "
           "commands in them",
           c->listen_host[0] ? c->listen_host : "every address", c->listen_port);
  return buf;
}

int config_default(struct config **out, sbx_error *err) {
  struct config *c = config_new();
  c->data_dir = default_data_dir();
  c->pools = sbx_calloc(1, sizeof *c->pools);
  c->npools = 1;
  snprintf(c->pools[0].pc.key.tmpl, sizeof c->pools[0].pc.key.tmpl, "host");
  snprintf(c->pools[0].pc.key.net, sizeof c->pools[0].pc.key.net, "none");
  snprintf(c->pools[0].pc.key.size, sizeof c->pools[0].pc.key.size, "small");
  c->pools[0].pc.warm = 2;
  int rc = config_finish(c, err);
  if (rc < 0) {
    config_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

static int parse_tenants(struct config *c, const json_t *arr, sbx_error *err) {
  if (!json_is_array(arr)) return sbx_err(err, SBX_E_INVAL, "tenants: must be an array");
  c->ntenants = json_array_size(arr);
  c->tenants = sbx_calloc(c->ntenants ? c->ntenants : 1, sizeof *c->tenants);
  for (size_t i = 0; i < c->ntenants; i++) {
    const json_t *o = json_array_get(arr, i);
    char what[64];
    if (!json_is_object(o)) return sbx_err(err, SBX_E_INVAL, "tenants[%zu]: must be an object", i);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
      snprintf(what, sizeof what, "tenants[%zu].%s", i, k);
      int rc;
      if (strcmp(k, "name") == 0) rc = get_str(v, what, &c->tenants[i].name, err);
      else if (strcmp(k, "token") == 0) rc = get_str(v, what, &c->tenants[i].token, err);
      else if (strcmp(k, "max_claims") == 0) rc = config_get_int(v, what, 0, &c->tenants[i].max_claims, err);
      else if (strcmp(k, "egress") == 0) {
        rc = json_is_object(v) ? 0 : sbx_err(err, SBX_E_INVAL, "%s: must be an object", what);
        if (rc == 0) sbx_warn("config: %s is accepted but not acted on by this build", what);
      }
      else rc = sbx_err(err, SBX_E_INVAL, "%s: unknown key", what);
      if (rc < 0) return rc;
    }
    if (!c->tenants[i].name || !valid_name(c->tenants[i].name))
      return sbx_err(err, SBX_E_INVAL, "tenants[%zu].name: required, and must match the name grammar", i);
    if (!c->tenants[i].token || !c->tenants[i].token[0])
      return sbx_err(err, SBX_E_INVAL, "tenants[%zu].token: required and non-empty", i);
  }
  return 0;
}

static int parse_jail(struct config *c, const json_t *o, sbx_error *err) {
  if (!json_is_object(o)) return sbx_err(err, SBX_E_INVAL, "jail: must be an object");
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)o, k, v) {
    char what[64];
    snprintf(what, sizeof what, "jail.%s", k);
    int rc;
    if (strcmp(k, "scratch_dir") == 0) rc = get_str(v, what, &c->jail_scratch_dir, err);
    else if (strcmp(k, "cgroup_root") == 0) rc = get_str(v, what, &c->jail_cgroup_root, err);
    else if (strcmp(k, "seccomp") == 0) rc = get_str(v, what, &c->jail_seccomp, err);
    else if (strcmp(k, "user_namespace") == 0) rc = get_bool(v, what, &c->jail_user_namespace, err);
    else rc = sbx_err(err, SBX_E_INVAL, "%s: unknown key", what);
    if (rc < 0) return rc;
  }
  return 0;
}

/* "qemu" (§7.4): the spec's keys (machine only as "microvm") plus this
 * build's guest_dir, guest_builder and agent. Values are checked here so a
 * bad one stops the daemon at start, not at the first clone. */
static int parse_qemu(struct config *c, const json_t *o, sbx_error *err) {
  if (!json_is_object(o)) return sbx_err(err, SBX_E_INVAL, "qemu: must be an object");
  static const struct {
    const char *key, *one_of; /* one_of NULL: a path */
    size_t off;
  } keys[] = {
      {"binary", NULL, offsetof(struct config, qemu.binary)},
      {"kernel", NULL, offsetof(struct config, qemu.kernel)},
      {"initrd", NULL, offsetof(struct config, qemu.initrd)},
      {"guest_dir", NULL, offsetof(struct config, qemu.guest_dir)},
      {"guest_builder", NULL, offsetof(struct config, qemu.guest_builder)},
      {"accel", "auto|kvm|tcg", offsetof(struct config, qemu.accel)},
      {"restore_mode", "copy|mmap", offsetof(struct config, qemu.restore_mode)},
      {"agent", "auto|vsock|tcp", offsetof(struct config, qemu.agent)},
      {"machine", "microvm", 0},
  };
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)o, k, v) {
    char what[64];
    snprintf(what, sizeof what, "qemu.%s", k);
    size_t i;
    for (i = 0; i < sizeof keys / sizeof *keys && strcmp(k, keys[i].key) != 0; i++) {
    }
    if (i == sizeof keys / sizeof *keys) return sbx_err(err, SBX_E_INVAL, "%s: unknown key", what);
    char *s = NULL;
    if (get_str(v, what, &s, err) < 0) return SBX_E_INVAL;
    int rc = 0;
    if (keys[i].one_of) {
      bool ok = false;
      size_t n = strlen(s);
      for (const char *w = keys[i].one_of; *w && !ok; w += strcspn(w, "|"), w += *w == '|')
        ok = strcspn(w, "|") == n && strncmp(w, s, n) == 0;
      if (!ok) rc = sbx_err(err, SBX_E_INVAL, "%s: \"%s\" is not one of %s", what, s, keys[i].one_of);
    } else if (s[0] != '/' && !(strcmp(k, "binary") == 0 && s[0] && !strchr(s, '/'))) {
      /* binary may also be a bare name, looked up in PATH as the spec's
       * default "qemu-system-x86_64" is */
      rc = sbx_err(err, SBX_E_INVAL, "%s: must be an absolute path", what);
    }
    if (rc < 0 || !keys[i].off) {
      sbx_free(s);
      if (rc < 0) return rc;
      continue;
    }
    char **dst = (char **)(void *)((char *)c + keys[i].off);
    sbx_free(*dst);
    *dst = s;
  }
  return 0;
}

static void free_qemu(struct config *c) {
  sbx_free(c->qemu.binary);
  sbx_free(c->qemu.kernel);
  sbx_free(c->qemu.initrd);
  sbx_free(c->qemu.guest_dir);
  sbx_free(c->qemu.guest_builder);
  sbx_free(c->qemu.accel);
  sbx_free(c->qemu.restore_mode);
  sbx_free(c->qemu.agent);
}

/* Keys of §7.2 that this build accepts and checks for type only. */
static const struct {
  const char *key;
  json_type type;
} inert_keys[] = {
    {"bridges", JSON_ARRAY},
    {"networks", JSON_ARRAY},
    {"volumes", JSON_ARRAY},
    {"secrets", JSON_ARRAY},
    {"egress_internal_allow", JSON_ARRAY},
    {"egress_ca", JSON_OBJECT},
    {"preview_listen", JSON_STRING},
    {"preview_secret", JSON_STRING},
    {"preview_advertise", JSON_STRING},
    {"checkpoint_dir", JSON_STRING},
    {"checkpoint_store", JSON_OBJECT},
    {"checkpoint_ttl_hours", JSON_INTEGER},
    {"checkpoint_peer_heal", JSON_TRUE},
    {"cluster", JSON_OBJECT},
    {"idle_hibernate_seconds", JSON_INTEGER},
    {"archive_after_seconds", JSON_INTEGER},
    {"archive_delete_after_seconds", JSON_INTEGER},
};

/* log_format: "text" (the default) or "json". Applied at once: it is
 * the process's, and a reload changes it too. */
static int parse_log_format(struct config *c, const json_t *v, sbx_error *err) {
  const char *s = v ? json_string_value(v) : "text";
  if (!s || (strcmp(s, "text") && strcmp(s, "json")))
    return sbx_err(err, SBX_E_INVAL, "log_format: must be \"text\" or \"json\"");
  c->log_json = strcmp(s, "json") == 0;
  sbx_log_set_format(c->log_json ? SBX_LOG_JSON : SBX_LOG_PLAIN);
  return 0;
}

int config_parse(const char *text, size_t len, struct config **out, sbx_error *err) {
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) return sbx_err(err, SBX_E_PARSE, "line %d column %d: %s", je.line, je.column, je.text);
  struct config *c = config_new();
  int rc = 0;
  json_t *pools = NULL;
  if (!json_is_object(root)) {
    rc = sbx_err(err, SBX_E_INVAL, "the configuration must be a JSON object");
    goto out;
  }
  /* First, so that the warnings below come out in the configured format. */
  if ((rc = parse_log_format(c, json_object_get(root, "log_format"), err)) < 0) goto out;
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if (strcmp(k, "log_format") == 0) {
      /* parsed above */
    } else if (strcmp(k, "listen") == 0) {
      char *s = NULL;
      rc = get_str(v, k, &s, err);
      if (rc == 0) rc = parse_listen(s, &c->listen_host, &c->listen_port, err);
      sbx_free(s);
    } else if (strcmp(k, "data_dir") == 0) {
      rc = get_str(v, k, &c->data_dir, err);
    } else if (strcmp(k, "driver") == 0) {
      rc = get_str(v, k, &c->driver, err);
      if (rc == 0 && strcmp(c->driver, "jail") && strcmp(c->driver, "qemu") && strcmp(c->driver, "auto"))
        rc = sbx_err(err, SBX_E_INVAL, "driver: \"%s\" is not one of jail, qemu, auto", c->driver);
    } else if (strcmp(k, "templates_dir") == 0) {
      rc = get_str(v, k, &c->templates_dir, err);
    } else if (strcmp(k, "checkpoint_dir") == 0) {
      rc = get_str(v, k, &c->checkpoint_dir, err);
    } else if (strcmp(k, "checkpoint_ttl_hours") == 0) {
      rc = config_get_int(v, k, 0, &c->checkpoint_ttl_hours, err);
    } else if (strcmp(k, "advertise_addr") == 0) {
      rc = get_str(v, k, &c->advertise_addr, err);
    } else if (strcmp(k, "client_advertise") == 0) {
      rc = get_str(v, k, &c->client_advertise, err);
      if (rc == 0 && strncmp(c->client_advertise, "http://", 7) && strncmp(c->client_advertise, "https://", 8))
        rc = sbx_err(err, SBX_E_INVAL, "client_advertise: must be an http(s)://host[:port] origin");
    } else if (strcmp(k, "api_token") == 0) {
      rc = get_str(v, k, &c->api_token, err);
      if (rc == 0 && !c->api_token[0]) rc = sbx_err(err, SBX_E_INVAL, "api_token: must not be empty");
    } else if (strcmp(k, "allow_open_mode") == 0) {
      rc = get_bool(v, k, &c->allow_open_mode, err);
    } else if (strcmp(k, "tenants") == 0) {
      rc = parse_tenants(c, v, err);
    } else if (strcmp(k, "max_claims") == 0) {
      rc = config_get_int(v, k, 0, &c->max_claims, err);
    } else if (strcmp(k, "max_fork_count") == 0) {
      rc = config_get_int(v, k, 1, &c->max_fork_count, err);
    } else if (strcmp(k, "refill_concurrency") == 0) {
      rc = config_get_int(v, k, 1, &c->refill_concurrency, err);
      if (rc == 0 && c->refill_concurrency > 256) rc = sbx_err(err, SBX_E_INVAL, "refill_concurrency: at most 256");
    } else if (strcmp(k, "idle_hibernate_seconds") == 0) {
      rc = config_get_int(v, k, 0, &c->idle_hibernate_seconds, err);
    } else if (strcmp(k, "archive_after_seconds") == 0) {
      rc = config_get_int(v, k, 0, &c->archive_after_seconds, err);
    } else if (strcmp(k, "archive_delete_after_seconds") == 0) {
      rc = config_get_int(v, k, 0, &c->archive_delete_after_seconds, err);
    } else if (strcmp(k, "release_delay_seconds") == 0) {
      rc = config_get_int(v, k, 0, &c->release_delay_seconds, err);
    } else if (strcmp(k, "sync_claims") == 0) {
      rc = get_bool(v, k, &c->sync_claims, err);
    } else if (strcmp(k, "audit_log") == 0) {
      rc = get_bool(v, k, &c->audit_log, err);
    } else if (strcmp(k, "relay_handoff") == 0) {
      rc = get_bool(v, k, &c->relay_handoff, err);
    } else if (strcmp(k, "reserve_claim_cpu") == 0) {
      rc = get_bool(v, k, &c->reserve_claim_cpu, err);
    } else if (strcmp(k, "max_connections") == 0) {
      rc = config_get_int(v, k, 0, &c->max_connections, err);
    } else if (strcmp(k, "head_timeout_seconds") == 0) {
      rc = config_get_int(v, k, 1, &c->head_timeout_seconds, err);
    } else if (strcmp(k, "body_timeout_seconds") == 0) {
      rc = config_get_int(v, k, 1, &c->body_timeout_seconds, err);
    } else if (strcmp(k, "jail") == 0) {
      rc = parse_jail(c, v, err);
    } else if (strcmp(k, "qemu") == 0) {
      rc = parse_qemu(c, v, err);
    } else if (strcmp(k, "pools") == 0) {
      pools = v;
    } else if (strcmp(k, "bridge") == 0 || strcmp(k, "network") == 0) {
      rc = sbx_err(err, SBX_E_INVAL, "%s: retired key; use %ss", k, k);
    } else {
      size_t i;
      for (i = 0; i < sizeof inert_keys / sizeof *inert_keys; i++) {
        if (strcmp(k, inert_keys[i].key) != 0) continue;
        json_type t = json_typeof(v);
        if (t == JSON_FALSE) t = JSON_TRUE;
        if (t != inert_keys[i].type) rc = sbx_err(err, SBX_E_INVAL, "%s: wrong type", k);
        else sbx_warn("config: %s is accepted but not acted on by this build", k);
        break;
      }
      if (i == sizeof inert_keys / sizeof *inert_keys) rc = sbx_err(err, SBX_E_INVAL, "unknown key \"%s\"", k);
    }
    if (rc < 0) goto out;
  }
  if (json_object_get(root, "bridges") && json_object_get(root, "networks")) {
    rc = sbx_err(err, SBX_E_INVAL, "bridges and networks cannot both be set");
    goto out;
  }
  if (json_object_get(root, "preview_listen") && !json_object_get(root, "preview_secret")) {
    rc = sbx_err(err, SBX_E_INVAL, "preview_listen: needs preview_secret");
    goto out;
  }
  if (pools) {
    rc = config_parse_pools(pools, false, NULL, &c->pools, &c->npools, err);
    if (rc < 0) goto out;
    bool attach = json_object_get(root, "bridges") || json_object_get(root, "networks");
    for (size_t i = 0; i < c->npools; i++)
      if (strcmp(c->pools[i].pc.key.net, "egress") == 0 && !attach) {
        rc = sbx_err(err, SBX_E_INVAL, "pools[%zu]: an egress pool needs bridges or networks", i);
        goto out;
      }
  }
  rc = config_finish(c, err);
out:
  json_decref(root);
  if (rc < 0) {
    config_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

int config_load_file(const char *path, struct config **out, sbx_error *err) {
  sbxi_cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sbx_err_os(err, errno, "%s", path);
  sbxi_cleanup_buf sbx_buf b = SBX_BUF_INIT(CONFIG_FILE_MAX);
  for (;;) {
    char *w;
    if (sbx_buf_reserve(&b, 65536, &w, NULL) < 0)
      return sbx_err(err, SBX_E_TOOBIG, "%s: larger than %d bytes", path, CONFIG_FILE_MAX);
    ssize_t r = read(fd, w, 65536);
    if (r < 0) {
      if (errno == EINTR) continue;
      return sbx_err_os(err, errno, "%s", path);
    }
    if (r == 0) break;
    sbx_buf_commit(&b, (size_t)r);
  }
  int rc = config_parse(b.ptr ? b.ptr : "", b.len, out, err);
  return rc < 0 ? sbx_err_wrap(err, "%s", path) : 0;
}
