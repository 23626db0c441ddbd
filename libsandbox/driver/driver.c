/* Driver registry, size tiers and the dispatch wrappers.
 *
 * The registry is the one place that knows which drivers exist; everything
 * else goes through sbx_driver_ops. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sandbox/core.h>
#include <sandbox/driver.h>

#include "../core/opts.h"
#include "driver_internal.h"
#include "kvm.h"

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)

/* vCPUs and memory from spec §1.4. pids and the writable layer's cap are
 * the jail's own choice: generous for builds, small enough that a fork
 * bomb or a runaway writer stops long before it hurts the node. */
static const sbx_size_tier tiers[] = {
    {"small", 1, 512 * MiB, 1024, 1 * GiB},
    {"medium", 2, 1 * GiB, 2048, 2 * GiB},
    {"large", 4, 4 * GiB, 4096, 8 * GiB},
    {"xlarge", 4, 8 * GiB, 8192, 16 * GiB},
    {"2xlarge", 8, 16 * GiB, 16384, 32 * GiB},
};

const sbx_size_tier *sbx_size_tiers(size_t *count) {
  if (count) *count = sizeof tiers / sizeof tiers[0];
  return tiers;
}

const sbx_size_tier *sbx_size_tier_get(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++)
    if (strcmp(tiers[i].name, name) == 0) return &tiers[i];
  return NULL;
}

int sbxi_check_id(const char *id, sbx_error *err) {
  size_t n = id ? strlen(id) : 0;
  if (n == 0 || n >= SBX_ID_MAX || strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
    return sbx_err(err, SBX_E_INVAL, "invalid sandbox id");
  for (size_t i = 0; i < n; i++) {
    char c = id[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == '-'))
      return sbx_err(err, SBX_E_INVAL, "invalid sandbox id \"%s\"", id);
  }
  return 0;
}

const sbx_driver_ops *sbx_driver_get(const char *name, sbx_error *err) {
  if (!name || strcmp(name, "auto") == 0) {
    /* qemu only where /dev/kvm really runs our guest: under TCG a VM per
     * sandbox is too slow to be the default (kvm.c says what is probed). */
    char why[160];
    bool kvm = sbxi_kvm_usable(why, sizeof why);
    sbx_debug("driver auto: %s: %s", kvm ? "qemu" : "jail", why);
    return kvm ? &sbxi_qemu_driver_ops : &sbxi_jail_driver_ops;
  }
  if (strcmp(name, "jail") == 0) return &sbxi_jail_driver_ops;
  if (strcmp(name, "qemu") == 0) return &sbxi_qemu_driver_ops;
  sbx_err(err, SBX_E_NOTFOUND, "unknown driver \"%s\" (jail, qemu, auto)", name);
  return NULL;
}

int sbx_driver_open(const char *name, const sbx_driver_config *cfg, sbx_driver **out, sbx_error *err) {
  *out = NULL;
  const sbx_driver_ops *ops = sbx_driver_get(name, err);
  if (!ops) return err ? err->code : SBX_E_NOTFOUND;
  sbx_driver_config c;
  int rc = sbxi_opts_load(&c, sizeof c, cfg, SBXI_SIZE_TO(sbx_driver_config, jail_no_zygote), "driver config", err);
  return rc < 0 ? rc : ops->open(&c, out, err);
}

void sbx_driver_close(sbx_driver *d) {
  if (d) d->ops->close(d);
}

const char *sbx_driver_name(const sbx_driver *d) { return d->ops->name; }

#define HDR(s) ((const sbx_instance_hdr *)(const void *)(s))

const char *sbx_instance_id(const sbx_instance *s) { return HDR(s)->id; }
pid_t sbx_instance_pid(const sbx_instance *s) { return HDR(s)->pid; }
sbx_driver *sbx_instance_driver(const sbx_instance *s) { return HDR(s)->drv; }
int sbx_instance_pidfd(const sbx_instance *s) {
  const sbx_driver_ops *ops = HDR(s)->drv->ops;
  return ops->pidfd ? ops->pidfd(s) : -1;
}

#define OPS(s) (HDR(s)->drv->ops)

/* Each spec is copied to the library's size first (core/opts.h); a NULL
 * spec stays NULL for the driver to refuse or default. */
int sbx_template_prepare(sbx_driver *d, const sbx_template_spec *spec, sbx_template **out, sbx_error *err) {
  sbx_template_spec s;
  int rc = sbxi_opts_load(&s, sizeof s, spec, SBXI_SIZE_TO(sbx_template_spec, archive), "template spec", err);
  return rc < 0 ? rc : d->ops->template_prepare(d, spec ? &s : NULL, out, err);
}
void sbx_template_release(sbx_driver *d, sbx_template *t) {
  if (t) d->ops->template_release(t);
}
int sbx_golden_build(sbx_driver *d, const sbx_template *t, const sbx_golden_spec *spec, sbx_golden **out,
                     sbx_error *err) {
  sbx_golden_spec s;
  int rc = sbxi_opts_load(&s, sizeof s, spec, SBXI_SIZE_TO(sbx_golden_spec, timeout_ms), "golden spec", err);
  return rc < 0 ? rc : d->ops->golden_build(d, t, spec ? &s : NULL, out, err);
}
void sbx_golden_release(sbx_driver *d, sbx_golden *g) {
  if (g) d->ops->golden_release(g);
}
int sbxi_sandbox_clone_init(sbx_driver *d, const sbx_golden *g, const sbx_clone_spec *spec,
                            const char *const *init_argv, const char *const *init_env, sbx_instance **out,
                            sbx_error *err) {
  *out = NULL;
  if (!spec) return sbx_err(err, SBX_E_INVAL, "clone: no spec");
  sbxi_clone_spec s = {.init_argv = init_argv, .init_env = init_env};
  int rc = sbxi_opts_load(&s.pub, sizeof s.pub, spec, SBXI_SIZE_TO(sbx_clone_spec, ready_timeout_ms),
                          "clone spec", err);
  return rc < 0 ? rc : d->ops->clone(d, g, &s.pub, out, err);
}
int sbx_sandbox_clone(sbx_driver *d, const sbx_golden *g, const sbx_clone_spec *spec, sbx_instance **out,
                      sbx_error *err) {
  return sbxi_sandbox_clone_init(d, g, spec, NULL, NULL, out, err);
}
int sbx_sandbox_connect(sbx_instance *s, int *fd_out, sbx_error *err) { return OPS(s)->connect(s, fd_out, err); }
int sbx_sandbox_pause(sbx_instance *s, sbx_error *err) { return OPS(s)->pause(s, err); }
int sbx_sandbox_resume(sbx_instance *s, sbx_error *err) { return OPS(s)->resume(s, err); }
int sbx_sandbox_snapshot(sbx_instance *s, const char *dir, sbx_error *err) {
  return OPS(s)->snapshot(s, dir, err);
}
int sbx_sandbox_restore(sbx_driver *d, const char *dir, const sbx_clone_spec *spec, sbx_instance **out,
                        sbx_error *err) {
  *out = NULL;
  if (!spec) return sbx_err(err, SBX_E_INVAL, "restore: no spec");
  sbxi_clone_spec s = {0};
  int rc = sbxi_opts_load(&s.pub, sizeof s.pub, spec, SBXI_SIZE_TO(sbx_clone_spec, ready_timeout_ms),
                          "clone spec", err);
  return rc < 0 ? rc : d->ops->restore(d, dir, &s.pub, out, err);
}
bool sbx_sandbox_is_paused(sbx_instance *s) { return OPS(s)->is_paused && OPS(s)->is_paused(s); }
const char *sbx_driver_pause_keeps(const sbx_driver *d) { return d->ops->pause_keeps; }
const char *sbx_driver_image_keeps(const sbx_driver *d) { return d->ops->image_keeps; }
int sbx_sandbox_stats(sbx_instance *s, sbx_stats *out, sbx_error *err) { return OPS(s)->stats(s, out, err); }
int sbx_sandbox_wait(sbx_instance *s, int timeout_ms, int *code, sbx_error *err) {
  return OPS(s)->wait(s, timeout_ms, code, err);
}
int sbx_sandbox_destroy(sbx_instance *s, sbx_error *err) {
  if (!s) return 0;
  return OPS(s)->destroy(s, err);
}
int sbx_driver_reconcile(sbx_driver *d, sbx_reconcile_fn fn, void *ud, sbx_error *err) {
  return d->ops->reconcile(d, fn, ud, err);
}

int sbxi_pidfd_wait(int pidfd, int timeout_ms, const char *id, sbx_error *err) {
  struct pollfd pfd = {pidfd, POLLIN, 0};
  uint64_t deadline = sbx_now_ns() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000ull;
  for (;;) {
    int left = -1;
    if (timeout_ms >= 0) {
      uint64_t now = sbx_now_ns();
      left = now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
    }
    int pr = poll(&pfd, 1, left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return sbx_err_os(err, errno, "poll pidfd");
    if (pr == 0) return sbx_err(err, SBX_E_TIMEOUT, "sandbox %s still running", id);
    return 0;
  }
}

const char *sbxi_proc_stat_fields(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  if (n <= 0) return NULL;
  buf[n] = '\0';
  /* the command name (field 2) may hold spaces: count from its ')' */
  char *p = strrchr(buf, ')');
  return p && p[1] == ' ' ? p + 2 : NULL;
}

unsigned long long sbxi_proc_starttime(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  const char *p = sbxi_proc_stat_fields(path, buf, sizeof buf);
  for (int f = 3; f < 22 && p; f++) {
    p = strchr(p, ' ');
    if (p) p++;
  }
  return p ? strtoull(p, NULL, 10) : 0;
}
