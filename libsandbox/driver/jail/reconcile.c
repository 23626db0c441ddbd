/* Reconcile after a restart: every jail found under run_dir or in the
 * cgroup tree is either adopted (pid 1 still alive and provably the same
 * process: pid and start time match the state file) or removed. */
#include <dirent.h>
#include <sys/syscall.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandbox/core.h>

#include "jail.h"

typedef struct found_list {
  char (*ids)[SBX_ID_MAX];
  size_t n, cap;
} found_list;

static void found_add(void *ud, const char *id) {
  found_list *fl = ud;
  if (sbxi_check_id(id, NULL) < 0) return;
  for (size_t i = 0; i < fl->n; i++)
    if (strcmp(fl->ids[i], id) == 0) return;
  if (fl->n == fl->cap) {
    fl->cap = fl->cap ? fl->cap * 2 : 16;
    fl->ids = sbx_reallocarray(fl->ids, fl->cap, sizeof fl->ids[0]);
  }
  memcpy(fl->ids[fl->n++], id, strlen(id) + 1); /* sbxi_check_id: shorter than SBX_ID_MAX */
}

int jail_reconcile(sbx_driver *d, sbx_reconcile_fn fn, void *ud, sbx_error *err) {
  jail_driver *jd = (jail_driver *)d;
  /* Only what has a run directory is provably ours. A cgroup without one
   * never comes from this driver (the run directory is made before the
   * cgroup and removed after it), so it belongs to another driver sharing
   * cgroup_name, maybe in the middle of a clone: it is left alone. */
  found_list fl = {0};
  int dfd = openat(jd->run_dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (dir) {
    struct dirent *de;
    while ((de = readdir(dir)) != NULL)
      if (de->d_name[0] != '.' && (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN)) found_add(&fl, de->d_name);
    closedir(dir);
  } else if (dfd >= 0) {
    close(dfd);
  }
  int adopted = 0;
  for (size_t i = 0; i < fl.n; i++) {
    const char *id = fl.ids[i];
    sbx_found f = {id, 0, false};
    char path[PATH_MAX], buf[64];
    int sfd = sbxi_path_fmt(path, sizeof path, NULL, "%s/state", id) < 0
                  ? -1
                  : openat(jd->run_dirfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    unsigned long long start = 0;
    if (sfd >= 0) {
      ssize_t n = read(sfd, buf, sizeof buf - 1);
      close(sfd);
      int pid = 0;
      if (n > 0) {
        buf[n] = '\0';
        if (sscanf(buf, "%d %llu", &pid, &start) == 2 && pid > 0) f.init_pid = pid;
      }
    }
    sbx_instance *s = NULL;
    if (f.init_pid > 0 && start != 0 && sbxi_proc_starttime(f.init_pid) == start) {
      int pfd = (int)syscall(SYS_pidfd_open, f.init_pid, 0);
      /* check again through the pidfd: the pid could have been reused
       * between the two looks */
      if (pfd >= 0 && sbxi_proc_starttime(f.init_pid) == start) {
        s = sbx_calloc(1, sizeof *s);
        s->hdr.drv = d;
        snprintf(s->hdr.id, sizeof s->hdr.id, "%s", id);
        s->hdr.pid = f.init_pid;
        s->jd = jd;
        s->pidfd = pfd;
        f.alive = true;
      } else if (pfd >= 0) {
        close(pfd);
      }
    }
    if (s && fn && fn(ud, &f, s)) {
      adopted++;
      continue;
    }
    if (!s && fn) fn(ud, &f, NULL);
    if (s)
      jail_destroy(s, NULL);
    else
      jail_teardown_host(jd, id);
  }
  sbx_free(fl.ids);
  jail_images_sweep(jd);
  return adopted;
}

