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
#include <sandbox/driver.h>

#include "core/path.h"
#include "provider.h"
#include "sandboxd.h"

struct golden_ent {
  char hash[33];
  sbx_template *t;
  sbx_golden *g;
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
  sbx_driver *drv;
  char goldens_dir[PATH_MAX], run_dir[PATH_MAX], silkd[PATH_MAX];
};

struct inst {
  char name[SBX_POOL_NAME_MAX];
  sbx_instance *di;
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

static int make_name(const sbx_pool_key *key, char *out, size_t len, sbx_error *err) {
  char hash[33], rnd[13];
  key_hash(key, hash);
  int rc = sbx_random_hex(rnd, 6, err);
  if (rc < 0) return rc;
  snprintf(out, len, "sbx-%s-%s", hash, rnd);
  return 0;
}

static int mkdir_p(const char *path, sbx_error *err) {
  char buf[PATH_MAX];
  if (sbxi_path_fmt(buf, sizeof buf, err, "%s", path) < 0) return SBX_E_NAMETOOLONG;
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0755) < 0 && errno != EEXIST) return sbx_err_os(err, errno, "mkdir %s", buf);
    *p = '/';
  }
  if (mkdir(buf, 0755) < 0 && errno != EEXIST) return sbx_err_os(err, errno, "mkdir %s", buf);
  return 0;
}

/* ---- shared ---- */

int provider_open(const struct config *cfg, struct provider **out, sbx_error *err) {
  struct provider *p = sbx_calloc(1, sizeof *p);
  pthread_mutex_init(&p->mu, NULL);
  pthread_mutex_init(&p->build_mu, NULL);
  int rc;
  if ((rc = sbxi_path_fmt(p->goldens_dir, sizeof p->goldens_dir, err, "%s/goldens", cfg->data_dir)) < 0) goto fail;
  if ((rc = sbxi_path_fmt(p->run_dir, sizeof p->run_dir, err, "%s/run", cfg->data_dir)) < 0) goto fail;
  if ((rc = mkdir_p(p->goldens_dir, err)) < 0 || (rc = mkdir_p(p->run_dir, err)) < 0) goto fail;
  const char *silkd = getenv("SANDBOXD_SILKD");
  if (silkd) {
    if ((rc = sbxi_path_fmt(p->silkd, sizeof p->silkd, err, "%s", silkd)) < 0) goto fail;
  } else {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0) n = 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    if ((rc = sbxi_path_fmt(p->silkd, sizeof p->silkd, err, "%s/silkd", exe)) < 0) goto fail;
  }
  sbx_driver_config dc = {.templates_dir = cfg->templates_dir,
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
  rc = sbx_driver_open(cfg->driver, &dc, &p->drv, err);
  if (rc < 0) goto fail;
  *out = p;
  return 0;
fail:
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->build_mu);
  sbx_free(p);
  return rc;
}

void provider_close(struct provider *p) {
  if (!p) return;
  for (size_t i = 0; i < p->ngoldens; i++) {
    if (p->goldens[i].g) sbx_golden_release(p->drv, p->goldens[i].g);
    if (p->goldens[i].t) sbx_template_release(p->drv, p->goldens[i].t);
  }
  if (p->drv) sbx_driver_close(p->drv);
  sbx_free(p->goldens);
  for (size_t i = 0; i < p->nwarmups; i++) free_argv(p->warmups[i].argv);
  sbx_free(p->warmups);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->build_mu);
  sbx_free(p);
}

const char *provider_name(const struct provider *p) {
  return sbx_driver_name(p->drv);
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
  sbx_template_spec ts = {.name = key->tmpl};
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
  sbx_golden_spec gs = {
      .key = hash, .size = sbx_size_tier_get(key->size), .warmup = (const char *const *)warmup};
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
}

static void op_destroy(void *ud, void *inst) {
  struct inst *s = inst;
  if (s->di) {
    sbx_error err;
    pid_t init = sbx_instance_pid(s->di);
    if (init > 0) inst_worker_priority(init);
    if (sbx_sandbox_destroy(s->di, &err) < 0) sbx_warn("destroy %s: %s", s->name, err.msg);
  }
  sbx_free(s);
}

/* driver.h has no way yet to let go of an instance handle without
 * destroying the sandbox. Until it has, handles of sandboxes left running
 * at shutdown stay owned here, reachable until the process exits. */
static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
static struct inst **kept;
static size_t nkept;

void inst_forget(struct inst *s) {
  if (s->di) {
    pthread_mutex_lock(&kept_mu);
    kept = sbx_reallocarray(kept, nkept + 1, sizeof *kept);
    kept[nkept++] = s;
    pthread_mutex_unlock(&kept_mu);
    return;
  }
  sbx_free(s);
}

static void op_forget(void *ud, void *inst) { inst_forget(inst); }

sbx_pool_provider provider_pool_ops(struct provider *p) {
  return (sbx_pool_provider){
      .prepare = op_prepare, .provision = op_provision, .destroy = op_destroy, .forget = op_forget, .ud = p};
}

int inst_connect(struct inst *s, int *fd, sbx_error *err) {
  if (s->di) return sbx_sandbox_connect(s->di, fd, err);
  return sbx_err(err, SBX_E_UNSUPPORTED, "%s has no agent channel", s->name);
}

int inst_stats(struct inst *s, struct inst_stats *out, sbx_error *err) {
  memset(out, 0, sizeof *out);
  if (s->di) {
    sbx_stats st;
    int rc = sbx_sandbox_stats(s->di, &st, err);
    if (rc < 0) return rc;
    out->mem_used = st.mem_bytes;
    out->measured = true;
  }
  return 0;
}

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

int provider_reconcile(struct provider *p, provider_keep_fn keep, provider_adopt_fn adopted, void *ud,
                       sbx_error *err) {
  struct rec_ctx c = {keep, adopted, ud};
  return sbx_driver_reconcile(p->drv, rec_cb, &c, err);
}
