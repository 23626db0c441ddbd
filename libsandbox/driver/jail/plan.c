/* The jail's setup as a list of typed operations, computed in the parent.
 *
 * Order matters and is the whole design: the writable root first, then the
 * kernel file systems a process expects (/dev, /proc, /tmp, /run), then the
 * masks over the sensitive parts of /proc, then pivot_root. Everything not
 * listed here does not exist inside: /sys, the host's /home and /root, the
 * host's other mounts. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>

#include <sandbox/core.h>

#include "jail.h"

/* A copy of the formatted string in the plan's arena, or NULL if it is
 * longer than max or the arena is full. */
static const char *__attribute__((format(printf, 3, 4))) put(jail_plan *p, size_t max, const char *fmt, ...) {
  size_t room = JAIL_ARENA_MAX - p->arena_len;
  if (room > max) room = max;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(p->arena + p->arena_len, room, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= room) return NULL;
  const char *s = p->arena + p->arena_len;
  p->arena_len += (size_t)n + 1;
  return s;
}

static jail_op *add(jail_plan *p, jail_op_kind kind, const char *target, sbx_error *err) {
  if (p->nops >= JAIL_OPS_MAX) {
    sbx_err(err, SBX_E_TOOBIG, "jail plan has more than %d operations", JAIL_OPS_MAX);
    return NULL;
  }
  jail_op *op = &p->ops[p->nops];
  memset(op, 0, sizeof *op);
  op->kind = kind;
  op->src = op->data = "";
  if (!(op->target = put(p, JAIL_STR_MAX, "%s", target))) {
    sbx_err(err, SBX_E_TOOBIG, "path too long: %s", target);
    return NULL;
  }
  p->nops++;
  return op;
}

/* Sets an op's src or data; fails the build when it does not fit. */
#define SET(field, max, ...)                                          \
  do {                                                                \
    if (!(op->field = put(p, (max), __VA_ARGS__)))                    \
      return sbx_err(err, SBX_E_TOOBIG, "jail plan: " #field " too long"); \
  } while (0)

#define ADD(kind, target)                       \
  do {                                          \
    if (!(op = add(p, (kind), (target), err))) \
      return err ? err->code : SBX_E_TOOBIG;    \
  } while (0)

static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
/* As runc and bubblewrap mask them: kernel memory, keys, scheduler and
 * timer internals that leak host activity or addresses. */
static const char *const proc_masked[] = {"kcore", "keys", "key-users", "timer_list", "sched_debug",
                                          "latency_stats", "timer_stats", "kpagecount", "kpageflags",
                                          "kpagecgroup", "kallsyms", "kmsg"};
static const char *const proc_masked_dirs[] = {"acpi", "scsi", "asound", "driver"};
/* Writable here would mean tuning or poking the host kernel. */
static const char *const proc_ro[] = {"sys", "sysrq-trigger", "irq", "bus", "fs"};

/* An overlay option value may not hold the separators of the option list. */
static int check_layer_path(const char *path, sbx_error *err) {
  if (path[0] != '/' || strpbrk(path, ":,\\\n") != NULL)
    return sbx_err(err, SBX_E_INVAL, "layer path \"%s\" is not usable by overlayfs", path);
  return 0;
}

static int overlay_opts(char *buf, size_t cap, const sbx_layer_point *pt, const char *base, size_t i,
                        sbx_error *err) {
  size_t len = 0;
  int n = snprintf(buf, cap, "lowerdir=");
  len = (size_t)n;
  for (size_t j = 0; j < pt->nlowers; j++) {
    int rc = check_layer_path(pt->lowers[j], err);
    if (rc < 0) return rc;
    n = snprintf(buf + len, cap - len, "%s%s", j ? ":" : "", pt->lowers[j]);
    if (n < 0 || (size_t)n >= cap - len) return sbx_err(err, SBX_E_TOOBIG, "overlay options too long");
    len += (size_t)n;
  }
  n = snprintf(buf + len, cap - len, ",upperdir=%s/u%zu,workdir=%s/w%zu", base, i, base, i);
  if (n < 0 || (size_t)n >= cap - len) return sbx_err(err, SBX_E_TOOBIG, "overlay options too long");
  return check_layer_path(base, err);
}

/* The cap of a writable tmpfs (the layer, /tmp). Its pages are charged to
 * the sandbox's memory cgroup and belong to no process, so a writer that
 * filled it up to the memory limit would make the OOM killer pick some
 * process: the writer must get ENOSPC first. A quarter of the memory stays
 * for silkd and the workloads (128 MiB at small). */
static unsigned long long writable_cap(const sbx_size_tier *size) {
  unsigned long long mem = size->mem_bytes - size->mem_bytes / 4;
  return size->disk_bytes < mem ? size->disk_bytes : mem;
}

int jail_plan_build(jail_plan *p, const jail_plan_args *a, sbx_error *err) {
  jail_op *op;
  char path[JAIL_STR_MAX];
  p->nops = 0;
  p->arena_len = 0;
  const sbx_layers *l = a->layers;
  if (l->npoints == 0 || l->pts[0].name[0] != '\0') return sbx_err(err, SBX_E_INVAL, "layers have no root point");

  char base[JAIL_STR_MAX];
  if (a->upper_dir) {
    if (sbxi_path_fmt(base, sizeof base, err, "%s", a->upper_dir) < 0) return SBX_E_NAMETOOLONG;
  } else {
    /* The writable layer lives in a tmpfs mounted inside the jail's own
     * mount namespace: it is fast, capped by the tier, charged to the
     * sandbox's memory cgroup, and it vanishes with the namespace, so a
     * crash of the host process cannot leak it. */
    if (sbxi_path_fmt(base, sizeof base, err, "%s/rw", a->sbx_dir) < 0) return SBX_E_NAMETOOLONG;
    ADD(JOP_TMPFS_HOST, base);
    op->flags = MS_NOSUID | MS_NODEV;
    SET(data, JAIL_DATA_MAX, "mode=0700,size=%llu", writable_cap(a->size));
  }
  for (size_t i = 0; i < l->npoints; i++) {
    if (sbxi_path_fmt(path, sizeof path, err, "%s/u%zu", base, i) < 0) return SBX_E_NAMETOOLONG;
    ADD(JOP_MKDIR_HOST, path);
    if (sbxi_path_fmt(path, sizeof path, err, "%s/w%zu", base, i) < 0) return SBX_E_NAMETOOLONG;
    ADD(JOP_MKDIR_HOST, path);
  }
  for (size_t i = 0; i < l->npoints; i++) {
    const sbx_layer_point *pt = &l->pts[i];
    if (i == 0) {
      if (sbxi_path_fmt(path, sizeof path, err, "%s/root", a->sbx_dir) < 0) return SBX_E_NAMETOOLONG;
      ADD(JOP_OVERLAY_ROOT, path);
    } else {
      if (strchr(pt->name, '/') || strcmp(pt->name, "..") == 0 || pt->name[0] == '.')
        return sbx_err(err, SBX_E_INVAL, "bad mount point \"%s\"", pt->name);
      ADD(JOP_OVERLAY, pt->name);
    }
    /* A device node that a template carries (a directory root can hold
     * anything) must not open a host device: only /dev's binds do. */
    op->flags = MS_NODEV;
    char opts[JAIL_DATA_MAX];
    int rc = overlay_opts(opts, sizeof opts, pt, base, i, err);
    if (rc < 0) return rc;
    SET(data, JAIL_DATA_MAX, "%s", opts);
  }

  ADD(JOP_TMPFS, "dev");
  op->flags = MS_NOSUID | MS_NOEXEC;
  SET(data, JAIL_DATA_MAX, "mode=0755,size=65536,nr_inodes=64");
  for (size_t i = 0; i < sizeof dev_nodes / sizeof dev_nodes[0]; i++) {
    if (sbxi_path_fmt(path, sizeof path, err, "dev/%s", dev_nodes[i]) < 0) return SBX_E_NAMETOOLONG;
    ADD(JOP_BIND_DEV, path);
    SET(src, JAIL_STR_MAX, "/dev/%s", dev_nodes[i]);
  }
  ADD(JOP_DEVPTS, "dev/pts");
  op->flags = MS_NOSUID | MS_NOEXEC;
  SET(data, JAIL_DATA_MAX, "newinstance,ptmxmode=0666,mode=0620,gid=5");
  static const char *const links[][2] = {{"dev/ptmx", "pts/ptmx"},         {"dev/fd", "/proc/self/fd"},
                                         {"dev/stdin", "/proc/self/fd/0"}, {"dev/stdout", "/proc/self/fd/1"},
                                         {"dev/stderr", "/proc/self/fd/2"}};
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
    ADD(JOP_SYMLINK, links[i][0]);
    SET(src, JAIL_STR_MAX, "%s", links[i][1]);
  }
  ADD(JOP_TMPFS, "dev/shm");
  op->flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  SET(data, JAIL_DATA_MAX, "mode=1777,size=%llu", (unsigned long long)a->size->mem_bytes / 2);

  ADD(JOP_PROC, "proc");
  op->flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  for (size_t i = 0; i < sizeof proc_masked / sizeof proc_masked[0]; i++) {
    if (sbxi_path_fmt(path, sizeof path, err, "proc/%s", proc_masked[i]) < 0) return SBX_E_NAMETOOLONG;
    ADD(JOP_MASK, path);
  }
  for (size_t i = 0; i < sizeof proc_masked_dirs / sizeof proc_masked_dirs[0]; i++) {
    if (sbxi_path_fmt(path, sizeof path, err, "proc/%s", proc_masked_dirs[i]) < 0) return SBX_E_NAMETOOLONG;
    ADD(JOP_MASK_DIR, path);
    op->flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
    SET(data, JAIL_DATA_MAX, "size=0,mode=0555");
  }
  for (size_t i = 0; i < sizeof proc_ro / sizeof proc_ro[0]; i++) {
    if (sbxi_path_fmt(path, sizeof path, err, "proc/%s", proc_ro[i]) < 0) return SBX_E_NAMETOOLONG;
    ADD(JOP_RO, path);
    op->flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  }

  ADD(JOP_TMPFS, "tmp");
  op->flags = MS_NOSUID | MS_NODEV;
  SET(data, JAIL_DATA_MAX, "mode=1777,size=%llu", writable_cap(a->size));
  ADD(JOP_TMPFS, "run");
  op->flags = MS_NOSUID | MS_NODEV;
  SET(data, JAIL_DATA_MAX, "mode=0755,size=%llu", 64ull << 20);

  ADD(JOP_PIVOT, "");
  return 0;
}
