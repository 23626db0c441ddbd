/* sandboxd: the per-node control plane (spec sandboxd-http.md).
 *
 * One libevent loop serves HTTP, relays and the pool manager's completions;
 * provisioning and teardown run on the pool manager's workers. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include <sandbox/sandbox.h>

#include "../libsandbox/core/env.h"
#include "notify.h"
#include "sandboxd.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: sandboxd [--config FILE] [--check-config] [--version] [--help]\n"
          "  With no --config, sandboxd runs its embedded default: listen 127.0.0.1:7777,\n"
          "  data_dir /var/lib/sandboxd (root) or $XDG_STATE_HOME/sandboxd, driver auto,\n"
          "  one pool {template host, net none, size small, warm 2}.\n"
          "  Log level: SANDBOXD_LOG_LEVEL=error|warn|info|debug (default info).\n");
}

/* Enough descriptors for ~1000 relays (two sockets each) and then some. */
static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0) return;
  rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
  if (rl.rlim_cur < want) {
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) sbx_warn("setrlimit(RLIMIT_NOFILE): %s", strerror(errno));
  }
}

static void on_pool(evutil_socket_t fd, short what, void *arg) {
  struct sbxd *d = arg;
  sbx_pool_mgr_dispatch(d->pm);
}

static void on_refill(evutil_socket_t fd, short what, void *arg) {
  struct sbxd *d = arg;
  sbx_pool_mgr_tick(d->pm, sbx_now_ns());
}

static void on_reap(evutil_socket_t fd, short what, void *arg) { reap_tick(arg); }

/* Refill after a warm claim waits a few milliseconds (see
 * sbx_pool_mgr_set_kick_delay): the claimant's first requests, usually
 * right behind the claim, then do not share the CPUs with a clone. */
#define KICK_DELAY_MS 20

static void on_kick(evutil_socket_t fd, short what, void *arg) {
  struct sbxd *d = arg;
  sbx_pool_mgr_kick(d->pm);
}

void arm_kick(struct sbxd *d) {
  uint64_t due = sbx_pool_mgr_kick_due(d->pm);
  if (!due || evtimer_pending(d->ev_kick, NULL)) return;
  uint64_t now = sbx_now_ns();
  uint64_t wait = due > now ? due - now : 0;
  struct timeval tv = {(time_t)(wait / 1000000000u), (suseconds_t)(wait % 1000000000u / 1000u)};
  evtimer_add(d->ev_kick, &tv);
}

static void on_term(evutil_socket_t fd, short what, void *arg) {
  struct sbxd *d = arg;
  sbx_info("signal %d: stopping (live sandboxes keep running)", (int)fd);
  d->stopping = true;
  event_base_loopbreak(d->base);
}

/* Pools to run: pools.json wins over the config's pools (§4.18). */
static int load_pools(struct sbxd *d, struct config *cfg, struct pool_cfg **p, size_t *n, sbx_error *err) {
  struct config *saved = d->cfg;
  d->cfg = cfg; /* pools.json merges warmup from this config */
  int rc = journal_read_pools(d, p, n, err);
  d->cfg = saved;
  if (rc < 0) return rc;
  d->pools_from_file = rc == 1;
  if (rc == 0) {
    *n = cfg->npools;
    *p = sbx_calloc(*n ? *n : 1, sizeof **p);
    for (size_t i = 0; i < *n; i++) {
      (*p)[i] = cfg->pools[i];
      if (cfg->pools[i].warmup) {
        size_t k = 0;
        while (cfg->pools[i].warmup[k]) k++;
        (*p)[i].warmup = sbx_calloc(k + 1, sizeof(char *));
        for (size_t j = 0; j < k; j++) (*p)[i].warmup[j] = sbx_strdup(cfg->pools[i].warmup[j]);
      }
    }
  }
  return 0;
}

static void on_hup(evutil_socket_t fd, short what, void *arg) {
  struct sbxd *d = arg;
  if (!d->config_path) {
    sbx_info("SIGHUP: no config file; nothing to reload");
    return;
  }
  struct config *nc;
  sbx_error err;
  if (config_load_file(d->config_path, &nc, &err) < 0) {
    sbx_error_log("SIGHUP: reload failed, keeping the old config: %s", err.msg);
    return;
  }
  if (strcmp(nc->data_dir, d->cfg->data_dir) || strcmp(nc->listen_host, d->cfg->listen_host) ||
      nc->listen_port != d->cfg->listen_port || strcmp(nc->driver, d->cfg->driver))
    sbx_warn("SIGHUP: listen, data_dir and driver changes take effect at the next start");
  /* Keep what the running process is bound to. */
  char *keep[] = {nc->listen_host, nc->data_dir, nc->driver};
  nc->listen_host = sbx_strdup(d->cfg->listen_host);
  nc->listen_port = d->cfg->listen_port;
  nc->data_dir = sbx_strdup(d->cfg->data_dir);
  nc->driver = sbx_strdup(d->cfg->driver);
  for (size_t i = 0; i < 3; i++) sbx_free(keep[i]);
  if (config_check_exposure(nc, &err) < 0) {
    sbx_error_log("SIGHUP: reload refused, keeping the old config: %s", err.msg);
    config_free(nc);
    return;
  }
  char warn[300];
  if (config_exposure_warning(nc, warn, sizeof warn)) sbx_warn("%s", warn);
  struct pool_cfg *p;
  size_t n;
  if (load_pools(d, nc, &p, &n, &err) < 0) {
    sbx_error_log("SIGHUP: %s; keeping the old config", err.msg);
    config_free(nc);
    return;
  }
  config_free(d->cfg);
  d->cfg = nc;
  if (apply_pools(d, p, n, &err) < 0) sbx_error_log("SIGHUP: pools: %s", err.msg);
  sbx_info("SIGHUP: reloaded tokens, tenants and %zu pool(s)", d->npools);
}

static int lock_data_dir(struct sbxd *d) {
  int fd = openat(d->data_fd, "sandboxd.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
    sbx_error_log("data_dir %s: another sandboxd holds it (%s)", d->cfg->data_dir, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd; /* held for the life of the process */
}

/* ---- start: each step reports its own failure; main maps it to an exit
 * status (2: configuration, 1: the node cannot start). ---- */

struct args {
  const char *config_path;
  bool check_only;
};

/* -1 to go on, or the status to exit with. */
static int parse_args(int argc, char **argv, struct args *a) {
  static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                        {"check-config", no_argument, NULL, 'k'},
                                        {"version", no_argument, NULL, 'V'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  int o;
  while ((o = getopt_long_only(argc, argv, "c:h", opts, NULL)) != -1) {
    switch (o) {
    case 'c': a->config_path = optarg; break;
    case 'k': a->check_only = true; break;
    case 'V': printf("sandboxd %s\n", sbx_version()); return 0;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    usage(stderr);
    return 2;
  }
  return -1;
}

static void setup_process(void) {
  const char *lvl = getenv("SANDBOXD_LOG_LEVEL");
  int level = lvl ? sbx_log_level_parse(lvl) : SBX_LOG_INFO;
  sbx_log_setup("sandboxd", level < 0 ? SBX_LOG_INFO : (sbx_log_level)level, SBX_LOG_PLAIN);
  if (lvl && level < 0) sbx_warn("SANDBOXD_LOG_LEVEL=%s is not error|warn|info|debug; using info", lvl);
  sbxi_env_apply(NULL); /* SBX_B64_SCALAR; provider.c applies the driver's */
  notify_init();
}

static int load_config(struct sbxd *d) {
  sbx_error err;
  int rc = d->config_path ? config_load_file(d->config_path, &d->cfg, &err) : config_default(&d->cfg, &err);
  if (rc < 0) {
    fprintf(stderr, "sandboxd: config: %s\n", err.msg);
    return -1;
  }
  char warn[300];
  if (config_exposure_warning(d->cfg, warn, sizeof warn)) sbx_warn("%s", warn);
  return 0;
}

static void print_config_ok(const struct config *c) {
  const char *h = c->listen_host;
  printf("config ok: listen %s%s%s:%d, %s mode\n", strchr(h, ':') ? "[" : "", h[0] ? h : "0.0.0.0",
         strchr(h, ':') ? "]" : "", c->listen_port, c->api_token ? "token" : "open");
}

/* The data_dir (journal, lock), the driver, the pool manager, and the
 * claims adopted from the last run. */
static int open_node(struct sbxd *d, int *lock_fd) {
  sbx_error err;
  if (journal_open(d, &err) < 0 || (*lock_fd = lock_data_dir(d)) < 0) {
    if (*lock_fd < 0 && d->data_fd >= 0) err.msg[0] = '\0';
    if (err.msg[0]) fprintf(stderr, "sandboxd: %s\n", err.msg);
    return -1;
  }
  if (provider_open(d->cfg, &d->prov, &err) < 0) {
    fprintf(stderr, "sandboxd: driver %s: %s\n", d->cfg->driver, err.msg);
    return -1;
  }
  sbx_pool_provider pops = provider_pool_ops(d->prov);
  if (sbx_pool_mgr_new(&pops, (unsigned)d->cfg->refill_concurrency, &d->pm, &err) < 0) {
    fprintf(stderr, "sandboxd: %s\n", err.msg);
    return -1;
  }
  /* Refill, goldens and destroys yield to the loop, the sandboxes and
   * their clients; a claim waiting on a clone runs at normal priority.
   * Not SCHED_IDLE: on a busy node an idle-class destroy holding a kernel
   * lock stalls the normal-priority clones behind it (churn fell by half
   * in bench/claim under load; docs/performance.md). reserve_claim_cpu
   * keeps that work off one CPU. */
  sbx_pool_mgr_set_background(d->pm, SBX_POOL_SCHED_NICE, d->cfg->reserve_claim_cpu);
  d->leases = sbx_lease_table_new();
  if (recover(d, &err) < 0) sbx_error_log("recovery: %s", err.msg);
  lifecycle_recover(d);
  return 0;
}

static int start_pools(struct sbxd *d) {
  sbx_error err;
  struct pool_cfg *p;
  size_t n;
  if (load_pools(d, d->cfg, &p, &n, &err) < 0) {
    fprintf(stderr, "sandboxd: %s\n", err.msg);
    return -1;
  }
  if (apply_pools(d, p, n, &err) < 0) {
    fprintf(stderr, "sandboxd: pools: %s\n", err.msg);
    return -1;
  }
  return 0;
}

/* The bound port, or -1. */
static int start_http(struct sbxd *d) {
  d->base = event_base_new();
  d->http = http_server_new(d->base, router_handle, d);
  struct http_limits lim = {(size_t)d->cfg->max_connections, d->cfg->head_timeout_seconds,
                            d->cfg->body_timeout_seconds};
  http_server_configure(d->http, &lim, router_head);
  sbx_error err;
  int port = http_server_listen(d->http, d->cfg->listen_host, d->cfg->listen_port, &err);
  if (port < 0) {
    fprintf(stderr, "sandboxd: %s\n", err.msg);
    return -1;
  }
  if (d->cfg->client_advertise) snprintf(d->owner_addr, sizeof d->owner_addr, "%s", d->cfg->client_advertise);
  else if (d->cfg->advertise_addr) snprintf(d->owner_addr, sizeof d->owner_addr, "%s", d->cfg->advertise_addr);
  else if (d->cfg->listen_host[0])
    snprintf(d->owner_addr, sizeof d->owner_addr, strchr(d->cfg->listen_host, ':') ? "[%s]:%d" : "%s:%d",
             d->cfg->listen_host, port);
  /* A wildcard host is blanked: clients use the address they dialled. */
  return port;
}

static void arm_events(struct sbxd *d) {
  d->ev_pool = event_new(d->base, sbx_pool_mgr_fd(d->pm), EV_READ | EV_PERSIST, on_pool, d);
  d->ev_refill = event_new(d->base, -1, EV_PERSIST, on_refill, d);
  d->ev_reap = event_new(d->base, -1, EV_PERSIST, on_reap, d);
  d->ev_kick = evtimer_new(d->base, on_kick, d);
  sbx_pool_mgr_set_kick_delay(d->pm, KICK_DELAY_MS * 1000000ull);
  d->ev_hup = evsignal_new(d->base, SIGHUP, on_hup, d);
  d->ev_term = evsignal_new(d->base, SIGTERM, on_term, d);
  d->ev_int = evsignal_new(d->base, SIGINT, on_term, d);
  struct timeval two = {2, 0}, five = {5, 0};
  event_add(d->ev_pool, NULL);
  event_add(d->ev_refill, &two);
  event_add(d->ev_reap, &five);
  event_add(d->ev_hup, NULL);
  event_add(d->ev_term, NULL);
  event_add(d->ev_int, NULL);
  watch_arm_all(d); /* the adopted sandboxes' pid 1 */
  sbx_pool_mgr_tick(d->pm, sbx_now_ns());
  reap_tick(d); /* deadlines that passed while we were down */
}

static void announce_ready(struct sbxd *d, int port) {
  sbx_info("sandboxd %s listening on %s:%d (driver %s, data_dir %s, %s mode, %zu claim(s) adopted)", sbx_version(),
           d->cfg->listen_host[0] ? d->cfg->listen_host : "*", port, provider_name(d->prov), d->cfg->data_dir,
           d->cfg->api_token ? "token" : "open", sbx_lease_count(d->leases));
  /* The line tests and scripts wait for. */
  fprintf(stderr, "sandboxd: ready port=%d\n", port);
  /* Type=notify: the listener is bound and the pools are set (warm
   * sandboxes keep filling in the background). */
  char status[128];
  snprintf(status, sizeof status, "READY=1\nSTATUS=listening on port %d", port);
  notify_send(status);
}

/* Stop: no new connections, relays and pending requests closed, warm
 * and claimed instances left running for the next start (§5.13). */
static void stop_node(struct sbxd *d, int lock_fd) {
  d->stopping = true;
  watch_disarm_all(d);
  notify_send("STOPPING=1");
  relays_close_all(d);
  exec_shutdown(d);
  durable_stop(d);
  http_server_free(d->http);
  sbx_pool_mgr_free(d->pm);
  sbx_error jerr;
  if (journal_write_claims(d, &jerr) < 0) sbx_error_log("claims journal: %s", jerr.msg);
  event_free(d->ev_pool);
  event_free(d->ev_refill);
  event_free(d->ev_reap);
  event_free(d->ev_kick);
  event_free(d->ev_hup);
  event_free(d->ev_term);
  event_free(d->ev_int);
  event_base_free(d->base);
  while (d->delayed) {
    struct delayed_destroy *dd2 = d->delayed;
    d->delayed = dd2->next;
    inst_forget(dd2->inst);
    sbx_free(dd2);
  }
  sbx_lease *l;
  for (size_t i = 0; (l = sbx_lease_at(d->leases, i)); i++)
    if (l->inst) inst_forget(l->inst);
  sbx_lease_table_free(d->leases);
  provider_close(d->prov);
  config_free_pools(d->pools, d->npools);
  config_free(d->cfg);
  close(d->usage_fd);
  close(d->log_fd);
  close(d->data_fd);
  close(lock_fd);
  sbx_info("stopped");
}

int main(int argc, char **argv) {
  struct args a = {0};
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  setup_process();
  struct sbxd dd = {.data_fd = -1, .usage_fd = -1, .log_fd = -1}, *d = &dd;
  d->config_path = a.config_path;
  if (load_config(d) < 0) return 2;
  sbx_error terr;
  if (config_check_templates(d->cfg, &terr) < 0) {
    /* At a start the pool stays empty and says why in /v1/info. */
    if (a.check_only) {
      fprintf(stderr, "sandboxd: config: %s\n", terr.msg);
      config_free(d->cfg);
      return 2;
    }
    sbx_warn("config: %s", terr.msg);
  }
  if (a.check_only) {
    print_config_ok(d->cfg);
    config_free(d->cfg);
    return 0;
  }
  signal(SIGPIPE, SIG_IGN);
  raise_nofile();
  int lock_fd = -1;
  if (open_node(d, &lock_fd) < 0) return 1;
  if (start_pools(d) < 0) return 2;
  int port = start_http(d);
  if (port < 0) return 1;
  sbx_error err;
  if (durable_start(d, &err) < 0) {
    fprintf(stderr, "sandboxd: claims journal: %s\n", err.msg);
    return 1;
  }
  arm_events(d);
  announce_ready(d, port);
  event_base_dispatch(d->base);
  stop_node(d, lock_fd);
  return 0;
}
