/* bench/floor: the kernel's bare cost of one sandbox cycle, without silkd or
 * sandboxd, to judge what claim+release rate a node could ever sustain.
 *
 * One cycle is the least a jail clone + destroy needs from the kernel:
 *   clone(2) into new pid, mount, uts, ipc and net namespaces; in the child:
 *   make / private, a tmpfs for the writable layer, an overlay of the host
 *   root under it, /proc of the new pid namespace, pivot_root into the
 *   overlay, sethostname, exit; the parent waits for it. The kernel then
 *   tears the namespaces down (the net namespace on a kworker, which is why
 *   the CPU figure is taken system-wide as well as per process).
 * With --cgroup each cycle also makes, joins and removes one cpu, memory
 * and pids cgroup (v1), as the jail driver does.
 *
 * Measures:
 *   serial   one cycle after another: p50 wall time per cycle
 *   parallel one loop per CPU for -t seconds: cycles per second, and the CPU
 *            each cycle cost, from getrusage (this process and its reaped
 *            children) and from /proc/stat (every CPU's busy time, so other
 *            work on the machine inflates it: compare with the load line)
 * Usage: bench-floor [-n N] [-t SECONDS] [--no-net] [--cgroup]   (root) */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char base[64]; /* /tmp/bench-floor-PID: root, rw */
static bool with_net = true, with_cgroup;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The child: pid 1 of its namespaces. Any failure exits non-zero. */
static int child_main(void) {
  char root[128], rw[128], opts[512], put_old[160];
  snprintf(root, sizeof root, "%s/root", base);
  snprintf(rw, sizeof rw, "%s/rw", base);
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) return 10;
  if (mount("tmpfs", rw, "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=0700") < 0) return 11;
  char upper[160], work[160];
  snprintf(upper, sizeof upper, "%s/upper", rw);
  snprintf(work, sizeof work, "%s/work", rw);
  if (mkdir(upper, 0755) < 0 || mkdir(work, 0700) < 0) return 12;
  snprintf(opts, sizeof opts, "lowerdir=/,upperdir=%s,workdir=%s", upper, work);
  if (mount("overlay", root, "overlay", 0, opts) < 0) return 13;
  snprintf(put_old, sizeof put_old, "%s/proc", root);
  if (mount("proc", put_old, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) return 14;
  if (chdir(root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0) return 15;
  if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0) return 16;
  if (sethostname("floor", 5) < 0) return 17;
  return 0;
}

static const char *const cg_ctls[] = {"cpu", "memory", "pids"};

static int cg_make(int idx, pid_t pid) {
  for (size_t i = 0; i < 3; i++) {
    char p[160];
    snprintf(p, sizeof p, "/sys/fs/cgroup/%s/bench-floor-%d-%d", cg_ctls[i], (int)getpid(), idx);
    if (mkdir(p, 0755) < 0 && errno != EEXIST) return -1;
    strcat(p, "/cgroup.procs");
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char b[16];
    int n = snprintf(b, sizeof b, "%d", (int)pid);
    if (write(fd, b, (size_t)n) != n) {
      close(fd);
      return -1;
    }
    close(fd);
  }
  return 0;
}

static void cg_remove(int idx) {
  for (size_t i = 0; i < 3; i++) {
    char p[160];
    snprintf(p, sizeof p, "/sys/fs/cgroup/%s/bench-floor-%d-%d", cg_ctls[i], (int)getpid(), idx);
    rmdir(p);
  }
}

/* One cycle; idx names the loop's cgroups. 0 or -1. */
static int cycle(int idx) {
  unsigned long flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | SIGCHLD;
  if (with_net) flags |= CLONE_NEWNET;
  /* The child stops at a pipe until its cgroups exist, as a jail does. */
  int go[2];
  if (pipe2(go, O_CLOEXEC) < 0) return -1;
  pid_t pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
  if (pid < 0) {
    close(go[0]);
    close(go[1]);
    return -1;
  }
  if (pid == 0) {
    char c;
    close(go[1]);
    if (read(go[0], &c, 1) != 1) _exit(9);
    _exit(child_main());
  }
  close(go[0]);
  int rc = with_cgroup ? cg_make(idx, pid) : 0;
  if (write(go[1], "g", 1) != 1) rc = -1;
  close(go[1]);
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  if (with_cgroup) cg_remove(idx);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "cycle failed: child status %d (step %d)\n", st, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return -1;
  }
  return rc;
}

/* Busy and total jiffies of all CPUs. */
static void cpu_stat(unsigned long long *busy, unsigned long long *total) {
  *busy = *total = 0;
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return;
  unsigned long long v[10] = {0};
  if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
             &v[6], &v[7], &v[8], &v[9]) >= 8) {
    for (int i = 0; i < 8; i++) *total += v[i];
    *busy = *total - v[3] - v[4]; /* less idle and iowait */
  }
  fclose(f);
}

/* CPU time of the kernel's own threads (children of kthreadd): where a net
 * namespace's teardown and RCU callbacks run. Threads that exit in between
 * drop out, so this is a lower bound. ms. */
static double kthreads_ms(void) {
  DIR *dir = opendir("/proc");
  if (!dir) return 0;
  double ms = 0, tick = 1e3 / (double)sysconf(_SC_CLK_TCK);
  struct dirent *e;
  while ((e = readdir(dir))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char p[300], buf[512]; /* d_name: up to 255 bytes */
    snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = '\0';
    const char *q = strrchr(buf, ')');
    int ppid = 0;
    unsigned long long ut = 0, st = 0;
    if (!q || sscanf(q + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ppid, &ut, &st) != 3) continue;
    if (ppid == 2) ms += (double)(ut + st) * tick;
  }
  closedir(dir);
  return ms;
}

static double rusage_ms(void) {
  struct rusage a, b;
  getrusage(RUSAGE_SELF, &a);
  getrusage(RUSAGE_CHILDREN, &b);
  return (a.ru_utime.tv_sec + b.ru_utime.tv_sec + a.ru_stime.tv_sec + b.ru_stime.tv_sec) * 1e3 +
         (a.ru_utime.tv_usec + b.ru_utime.tv_usec + a.ru_stime.tv_usec + b.ru_stime.tv_usec) / 1e3;
}

struct loop_arg {
  int idx;
  double until;
  int cycles, failed;
};

static void *loop(void *p) {
  struct loop_arg *a = p;
  while (now_ms() < a->until) {
    if (cycle(a->idx) == 0) a->cycles++;
    else if (++a->failed > 10) break;
  }
  return NULL;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int n = 200;
  double secs = 3;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) n = atoi(argv[++i]);
    else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) secs = atof(argv[++i]);
    else if (strcmp(argv[i], "--no-net") == 0) with_net = false;
    else if (strcmp(argv[i], "--cgroup") == 0) with_cgroup = true;
    else {
      fprintf(stderr, "usage: bench-floor [-n N] [-t SECONDS] [--no-net] [--cgroup]   (root)\n");
      return 2;
    }
  }
  if (geteuid() != 0) {
    fprintf(stderr, "bench-floor: needs root (namespaces, mounts)\n");
    return 2;
  }
  if (n < 1) n = 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  snprintf(base, sizeof base, "/tmp/bench-floor-%d", (int)getpid());
  char root[96], rw[96];
  snprintf(root, sizeof root, "%s/root", base);
  snprintf(rw, sizeof rw, "%s/rw", base);
  if (mkdir(base, 0700) < 0 || mkdir(root, 0755) < 0 || mkdir(rw, 0700) < 0) {
    perror("bench-floor: mkdir");
    return 2;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  printf("floor  cycle = clone(pid,mnt,uts,ipc%s) + tmpfs + overlay + /proc + pivot_root + exit + teardown%s\n",
         with_net ? ",net" : "", with_cgroup ? " + 3 cgroups" : "");
  int rc = 0;
  /* serial */
  double *lat = calloc((size_t)n, sizeof *lat);
  int ok = 0;
  for (int i = 0; i < 10; i++) cycle(0); /* warm the dentry and slab caches */
  for (int i = 0; i < n; i++) {
    double t0 = now_ms();
    if (cycle(0) == 0) lat[ok++] = now_ms() - t0;
  }
  if (ok == 0) {
    fprintf(stderr, "bench-floor: every cycle failed\n");
    rc = 1;
    goto out;
  }
  qsort(lat, (size_t)ok, sizeof *lat, cmp_d);
  printf("serial   n=%d  p50 %.3f ms  p90 %.3f ms per cycle\n", ok, lat[ok / 2], lat[ok * 9 / 10]);
  /* parallel: one loop per CPU */
  {
    pthread_t th[64];
    struct loop_arg la[64];
    int k = cores > 64 ? 64 : (int)cores;
    unsigned long long b0, t0, b1, t1;
    double r0 = rusage_ms(), k0 = kthreads_ms(), w0 = now_ms();
    cpu_stat(&b0, &t0);
    for (int i = 0; i < k; i++) {
      la[i] = (struct loop_arg){.idx = i, .until = w0 + secs * 1e3};
      pthread_create(&th[i], NULL, loop, &la[i]);
    }
    int cycles = 0;
    for (int i = 0; i < k; i++) {
      pthread_join(th[i], NULL);
      cycles += la[i].cycles;
    }
    /* The last net namespaces are freed by a kworker after their exits. */
    usleep(200 * 1000);
    double wall = (now_ms() - w0) / 1e3;
    cpu_stat(&b1, &t1);
    double r1 = rusage_ms(), k1 = kthreads_ms();
    double jiffy_ms = 1e3 / (double)sysconf(_SC_CLK_TCK);
    double sys_ms = (double)(b1 - b0) * jiffy_ms / (cycles ? cycles : 1);
    double proc_ms = (r1 - r0) / (cycles ? cycles : 1), kth_ms = (k1 - k0) / (cycles ? cycles : 1);
    double busy = t1 > t0 ? (double)(b1 - b0) / (double)(t1 - t0) : 0;
    double la1 = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
      if (fscanf(f, "%lf", &la1) != 1) la1 = 0;
      fclose(f);
    }
    printf("parallel %d loops  %.0f cycles/s  (%d cycles in %.1f s, CPUs %.0f%% busy)\n", k,
           cycles / (wall - 0.2), cycles, wall - 0.2, busy * 100);
    printf("cpu      per cycle %.3f ms in this process and its children + %.3f ms in kernel threads = %.3f ms; "
           "machine-wide %.3f ms (other load included; load %.2f)\n",
           proc_ms, kth_ms, proc_ms + kth_ms, sys_ms, la1);
    printf("         -> at most %.0f cycles/s on %ld cores (process + kernel threads), %.0f (machine-wide figure)\n",
           cores * 1e3 / (proc_ms + kth_ms), cores, cores * 1e3 / sys_ms);
  }
out:
  free(lat);
  rmdir(root);
  rmdir(rw);
  rmdir(base);
  return rc;
}
