/* provider.c - driver adapter. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sandbox/core.h>
#include <sandbox/driver.h>

#include "../libsandbox/core/env.h"
#include "../libsandbox/pool/secret.h"
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
  uint64_t oom_base; /* the cgroup's OOM kills when it was made or adopted */
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
  int rc = sbxi_random_hex(rnd, 6, err);
  if (rc < 0) return rc;
  snprintf(out, len, "sbx-%s-%s", hash, rnd);
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
  if ((rc = sbxi_mkdir_p(p->goldens_dir, 0755, err)) < 0 || (rc = sbxi_mkdir_p(p->run_dir, 0755, err)) < 0) goto fail;
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

/* OOM kills counted so far, so that a later death is called an OOM kill
 * only for a new one. Read here, on a worker or at adoption, to keep the
 * cgroup reads off the claim path. */
static void note_oom_base(struct inst *s) {
  sbx_stats st;
  sbx_error err;
  if (sbx_sandbox_stats(s->di, &st, &err) == 0) s->oom_base = st.oom_kills;
}

/* What every sandbox of key is started with, a clone or a restore. */
static void clone_spec_for(sbx_clone_spec *cs, const struct inst *s, const sbx_pool_key *key, int probe_ms) {
  sbx_clone_spec_init(cs);
  cs->id = s->name;
  cs->size = sbx_size_tier_get(key->size);
  cs->net = SBX_NET_NONE;
  cs->ready_timeout_ms = probe_ms;
}

/* After the driver started s (rc from it): s is handed out, or freed. */
static int inst_started(struct inst *s, int rc, void **out) {
  if (rc < 0) {
    sbx_free(s);
    return rc;
  }
  pid_t init = sbx_instance_pid(s->di);
  if (init > 0) inst_normal_priority(init);
  note_oom_base(s);
  *out = s;
  return 0;
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
  clone_spec_for(&cs, s, key, probe_ms);
  return inst_started(s, sbx_sandbox_clone(p->drv, g, &cs, &s->di, err), out);
}

static void op_destroy(void *ud, void *inst) {
  struct inst *s = inst;
  if (s->di) {
    sbx_error err;
    pid_t init = sbx_instance_pid(s->di);
    /* Not once it exited: its pid may belong to another process by now. */
    if (init > 0 && inst_alive(s)) inst_worker_priority(init);
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

static bool op_alive(void *ud, void *inst) { return inst_alive(inst); }

sbx_pool_provider provider_pool_ops(struct provider *p) {
  return (sbx_pool_provider)SBX_POOL_PROVIDER_INIT(.prepare = op_prepare, .provision = op_provision,
                                                   .destroy = op_destroy, .forget = op_forget, .alive = op_alive,
                                                   .ud = p);
}

/* ---- pid 1 ---- */

int inst_watch_fd(struct inst *s) {
  int fd = s->di ? sbx_instance_pidfd(s->di) : -1;
  if (fd < 0) return -1;
  /* A copy: the watch may outlive the driver's during a destroy. */
  return fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

bool inst_alive(struct inst *s) {
  int fd = s->di ? sbx_instance_pidfd(s->di) : -1;
  if (fd < 0) return true;
  struct pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

/* PIDFD_GET_INFO (Linux 6.13; the exit status since 6.15), for a pid 1
 * that is not our child (adopted after a restart), whose status went to
 * its reaper. The headers here may predate it. */
struct pidfd_info_v0 {
  uint64_t mask, cgroupid;
  uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
  int32_t exit_code;
};
#define PIDFD_INFO_EXIT_BIT (1ull << 3)
#define PIDFD_GET_INFO_V0 _IOWR(0xFF, 11, struct pidfd_info_v0)

/* As a shell reports it (128 + signal), or -1. */
static int pidfd_exit_code(int fd) {
  struct pidfd_info_v0 info = {.mask = PIDFD_INFO_EXIT_BIT};
  if (fd < 0 || ioctl(fd, PIDFD_GET_INFO_V0, &info) < 0 || !(info.mask & PIDFD_INFO_EXIT_BIT)) return -1;
  int st = info.exit_code;
  return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

void inst_death(struct inst *s, char *reason, size_t len, char *cause, size_t clen) {
  int code = -1;
  uint64_t ooms = 0;
  const char *who = "pid 1";
  if (s->di) {
    sbx_error err;
    sbx_stats st;
    /* Before the wait: the cgroup is there until the destroy. */
    if (sbx_sandbox_stats(s->di, &st, &err) == 0) ooms = st.oom_kills;
    /* Reaps a child at once (pid 1 has exited); -1 for an adopted one. */
    if (sbx_sandbox_wait(s->di, 0, &code, &err) < 0) code = -1;
    if (code < 0) code = pidfd_exit_code(sbx_instance_pidfd(s->di));
    if (sbx_instance_pid(s->di) == 0) who = "the VM process";
  }
  if (code > 128 && code - 128 == SIGKILL && ooms > s->oom_base) {
    snprintf(cause, clen, "oom");
    snprintf(reason, len, "%s killed by OOM (signal 9; the memory cgroup counted %llu OOM kill(s))", who,
             (unsigned long long)(ooms - s->oom_base));
  } else if (code > 128) {
    snprintf(cause, clen, "signal");
    snprintf(reason, len, "%s killed by signal %d (%s)", who, code - 128, strsignal(code - 128));
  } else if (code >= 0) {
    snprintf(cause, clen, "exit");
    snprintf(reason, len, "%s exited with status %d", who, code);
  } else {
    snprintf(cause, clen, "exit");
    snprintf(reason, len, "%s exited (status not known)", who);
  }
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
  note_oom_base(s);
  c->adopted(c->ud, s->name, s);
  return true;
}

int provider_reconcile(struct provider *p, provider_keep_fn keep, provider_adopt_fn adopted, void *ud,
                       sbx_error *err) {
  struct rec_ctx c = {keep, adopted, ud};
  return sbx_driver_reconcile(p->drv, rec_cb, &c, err);
}

/* ---- lifecycle ---- */

const char *provider_pause_keeps(const struct provider *p) {
  return sbx_driver_pause_keeps(p->drv);
}

const char *provider_image_keeps(const struct provider *p) {
  return sbx_driver_image_keeps(p->drv);
}

int inst_pause(struct inst *s, sbx_error *err) {
  if (s->di) return sbx_sandbox_pause(s->di, err);
  return sbx_err(err, SBX_E_UNSUPPORTED, "%s cannot be paused", s->name);
}

int inst_resume(struct inst *s, sbx_error *err) {
  if (s->di) return sbx_sandbox_resume(s->di, err);
  return sbx_err(err, SBX_E_UNSUPPORTED, "%s cannot be resumed", s->name);
}

bool inst_paused(struct inst *s) {
  if (s->di) return sbx_sandbox_is_paused(s->di);
  return false;
}

int inst_snapshot(struct inst *s, const char *dir, sbx_error *err) {
  if (s->di) return sbx_sandbox_snapshot(s->di, dir, err);
  (void)dir;
  return sbx_err(err, SBX_E_UNSUPPORTED, "%s has no image", s->name);
}

int provider_restore(struct provider *p, const sbx_pool_key *key, const char *dir, int probe_ms, struct inst **out,
                     sbx_error *err) {
  *out = NULL;
  struct inst *s = sbx_calloc(1, sizeof *s);
  int rc = make_name(key, s->name, sizeof s->name, err);
  if (rc < 0) {
    sbx_free(s);
    return rc;
  }
  sbx_clone_spec cs;
  clone_spec_for(&cs, s, key, probe_ms);
  void *started = NULL;
  rc = inst_started(s, sbx_sandbox_restore(p->drv, dir, &cs, &s->di, err), &started);
  *out = started;
  return rc;
}
