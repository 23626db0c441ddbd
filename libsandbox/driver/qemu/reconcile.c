/* Reconcile after a restart: every VM found under run_dir is adopted (its
 * QEMU still alive and provably the same process: pid and start time match
 * the state file, checked again through a pidfd) or killed and removed.
 * Dot names (keyless goldens, markers) are not sandboxes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../template/layers.h"
#include "qemu.h"

typedef struct found_list {
  char (*ids)[SBX_ID_MAX];
  size_t n, cap;
} found_list;

static void found_add(found_list *fl, const char *id) {
  if (sbxi_check_id(id, NULL) < 0) return;
  if (fl->n == fl->cap) {
    fl->cap = fl->cap ? fl->cap * 2 : 16;
    fl->ids = sbx_reallocarray(fl->ids, fl->cap, sizeof fl->ids[0]);
  }
  memcpy(fl->ids[fl->n++], id, strlen(id) + 1); /* sbxi_check_id: shorter than SBX_ID_MAX */
}

static sbx_instance *adopt(qemu_driver *qd, const char *id, sbx_found *f) {
  char path[PATH_MAX], buf[160], size[32] = "";
  snprintf(path, sizeof path, "%s/state", id);
  int sfd = openat(qd->run_dirfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (sfd < 0) return NULL;
  ssize_t n = read(sfd, buf, sizeof buf - 1);
  close(sfd);
  if (n <= 0) return NULL;
  buf[n] = '\0';
  int pid = 0, agent = 0;
  unsigned long long start = 0;
  unsigned port = 0, cid = 0;
  if (sscanf(buf, "%d %llu %d %u %u %31s", &pid, &start, &agent, &port, &cid, size) != 6 || pid <= 0) return NULL;
  f->init_pid = pid;
  const sbx_size_tier *tier = sbx_size_tier_get(size);
  if (!tier || start == 0 || sbxi_proc_starttime(pid) != start) return NULL;
  int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pfd < 0) return NULL;
  if (sbxi_proc_starttime(pid) != start) {
    close(pfd);
    return NULL;
  }
  sbx_instance *s = sbx_calloc(1, sizeof *s);
  s->hdr.drv = &qd->base;
  snprintf(s->hdr.id, sizeof s->hdr.id, "%s", id);
  s->qd = qd;
  s->qemu_pid = pid;
  s->pidfd = pfd;
  s->agent = agent == QEMU_AGENT_VSOCK ? QEMU_AGENT_VSOCK : QEMU_AGENT_TCP;
  s->port = (uint16_t)port;
  s->cid = cid;
  s->size = tier;
  f->alive = true;
  return s;
}

int qemu_reconcile(sbx_driver *d, sbx_reconcile_fn fn, void *ud, sbx_error *err) {
  qemu_driver *qd = (qemu_driver *)d;
  found_list fl = {0};
  int dfd = openat(qd->run_dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return sbx_err_os(err, errno, "open %s", qd->run_dir);
  DIR *dir = fdopendir(dfd);
  if (!dir) {
    close(dfd);
    return sbx_err_os(err, errno, "read %s", qd->run_dir);
  }
  struct dirent *de;
  while ((de = readdir(dir)) != NULL)
    if (de->d_name[0] != '.' && (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN)) found_add(&fl, de->d_name);
  closedir(dir);
  int adopted = 0;
  for (size_t i = 0; i < fl.n; i++) {
    const char *id = fl.ids[i];
    sbx_found f = {id, 0, false};
    sbx_instance *s = adopt(qd, id, &f);
    if (s && fn && fn(ud, &f, s)) {
      adopted++;
      continue;
    }
    if (!s && fn) fn(ud, &f, NULL);
    if (s) {
      qemu_vm_destroy(s, NULL);
    } else {
      /* A dead VM's QEMU may still be there under a reused-pid check that
       * failed; only what the state file proves is ours is signalled, so
       * this only removes the directory (socket, console, state). */
      sbxi_rm_rf_at(qd->run_dirfd, id, NULL);
    }
  }
  sbx_free(fl.ids);
  return adopted;
}
