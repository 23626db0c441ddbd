/* Per-sandbox cgroups: limits from the size tier, freezing, stats, removal.
 *
 * cgroup v2 is used when /sys/fs/cgroup is itself the unified hierarchy;
 * otherwise the v1 controllers mounted at /sys/fs/cgroup/<controller> (this
 * kind of host has a v2 mount with no controllers in it, so the limits can
 * only be enforced through v1). memory and pids are required: without them
 * a sandbox could take the node down, so clone fails instead (fail closed). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "jail.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

enum { CTL_MEMORY, CTL_PIDS, CTL_CPU, CTL_CPUACCT, CTL_FREEZER, CTL_DEVICES, CTL__COUNT };
static const char *const ctl_names[CTL__COUNT] = {"memory", "pids", "cpu", "cpuacct", "freezer", "devices"};
/* The devices of the jail's /dev (null zero full random urandom tty, ptmx
 * and the pty slaves of its own devpts); everything else is refused even
 * if a node for it turns up somewhere. */
static const char *const dev_allow[] = {"c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm",
                                        "c 5:0 rwm", "c 5:2 rwm", "c 136:* rwm", NULL};

struct jail_cgroup {
  bool v2;
  bool dev_inherited; /* the parent holds the device list: children copy it */
  bool have[CTL__COUNT];
  char base[CTL__COUNT][PATH_MAX]; /* v1: per controller; v2: base[0] only */
};

#define ROOT "/sys/fs/cgroup"

static const char *dir_of(const jail_cgroup *cg, int ctl) { return cg->v2 ? cg->base[0] : cg->base[ctl]; }

static int write_at(const char *dir, const char *id, const char *file, const char *val, sbx_error *err) {
  char path[PATH_MAX];
  if (sbxi_path_fmt(path, sizeof path, err, "%s/%s/%s", dir, id, file) < 0) return SBX_E_NAMETOOLONG;
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return sbx_err_os(err, errno, "open %s", path);
  size_t n = strlen(val);
  ssize_t w = write(fd, val, n);
  int e = errno;
  close(fd);
  if (w != (ssize_t)n) return sbx_err_os(err, w < 0 ? e : EIO, "write %s = %s", path, val);
  return 0;
}

static int read_at(const char *dir, const char *id, const char *file, char *buf, size_t cap) {
  char path[PATH_MAX];
  if (sbxi_path_fmt(path, sizeof path, NULL, "%s/%s/%s", dir, id, file) < 0) return -ENAMETOOLONG;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = read(fd, buf, cap - 1);
  int e = errno;
  close(fd);
  if (n < 0) return -e;
  buf[n] = '\0';
  return (int)n;
}

static uint64_t read_u64(const char *dir, const char *id, const char *file) {
  char buf[64];
  if (read_at(dir, id, file, buf, sizeof buf) <= 0) return 0;
  if (strncmp(buf, "max", 3) == 0) return UINT64_MAX;
  return strtoull(buf, NULL, 10);
}

/* A v1 devices cgroup starts with a copy of its parent's list, so setting
 * the list once on the driver's own cgroup saves nine writes per clone.
 * The kernel refuses "a" rules on a cgroup that has children (sandboxes
 * from before a restart, another driver sharing the name): then the list is
 * only used if it already is exactly ours, else each clone writes its own. */
static bool devices_on_parent(jail_cgroup *cg) {
  const char *dir = cg->base[CTL_DEVICES];
  write_at(dir, ".", "devices.deny", "a", NULL);
  for (size_t i = 0; dev_allow[i]; i++) write_at(dir, ".", "devices.allow", dev_allow[i], NULL);
  char list[1024];
  if (read_at(dir, ".", "devices.list", list, sizeof list) <= 0) return false;
  /* exactly our lines, each once */
  size_t seen = 0;
  for (char *save = NULL, *line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    size_t i = 0;
    while (dev_allow[i] && strcmp(dev_allow[i], line) != 0) i++;
    if (!dev_allow[i] || (seen & (1u << i))) return false;
    seen |= 1u << i;
  }
  size_t want = 0;
  while (dev_allow[want]) want++;
  return seen == (1u << want) - 1;
}

int jail_cgroup_init(const char *name, jail_cgroup **out, sbx_error *err) {
  *out = NULL;
  jail_cgroup *cg = sbx_calloc(1, sizeof *cg);
  struct statfs sf;
  cg->v2 = statfs(ROOT, &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC;
  if (cg->v2) {
    if (sbxi_path_fmt(cg->base[0], PATH_MAX, err, "%s/%s", ROOT, name) < 0) {
      sbx_free(cg);
      return SBX_E_NAMETOOLONG;
    }
    if (mkdir(cg->base[0], 0755) < 0 && errno != EEXIST) {
      int e = errno;
      sbx_free(cg);
      return sbx_err_os(err, e, "mkdir %s/%s", ROOT, name);
    }
    char ctls[256] = "";
    read_at(ROOT, ".", "cgroup.controllers", ctls, sizeof ctls);
    for (int c = 0; c < CTL__COUNT; c++) cg->have[c] = strstr(ctls, ctl_names[c]) != NULL;
    cg->have[CTL_CPUACCT] = cg->have[CTL_FREEZER] = true; /* cpu.stat and cgroup.freeze are core files */
    cg->have[CTL_DEVICES] = false; /* v2 controls devices with BPF programs: not done */
    /* Delegate to the children: our own directory holds no process. */
    write_at(ROOT, ".", "cgroup.subtree_control", "+memory +pids +cpu", NULL);
    write_at(cg->base[0], ".", "cgroup.subtree_control", "+memory +pids +cpu", NULL);
  } else {
    for (int c = 0; c < CTL__COUNT; c++) {
      char root[PATH_MAX];
      struct statfs cs;
      if (sbxi_path_fmt(root, sizeof root, NULL, "%s/%s", ROOT, ctl_names[c]) < 0) continue;
      if (statfs(root, &cs) < 0 || cs.f_type != 0x27e0eb /* CGROUP_SUPER_MAGIC */) continue;
      if (sbxi_path_fmt(cg->base[c], PATH_MAX, err, "%s/%s", root, name) < 0) {
        sbx_free(cg);
        return SBX_E_NAMETOOLONG;
      }
      if (mkdir(cg->base[c], 0755) < 0 && errno != EEXIST) {
        int e = errno;
        sbx_free(cg);
        return sbx_err_os(err, e, "mkdir %s/%s", root, name);
      }
      cg->have[c] = true;
    }
  }
  if (!cg->v2 && cg->have[CTL_DEVICES]) cg->dev_inherited = devices_on_parent(cg);
  if (!cg->have[CTL_MEMORY] || !cg->have[CTL_PIDS]) {
    sbx_free(cg);
    return sbx_err(err, SBX_E_UNSUPPORTED, "cgroup memory and pids controllers are required (v%d)", cg->v2 ? 2 : 1);
  }
  *out = cg;
  return 0;
}

void jail_cgroup_free(jail_cgroup *cg) { sbx_free(cg); }

bool jail_cgroup_exists(jail_cgroup *cg, const char *id) {
  char path[PATH_MAX];
  return sbxi_path_fmt(path, sizeof path, NULL, "%s/%s", dir_of(cg, CTL_MEMORY), id) == 0 && access(path, F_OK) == 0;
}

int jail_cgroup_create(jail_cgroup *cg, const char *id, const sbx_size_tier *size, sbx_error *err) {
  char v[64];
  int rc = 0;
  for (int c = 0; c < CTL__COUNT && rc == 0; c++) {
    if (!cg->have[c] || (cg->v2 && c > 0)) continue;
    char path[PATH_MAX];
    if ((rc = sbxi_path_fmt(path, sizeof path, err, "%s/%s", dir_of(cg, c), id)) < 0) break;
    if (mkdir(path, 0755) < 0) rc = sbx_err_os(err, errno, "mkdir %s", path);
  }
  if (rc < 0) goto fail;
  const char *mem = cg->v2 ? "memory.max" : "memory.limit_in_bytes";
  snprintf(v, sizeof v, "%llu", (unsigned long long)size->mem_bytes);
  if ((rc = write_at(dir_of(cg, CTL_MEMORY), id, mem, v, err)) < 0) goto fail;
  /* No swap beyond the limit either, where the host has swap accounting
   * (absent files are fine: then there is nothing to escape into). */
  if (cg->v2)
    write_at(dir_of(cg, CTL_MEMORY), id, "memory.swap.max", "0", NULL);
  else
    write_at(dir_of(cg, CTL_MEMORY), id, "memory.memsw.limit_in_bytes", v, NULL);
  snprintf(v, sizeof v, "%u", size->pids_max);
  if ((rc = write_at(dir_of(cg, CTL_PIDS), id, "pids.max", v, err)) < 0) goto fail;
  if (cg->have[CTL_DEVICES] && !cg->v2 && !cg->dev_inherited) {
    if ((rc = write_at(dir_of(cg, CTL_DEVICES), id, "devices.deny", "a", err)) < 0) goto fail;
    for (size_t i = 0; dev_allow[i]; i++)
      if ((rc = write_at(dir_of(cg, CTL_DEVICES), id, "devices.allow", dev_allow[i], err)) < 0) goto fail;
  }
  if (cg->have[CTL_CPU]) {
    unsigned long long quota = 100000ull * size->vcpus;
    if (cg->v2) {
      snprintf(v, sizeof v, "%llu 100000", quota);
      rc = write_at(dir_of(cg, CTL_CPU), id, "cpu.max", v, err);
    } else {
      /* cpu.cfs_period_us of a new cgroup is always the kernel's default,
       * 100000: only the quota needs writing. */
      snprintf(v, sizeof v, "%llu", quota);
      rc = write_at(dir_of(cg, CTL_CPU), id, "cpu.cfs_quota_us", v, err);
    }
    if (rc < 0) goto fail;
  }
  return 0;
fail:
  jail_cgroup_remove(cg, id, NULL);
  return rc;
}

int jail_cgroup_attach(jail_cgroup *cg, const char *id, pid_t pid, sbx_error *err) {
  char v[32];
  snprintf(v, sizeof v, "%d", (int)pid);
  for (int c = 0; c < CTL__COUNT; c++) {
    if (!cg->have[c] || (cg->v2 && c > 0)) continue;
    int rc = write_at(dir_of(cg, c), id, "cgroup.procs", v, err);
    if (rc < 0) return rc;
  }
  return 0;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

int jail_cgroup_freeze(jail_cgroup *cg, const char *id, bool frozen, sbx_error *err) {
  if (!cg->have[CTL_FREEZER]) return sbx_err(err, SBX_E_UNSUPPORTED, "no cgroup freezer");
  const char *dir = dir_of(cg, CTL_FREEZER);
  int rc = cg->v2 ? write_at(dir, id, "cgroup.freeze", frozen ? "1" : "0", err)
                  : write_at(dir, id, "freezer.state", frozen ? "FROZEN" : "THAWED", err);
  if (rc < 0 || !frozen) return rc;
  /* Freezing is asynchronous: wait until every task is stopped, so the
   * caller can rely on "paused" meaning no CPU is used any more. A v1
   * freezer can stay FREEZING when a task was not freezable at the moment
   * of the write (in a vfork, say): writing FROZEN again retries it. On a
   * loaded machine this takes longer than the usual few hundred
   * microseconds, so the bound is in time (5 s), not in polls. */
  uint64_t deadline = sbx_now_ns() + 5000000000ull, rewrite = sbx_now_ns() + 50000000ull;
  do {
    char buf[256];
    if (cg->v2) {
      if (read_at(dir, id, "cgroup.events", buf, sizeof buf) > 0 && strstr(buf, "frozen 1")) return 0;
    } else if (read_at(dir, id, "freezer.state", buf, sizeof buf) > 0 && strncmp(buf, "FROZEN", 6) == 0) {
      return 0;
    }
    if (!cg->v2 && sbx_now_ns() >= rewrite) {
      (void)write_at(dir, id, "freezer.state", "FROZEN", NULL);
      rewrite = sbx_now_ns() + 50000000ull;
    }
    sleep_us(200);
  } while (sbx_now_ns() < deadline);
  return sbx_err(err, SBX_E_TIMEOUT, "cgroup %s did not freeze within 5 s", id);
}

bool jail_cgroup_frozen(jail_cgroup *cg, const char *id) {
  if (!cg->have[CTL_FREEZER]) return false;
  const char *dir = dir_of(cg, CTL_FREEZER);
  char buf[256];
  if (cg->v2) return read_at(dir, id, "cgroup.freeze", buf, sizeof buf) > 0 && buf[0] == '1';
  return read_at(dir, id, "freezer.state", buf, sizeof buf) > 0 &&
         (strncmp(buf, "FROZEN", 6) == 0 || strncmp(buf, "FREEZING", 8) == 0);
}

/* The "oom_kill N" line of memory.events (v2) or memory.oom_control (v1). */
static uint64_t oom_kill_count(const char *text) {
  const char *p = strstr(text, "oom_kill ");
  return p ? strtoull(p + 9, NULL, 10) : 0;
}

int jail_cgroup_stats(jail_cgroup *cg, const char *id, sbx_stats *st, sbx_error *err) {
  memset(st, 0, sizeof *st);
  if (!jail_cgroup_exists(cg, id)) return sbx_err(err, SBX_E_NOTFOUND, "no cgroup for %s", id);
  if (cg->v2) {
    char buf[1024];
    if (read_at(dir_of(cg, 0), id, "cpu.stat", buf, sizeof buf) > 0) {
      char *p = strstr(buf, "usage_usec ");
      if (p) st->cpu_ns = strtoull(p + 11, NULL, 10) * 1000;
    }
    st->mem_bytes = read_u64(dir_of(cg, 0), id, "memory.current");
    st->mem_limit = read_u64(dir_of(cg, 0), id, "memory.max");
    if (read_at(dir_of(cg, 0), id, "memory.events", buf, sizeof buf) > 0) st->oom_kills = oom_kill_count(buf);
  } else {
    if (cg->have[CTL_CPUACCT]) st->cpu_ns = read_u64(dir_of(cg, CTL_CPUACCT), id, "cpuacct.usage");
    st->mem_bytes = read_u64(dir_of(cg, CTL_MEMORY), id, "memory.usage_in_bytes");
    st->mem_limit = read_u64(dir_of(cg, CTL_MEMORY), id, "memory.limit_in_bytes");
    char buf[256];
    if (read_at(dir_of(cg, CTL_MEMORY), id, "memory.oom_control", buf, sizeof buf) > 0)
      st->oom_kills = oom_kill_count(buf);
  }
  st->pids = (uint32_t)read_u64(dir_of(cg, CTL_PIDS), id, "pids.current");
  uint64_t pm = read_u64(dir_of(cg, CTL_PIDS), id, "pids.max");
  st->pids_max = pm > UINT32_MAX ? UINT32_MAX : (uint32_t)pm;
  return 0;
}

static void kill_all(const char *dir, const char *id) {
  char buf[4096];
  if (read_at(dir, id, "cgroup.procs", buf, sizeof buf) <= 0) return;
  for (char *s = buf, *e; *s; s = e) {
    long pid = strtol(s, &e, 10);
    if (e == s) break;
    if (pid > 1) kill((pid_t)pid, SIGKILL);
  }
}

int jail_cgroup_remove(jail_cgroup *cg, const char *id, sbx_error *err) {
  int rc = 0;
  for (int c = 0; c < CTL__COUNT; c++) {
    if (!cg->have[c] || (cg->v2 && c > 0)) continue;
    char path[PATH_MAX];
    if (sbxi_path_fmt(path, sizeof path, rc == 0 ? err : NULL, "%s/%s", dir_of(cg, c), id) < 0) {
      rc = SBX_E_NAMETOOLONG;
      continue;
    }
    if (c == CTL_FREEZER || cg->v2) {
      /* a frozen task cannot die: thaw before killing */
      if (cg->v2)
        write_at(dir_of(cg, c), id, "cgroup.freeze", "0", NULL);
      else
        write_at(dir_of(cg, c), id, "freezer.state", "THAWED", NULL);
    }
    /* Tasks leave a cgroup only once fully reaped, which trails the exit
     * of pid 1 by a little: retry for up to ~2 s before giving up. */
    int i;
    for (i = 0; i < 2000; i++) {
      if (rmdir(path) == 0 || errno == ENOENT) break;
      if (errno != EBUSY) break;
      if (cg->v2) write_at(dir_of(cg, c), id, "cgroup.kill", "1", NULL);
      kill_all(dir_of(cg, c), id);
      sleep_us(i < 50 ? 100 : 1000);
    }
    if (access(path, F_OK) == 0 && rc == 0) rc = sbx_err_os(err, errno, "rmdir %s", path);
  }
  return rc;
}

int jail_cgroup_list(jail_cgroup *cg, void (*fn)(void *ud, const char *id), void *ud, sbx_error *err) {
  DIR *d = opendir(dir_of(cg, CTL_MEMORY));
  if (!d) return sbx_err_os(err, errno, "opendir %s", dir_of(cg, CTL_MEMORY));
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_type != DT_DIR || de->d_name[0] == '.') continue;
    fn(ud, de->d_name);
  }
  closedir(d);
  return 0;
}
