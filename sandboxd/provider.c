/* provider.c - driver adapter. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "../libsandbox/core/env.h"
#include "../libsandbox/pool/secret.h"
#include "provider.h"
#include "sandboxd.h"

#ifdef SBX_HAVE_DRIVER
#include <sandbox/driver.h>
#endif

struct golden_ent {
  char hash[33];
#ifdef SBX_HAVE_DRIVER
  sbx_template *t;
  sbx_golden *g;
#endif
  bool cold; /* built for an unpooled key on a claim */
};

struct warmup_ent {
  char hash[33];
  char **argv; /* NULL-terminated, owned */
};

struct provider {
  pthread_mutex_t mu;
  /* One golden build at a time: builds of one key must not race (the
   * driver's template_prepare shares a temporary name per process), and
   * a claim that arrives during the pool's build should wait for it. */
  pthread_mutex_t build_mu;
  struct golden_ent *goldens;
  size_t ngoldens;
  struct warmup_ent *warmups; /* the pools' warmup argv, by key hash */
  size_t nwarmups;
#ifdef SBX_HAVE_DRIVER
  sbx_driver *drv;
  char goldens_dir[PATH_MAX], run_dir[PATH_MAX], silkd[PATH_MAX];
#endif
};

struct inst {
  char name[SBX_POOL_NAME_MAX];
#ifdef SBX_HAVE_DRIVER
  sbx_instance *di;
#endif
};

const char *inst_name(const struct inst *s) { return s->name; }

static void free_argv(char **a) {
  if (!a) return;
  for (char **x = a; *x; x++) sbx_free(*x);
  sbx_free(a);
}

static char **dup_argv(char *const *a) {
  if (!a) return NULL;
  size_t n = 0;
  while (a[n]) n++;
  char **c = sbx_calloc(n + 1, sizeof *c);
  for (size_t i = 0; i < n; i++) c[i] = sbx_strdup(a[i]);
  return c;
}

void provider_set_warmup(struct provider *p, const sbx_pool_key *key, char *const *argv) {
  char hash[33];
  key_hash(key, hash);
  pthread_mutex_lock(&p->mu);
  size_t i = 0;
  while (i < p->nwarmups && strcmp(p->warmups[i].hash, hash) != 0) i++;
  if (i == p->nwarmups) {
    if (!argv) {
      pthread_mutex_unlock(&p->mu);
      return;
    }
    p->warmups = sbx_reallocarray(p->warmups, p->nwarmups + 1, sizeof *p->warmups);
    memset(&p->warmups[i], 0, sizeof p->warmups[i]);
    memcpy(p->warmups[i].hash, hash, sizeof hash);
    p->nwarmups++;
  }
  free_argv(p->warmups[i].argv);
  p->warmups[i].argv = dup_argv(argv);
  pthread_mutex_unlock(&p->mu);
}

#ifdef SBX_HAVE_DRIVER
static int make_name(const sbx_pool_key *key, char *out, size_t len, sbx_error *err) {
  char hash[33], rnd[13];
  key_hash(key, hash);
  int rc = sbxi_random_hex(rnd, 6, err);
  if (rc < 0) return rc;
  snprintf(out, len, "sbx-%s-%s", hash, rnd);
  return 0;
}

static int mkdir_p(const char *path, sbx_error *err) {
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0755) < 0 && errno != EEXIST) return sbx_err_os(err, errno, "mkdir %s", buf);
    *p = '/';
  }
  if (mkdir(buf, 0755) < 0 && errno != EEXIST) return sbx_err_os(err, errno, "mkdir %s", buf);
  return 0;
}
#endif

/* ---- shared ---- */

int provider_open(const struct config *cfg, struct provider **out, sbx_error *err) {
  struct provider *p = sbx_calloc(1, sizeof *p);
  pthread_mutex_init(&p->mu, NULL);
  pthread_mutex_init(&p->build_mu, NULL);
  int rc;
#ifdef SBX_HAVE_DRIVER
  snprintf(p->goldens_dir, sizeof p->goldens_dir, "%s/goldens", cfg->data_dir);
  snprintf(p->run_dir, sizeof p->run_dir, "%s/run", cfg->data_dir);
  if ((rc = mkdir_p(p->goldens_dir, err)) < 0 || (rc = mkdir_p(p->run_dir, err)) < 0) goto fail;
  const char *silkd = getenv("SANDBOXD_SILKD");
  if (silkd) {
    snprintf(p->silkd, sizeof p->silkd, "%s", silkd);
  } else {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0) n = 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(p->silkd, sizeof p->silkd, "%s/silkd", exe);
  }
  sbx_driver_config dc = {.struct_size = sizeof dc,
                          .templates_dir = cfg->templates_dir,
                          .goldens_dir = p->goldens_dir,
                          .run_dir = p->run_dir,
                          .silkd_path = p->silkd,
                          .cgroup_name = cfg->jail_cgroup_root,
                          .qemu_binary = cfg->qemu.binary,
                          .qemu_guest_dir = cfg->qemu.guest_dir,
                          .qemu_kernel = cfg->qemu.kernel,
                          .qemu_initrd = cfg->qemu.initrd,
                          .qemu_guest_builder = cfg->qemu.guest_builder,
                          .qemu_accel = cfg->qemu.accel,
                          .qemu_restore_mode = cfg->qemu.restore_mode,
                          .qemu_agent = cfg->qemu.agent};
  sbxi_env_apply(&dc); /* the documented SBX_* variables override the config file */
  rc = sbx_driver_open(cfg->driver, &dc, &p->drv, err);
  if (rc < 0) goto fail;
  *out = p;
  return 0;
#else
  rc = sbx_err(err, SBX_E_UNSUPPORTED, "driver %s: this build has no drivers yet (libsandbox/driver is not built in)",
               cfg->driver);
  goto fail;
#endif
fail:
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->build_mu);
  sbx_free(p);
  return rc;
}

void provider_close(struct provider *p) {
  if (!p) return;
#ifdef SBX_HAVE_DRIVER
  for (size_t i = 0; i < p->ngoldens; i++) {
    if (p->goldens[i].g) sbx_golden_release(p->drv, p->goldens[i].g);
    if (p->goldens[i].t) sbx_template_release(p->drv, p->goldens[i].t);
  }
  if (p->drv) sbx_driver_close(p->drv);
#endif
  sbx_free(p->goldens);
  for (size_t i = 0; i < p->nwarmups; i++) free_argv(p->warmups[i].argv);
  sbx_free(p->warmups);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->build_mu);
  sbx_free(p);
}

const char *provider_name(const struct provider *p) {
#ifdef SBX_HAVE_DRIVER
  return sbx_driver_name(p->drv);
#else
  return "none";
#endif
}

static struct golden_ent *golden_find(struct provider *p, const char *hash) {
  for (size_t i = 0; i < p->ngoldens; i++)
    if (strcmp(p->goldens[i].hash, hash) == 0) return &p->goldens[i];
  return NULL;
}

bool provider_has_golden(struct provider *p, const sbx_pool_key *key) {
  char hash[33];
  key_hash(key, hash);
  pthread_mutex_lock(&p->mu);
  struct golden_ent *g = golden_find(p, hash);
  bool r = g && !g->cold;
  pthread_mutex_unlock(&p->mu);
  return r;
}

/* Build (once) what clones of key start from. cold marks a build made for
 * an unpooled key on a claim. */
static int prepare_key(struct provider *p, const sbx_pool_key *key, bool cold, sbx_error *err) {
  char hash[33];
  key_hash(key, hash);
  pthread_mutex_lock(&p->mu);
  struct golden_ent *have = golden_find(p, hash);
  if (have && !cold) have->cold = false;
  pthread_mutex_unlock(&p->mu);
  if (have) return 0;
#ifdef SBX_HAVE_DRIVER
  pthread_mutex_lock(&p->build_mu);
  pthread_mutex_lock(&p->mu);
  have = golden_find(p, hash);
  pthread_mutex_unlock(&p->mu);
  if (have) {
    /* Built while we waited. */
    pthread_mutex_unlock(&p->build_mu);
    return 0;
  }
  sbx_template *t = NULL;
  sbx_golden *g = NULL;
  sbx_template_spec ts = SBX_TEMPLATE_SPEC_INIT(.name = key->tmpl);
  int rc = sbx_template_prepare(p->drv, &ts, &t, err);
  if (rc < 0) {
    pthread_mutex_unlock(&p->build_mu);
    return rc;
  }
  /* A pool's warmup argv runs once in the builder (driver.h); unpooled
   * keys and pools without one get the template's layers as they are. */
  pthread_mutex_lock(&p->mu);
  char **warmup = NULL;
  for (size_t i = 0; i < p->nwarmups; i++)
    if (strcmp(p->warmups[i].hash, hash) == 0) warmup = dup_argv(p->warmups[i].argv);
  pthread_mutex_unlock(&p->mu);
  sbx_golden_spec gs = SBX_GOLDEN_SPEC_INIT(
      .key = hash, .size = sbx_size_tier_get(key->size), .warmup = (const char *const *)warmup);
  rc = sbx_golden_build(p->drv, t, &gs, &g, err);
  free_argv(warmup);
  if (rc < 0) {
    sbx_template_release(p->drv, t);
    pthread_mutex_unlock(&p->build_mu);
    return rc;
  }
  pthread_mutex_lock(&p->mu);
  p->goldens = sbx_reallocarray(p->goldens, p->ngoldens + 1, sizeof *p->goldens);
  struct golden_ent *e = &p->goldens[p->ngoldens++];
  memset(e, 0, sizeof *e);
  memcpy(e->hash, hash, sizeof e->hash);
  e->t = t;
  e->g = g;
  e->cold = cold;
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&p->build_mu);
  return 0;
#else
  return sbx_err(err, SBX_E_UNSUPPORTED, "no driver");
#endif
}

static int op_prepare(void *ud, const sbx_pool_key *key, sbx_error *err) {
  return prepare_key(ud, key, false, err);
}

/* Workers may run lowered (sbx_pool_mgr_set_background) and the jail's
 * children inherit that: a new sandbox's pid 1 goes back to the daemon's
 * own priority and CPUs (its main thread's, never lowered) once it is
 * ready, so the claimant's work is not throttled. */
static void inst_normal_priority(pid_t pid) {
  struct sched_param sp = {0};
  sched_setscheduler(pid, SCHED_OTHER, &sp);
  errno = 0;
  int base = getpriority(PRIO_PROCESS, (id_t)getpid());
  setpriority(PRIO_PROCESS, (id_t)pid, errno ? 0 : base);
  cpu_set_t cpus;
  if (sched_getaffinity(getpid(), sizeof cpus, &cpus) == 0) sched_setaffinity(pid, sizeof cpus, &cpus);
}

/* The reverse before a destroy: pid 1 takes the destroying worker's class,
 * as the kernel's teardown of its namespaces and mounts runs in its exit. */
static void inst_worker_priority(pid_t pid) {
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, 0);
  if (!errno) setpriority(PRIO_PROCESS, (id_t)pid, nice);
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof cpus, &cpus) == 0) sched_setaffinity(pid, sizeof cpus, &cpus);
}

static int op_provision(void *ud, const sbx_pool_key *key, int probe_ms, void **out, sbx_error *err) {
  struct provider *p = ud;
  int rc = prepare_key(p, key, true, err);
  if (rc < 0) return rc;
#ifdef SBX_HAVE_DRIVER
  struct inst *s = sbx_calloc(1, sizeof *s);
  rc = make_name(key, s->name, sizeof s->name, err);
  if (rc < 0) {
    sbx_free(s);
    return rc;
  }
  char hash[33];
  key_hash(key, hash);
  pthread_mutex_lock(&p->mu);
  sbx_golden *g = golden_find(p, hash)->g;
  pthread_mutex_unlock(&p->mu);
  sbx_clone_spec cs;
  sbx_clone_spec_init(&cs);
  cs.id = s->name;
  cs.size = sbx_size_tier_get(key->size);
  cs.net = SBX_NET_NONE;
  cs.ready_timeout_ms = probe_ms;
  rc = sbx_sandbox_clone(p->drv, g, &cs, &s->di, err);
  if (rc < 0) {
    sbx_free(s);
    return rc;
  }
  pid_t init = sbx_instance_pid(s->di);
  if (init > 0) inst_normal_priority(init);
  *out = s;
  return 0;
#else
  return sbx_err(err, SBX_E_UNSUPPORTED, "no driver");
#endif
}

static void op_destroy(void *ud, void *inst) {
  struct provider *p = ud;
  struct inst *s = inst;
  (void)p;
#ifdef SBX_HAVE_DRIVER
  if (s->di) {
    sbx_error err;
    pid_t init = sbx_instance_pid(s->di);
    if (init > 0) inst_worker_priority(init);
    if (sbx_sandbox_destroy(s->di, &err) < 0) sbx_warn("destroy %s: %s", s->name, err.msg);
  }
#endif
  sbx_free(s);
}

/* driver.h has no way yet to let go of an instance handle without
 * destroying the sandbox. Until it has, handles of sandboxes left running
 * at shutdown stay owned here, reachable until the process exits. */
static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
static struct inst **kept;
static size_t nkept;

void inst_forget(struct inst *s) {
#ifdef SBX_HAVE_DRIVER
  if (s->di) {
    pthread_mutex_lock(&kept_mu);
    kept = sbx_reallocarray(kept, nkept + 1, sizeof *kept);
    kept[nkept++] = s;
    pthread_mutex_unlock(&kept_mu);
    return;
  }
#endif
  sbx_free(s);
}

static void op_forget(void *ud, void *inst) { inst_forget(inst); }

sbx_pool_provider provider_pool_ops(struct provider *p) {
  return (sbx_pool_provider)SBX_POOL_PROVIDER_INIT(.prepare = op_prepare, .provision = op_provision,
                                                   .destroy = op_destroy, .forget = op_forget, .ud = p);
}

int inst_connect(struct inst *s, int *fd, sbx_error *err) {
#ifdef SBX_HAVE_DRIVER
  if (s->di) return sbx_sandbox_connect(s->di, fd, err);
#endif
  (void)fd;
  return sbx_err(err, SBX_E_UNSUPPORTED, "%s has no agent channel", s->name);
}

int inst_stats(struct inst *s, struct inst_stats *out, sbx_error *err) {
  memset(out, 0, sizeof *out);
#ifdef SBX_HAVE_DRIVER
  if (s->di) {
    sbx_stats st;
    int rc = sbx_sandbox_stats(s->di, &st, err);
    if (rc < 0) return rc;
    out->mem_used = st.mem_bytes;
    out->measured = true;
  }
#endif
  return 0;
}

#ifdef SBX_HAVE_DRIVER
struct rec_ctx {
  provider_keep_fn keep;
  provider_adopt_fn adopted;
  void *ud;
};

static bool rec_cb(void *ud, const sbx_found *found, sbx_instance *adopted) {
  struct rec_ctx *c = ud;
  if (!found->alive || !c->keep(c->ud, found->id)) return false;
  struct inst *s = sbx_calloc(1, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", found->id);
  s->di = adopted;
  c->adopted(c->ud, s->name, s);
  return true;
}
#endif

int provider_reconcile(struct provider *p, provider_keep_fn keep, provider_adopt_fn adopted, void *ud,
                       sbx_error *err) {
#ifdef SBX_HAVE_DRIVER
  struct rec_ctx c = {keep, adopted, ud};
  return sbx_driver_reconcile(p->drv, rec_cb, &c, err);
#else
  return sbx_err(err, SBX_E_UNSUPPORTED, "no driver");
#endif
}

/* ---- lifecycle ---- */

const char *provider_pause_keeps(const struct provider *p) {
#ifdef SBX_HAVE_DRIVER
  return sbx_driver_pause_keeps(p->drv);
#else
  return NULL;
#endif
}

const char *provider_image_keeps(const struct provider *p) {
#ifdef SBX_HAVE_DRIVER
  return sbx_driver_image_keeps(p->drv);
#else
  return NULL;
#endif
}

int inst_pause(struct inst *s, sbx_error *err) {
#ifdef SBX_HAVE_DRIVER
  if (s->di) return sbx_sandbox_pause(s->di, err);
#endif
  return sbx_err(err, SBX_E_UNSUPPORTED, "%s cannot be paused", s->name);
}

int inst_resume(struct inst *s, sbx_error *err) {
#ifdef SBX_HAVE_DRIVER
  if (s->di) return sbx_sandbox_resume(s->di, err);
#endif
  return sbx_err(err, SBX_E_UNSUPPORTED, "%s cannot be resumed", s->name);
}

bool inst_paused(struct inst *s) {
#ifdef SBX_HAVE_DRIVER
  if (s->di) return sbx_sandbox_is_paused(s->di);
#endif
  return false;
}

int inst_snapshot(struct inst *s, const char *dir, sbx_error *err) {
#ifdef SBX_HAVE_DRIVER
  if (s->di) return sbx_sandbox_snapshot(s->di, dir, err);
#endif
  (void)dir;
  return sbx_err(err, SBX_E_UNSUPPORTED, "%s has no image", s->name);
}

int provider_restore(struct provider *p, const sbx_pool_key *key, const char *dir, int probe_ms, struct inst **out,
                     sbx_error *err) {
  *out = NULL;
#ifdef SBX_HAVE_DRIVER
  struct inst *s = sbx_calloc(1, sizeof *s);
  int rc = make_name(key, s->name, sizeof s->name, err);
  if (rc < 0) {
    sbx_free(s);
    return rc;
  }
  sbx_clone_spec cs;
  sbx_clone_spec_init(&cs);
  cs.id = s->name;
  cs.size = sbx_size_tier_get(key->size);
  cs.net = SBX_NET_NONE;
  cs.ready_timeout_ms = probe_ms;
  rc = sbx_sandbox_restore(p->drv, dir, &cs, &s->di, err);
  if (rc < 0) {
    sbx_free(s);
    return rc;
  }
  pid_t init = sbx_instance_pid(s->di);
  if (init > 0) inst_normal_priority(init);
  *out = s;
  return 0;
#else
  (void)p, (void)key, (void)dir, (void)probe_ms;
  return sbx_err(err, SBX_E_UNSUPPORTED, "no driver");
#endif
}
