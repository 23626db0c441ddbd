/* config.h - sandboxd's configuration file (spec sandboxd-http.md §7). */
#ifndef SANDBOXD_CONFIG_H
#define SANDBOXD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include <sandbox/error.h>
#include <sandbox/pool.h>

#define CONFIG_FILE_MAX (4 * 1024 * 1024)

struct tenant {
  char *name;
  char *token;
  int max_claims;
};

struct pool_cfg {
  sbx_pool_conf pc;
  int idle_hibernate_seconds;
  int archive_after_seconds;
  int archive_delete_after_seconds;
  char **warmup; /* NULL-terminated argv, or NULL; config-owned */
};

struct config {
  char *listen_host; /* "" = every address; absent = 127.0.0.1 */
  int listen_port;
  char *data_dir;
  char *driver; /* jail | qemu | auto */
  char *templates_dir;
  char *advertise_addr;
  char *client_advertise;
  char *api_token; /* NULL = open mode */
  /* Open mode on an address other than loopback must be asked for. */
  bool allow_open_mode;
  struct tenant *tenants;
  size_t ntenants;
  int max_claims;
  int max_fork_count;
  int refill_concurrency;
  int release_delay_seconds;
  int idle_hibernate_seconds; /* node-wide, for unpooled keys (§5.5); 0 = off */
  int archive_after_seconds;        /* node-wide (§5.7); 0 = off */
  int archive_delete_after_seconds; /* retention of an archive; 0 = kept */
  char *checkpoint_dir;       /* NULL = <data_dir>/checkpoints (§5.9) */
  int checkpoint_ttl_hours;   /* 0 = records are kept until deleted */
  bool sync_claims;
  bool audit_log;
  bool log_json; /* log_format "json": one JSON object per line */
  /* Agent upgrades over a Unix agent channel pass the client socket to
   * silkd instead of relaying it (relay.c); false keeps the relay. */
  bool relay_handoff;
  /* Background work (refill, destroy) keeps off the first CPU, left to
   * claims and claimed sandboxes (sbx_pool_mgr_set_background). */
  bool reserve_claim_cpu;
  /* HTTP bounds (http.h); 0 = the default (max_connections: derived
   * from RLIMIT_NOFILE). */
  int max_connections;
  int head_timeout_seconds;
  int body_timeout_seconds;
  char *jail_scratch_dir;
  char *jail_cgroup_root;
  char *jail_seccomp;
  bool jail_user_namespace;
  struct pool_cfg *pools;
  size_t npools;
  /* "qemu" (§7.4), checked by parse_qemu; NULL = the driver's default. */
  struct {
    char *binary, *kernel, *initrd, *guest_dir, *guest_builder;
    char *accel, *restore_mode, *agent;
  } qemu;
};

/* Each returns 0, or a negative sbx_code with err saying what is wrong:
 * SBX_E_INVAL for a bad value, SBX_E_PARSE for bad JSON, an OS error for
 * a file that cannot be read. */
/* The embedded default (issue 5): 127.0.0.1:7777, data_dir for the user,
 * driver auto, one pool {host, none, small, warm 2}. */
int config_default(struct config **out, sbx_error *err);
int config_load_file(const char *path, struct config **out, sbx_error *err);
int config_parse(const char *text, size_t len, struct config **out, sbx_error *err);
void config_free(struct config *c);

/* Open mode (no api_token) reachable from other hosts: SBX_E_INVAL
 * unless allow_open_mode says so. Checked at load and again on a reload,
 * whose listen is the running one. */
int config_check_exposure(const struct config *c, sbx_error *err);
/* The warning to log when open mode is allowed off loopback; NULL if none. */
const char *config_exposure_warning(const struct config *c, char *buf, size_t len);

/* Pools as in PUT /v1/pools and pools.json (strict decoding is the
 * caller's; this checks fields and values). Config-owned warmup is merged
 * from base by key. Returns 0, or SBX_E_INVAL with err naming the field. */
int config_parse_pools(const json_t *arr, bool from_api, const struct config *base, struct pool_cfg **out,
                       size_t *n, sbx_error *err);
void config_free_pools(struct pool_cfg *p, size_t n);
json_t *config_pools_json(const struct pool_cfg *p, size_t n);

/* Grammar checks shared with the handlers. */
bool valid_name(const char *s); /* template / tenant / checkpoint names */
bool valid_size(const char *s);
bool valid_net(const char *s);

/* --check-config's look at what the pools name: each template other than
 * the built-in host must be registered under templates_dir. -1 with a
 * message naming the first pool whose template is missing. */
int config_check_templates(const struct config *c, sbx_error *err);

#endif
