/* sbxd_test.h - start a real build/bin/sandboxd and talk HTTP to it.
 *
 * Header-only so each test program stays one file. The daemon gets a temp
 * data_dir and port 0; its stderr is read until "sandboxd: ready port=N",
 * then drained into a log file. HTTP is raw sockets with Connection: close
 * so a test sees exactly the bytes sandboxd sends.
 *
 * Daemons run the real jail driver and the real build/bin/silkd (root);
 * "@CGROUP@" in a config becomes a cgroup parent of the daemon's own, and
 * sbxd_jail_cleanup() destroys what it left running.
 *
 * Included after <cmocka.h>, it also gives the claim / exec / agent-upgrade
 * steps the sandbox tests share, asserting as they go. */
#ifndef SBXD_TEST_H
#define SBXD_TEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "util/util.h"

#ifndef SBX_BUILD_BIN_DIR
#define SBX_BUILD_BIN_DIR "build/bin"
#endif

struct sbxd_proc {
  pid_t pid;
  int port;
  char dir[256];    /* temp dir: config.json, data/, log */
  char config[300];
  int err_fd;       /* daemon stderr (drained by sbxd_log) */
  char cgroup[64];  /* what "@CGROUP@" becomes: jail.cgroup_root */
  unsigned nofile;  /* RLIMIT_NOFILE (soft and hard) to start with; 0 = inherited */
};

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static inline void sbxd_rmrf(const char *dir) { nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

/* (Re)write config.json; "@DATA@" in the text becomes the data dir,
 * "@CGROUP@" the daemon's own cgroup parent. */
static inline void sbxd_write_config(struct sbxd_proc *p, const char *config_text) {
  char data[300];
  snprintf(data, sizeof data, "%s/data", p->dir);
  FILE *f = fopen(p->config, "w");
  for (const char *c = config_text; *c; c++) {
    if (strncmp(c, "@DATA@", 6) == 0) {
      fputs(data, f);
      c += 5;
    } else if (strncmp(c, "@CGROUP@", 8) == 0) {
      fputs(p->cgroup, f);
      c += 7;
    } else {
      fputc(*c, f);
    }
  }
  fclose(f);
}

/* A fresh temp dir holding config.json with the given text. */
static inline void sbxd_prepare(struct sbxd_proc *p, const char *config_text) {
  memset(p, 0, sizeof *p);
  p->pid = -1;
  p->err_fd = -1;
  snprintf(p->dir, sizeof p->dir, "/tmp/sbxd-test-XXXXXX");
  if (!mkdtemp(p->dir)) abort();
  /* A cgroup parent of its own: the driver's reconcile removes empty
   * cgroups it does not own under a shared parent, which races with another
   * daemon (or test) that has just created one. */
  snprintf(p->cgroup, sizeof p->cgroup, "sbxd-test-%d-%s", (int)getpid(), p->dir + strlen("/tmp/sbxd-test-"));
  snprintf(p->config, sizeof p->config, "%s/config.json", p->dir);
  sbxd_write_config(p, config_text);
}

/* Run sandboxd with extra args; capture stdout+stderr into out (may be
 * NULL) and return the exit status. For --version and bad configs. */
static inline int sbxd_run_once(const char *const *args, char *out, size_t outlen) {
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0) abort();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pfd[1], 1);
    dup2(pfd[1], 2);
    const char *argv[16] = {SBX_BUILD_BIN_DIR "/sandboxd"};
    size_t n = 1;
    for (; args[n - 1] && n < 15; n++) argv[n] = args[n - 1];
    argv[n] = NULL;
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(pfd[1]);
  size_t got = 0;
  char tmp[4096];
  ssize_t r;
  while ((r = read(pfd[0], tmp, sizeof tmp)) > 0) {
    if (out && got + 1 < outlen) {
      size_t c = (size_t)r < outlen - 1 - got ? (size_t)r : outlen - 1 - got;
      memcpy(out + got, tmp, c);
      got += c;
    }
  }
  if (out) out[got] = '\0';
  close(pfd[0]);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* `sandboxd --check-config` on config_text: the exit code, and the output
 * in out. A config the daemon must refuse exits 2 naming the key. */
static inline int sbxd_check_config(const char *config_text, char *out, size_t outlen) {
  struct sbxd_proc q;
  sbxd_prepare(&q, config_text);
  const char *args[] = {"--config", q.config, "--check-config", NULL};
  int rc = sbxd_run_once(args, out, outlen);
  if (rc != 0) fprintf(stderr, "config %s -> %d: %s\n", config_text, rc, out);
  sbxd_rmrf(q.dir);
  return rc;
}

static inline void sbxd_log_append(const struct sbxd_proc *p, const char *text) {
  char path[320];
  snprintf(path, sizeof path, "%s/daemon.log", p->dir);
  FILE *f = fopen(path, "a");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* Start the daemon on p->config; returns 0 once it printed its port. What
 * it logged until then starts daemon.log. */
static inline int sbxd_start(struct sbxd_proc *p) {
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    /* A test that dies must not leave its daemon behind. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(pfd[1], 2);
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    dup2(devnull, 1);
    if (!getenv("SANDBOXD_LOG_LEVEL")) setenv("SANDBOXD_LOG_LEVEL", "info", 1);
    if (p->nofile) {
      struct rlimit rl = {p->nofile, p->nofile};
      setrlimit(RLIMIT_NOFILE, &rl);
    }
    execl(SBX_BUILD_BIN_DIR "/sandboxd", "sandboxd", "--config", p->config, (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  p->pid = pid;
  p->err_fd = pfd[0];
  char buf[8192];
  size_t got = 0;
  buf[0] = '\0';
  for (;;) {
    struct pollfd pf = {pfd[0], POLLIN, 0};
    if (poll(&pf, 1, 60000) <= 0) break;
    ssize_t r = read(pfd[0], buf + got, sizeof buf - 1 - got);
    if (r <= 0) break;
    got += (size_t)r;
    buf[got] = '\0';
    char *m = strstr(buf, "sandboxd: ready port=");
    if (m) {
      p->port = atoi(m + strlen("sandboxd: ready port="));
      fcntl(pfd[0], F_SETFL, O_NONBLOCK);
      sbxd_log_append(p, buf);
      return 0;
    }
    if (got == sizeof buf - 1) got = 0;
  }
  fprintf(stderr, "sandboxd did not start:\n%s\n", buf);
  sbxd_log_append(p, buf);
  return -1;
}

/* Drain what the daemon logged (so its pipe never fills). */
static inline void sbxd_drain_log(struct sbxd_proc *p) {
  char buf[4096], path[320];
  snprintf(path, sizeof path, "%s/daemon.log", p->dir);
  ssize_t n;
  while (p->err_fd >= 0 && (n = read(p->err_fd, buf, sizeof buf)) > 0) {
    FILE *f = fopen(path, "a");
    if (f) {
      fwrite(buf, 1, (size_t)n, f);
      fclose(f);
    }
  }
}

/* Print what the daemon logged (after a failure). */
static inline void sbxd_dump_log(struct sbxd_proc *p) {
  char path[320], line[4096];
  snprintf(path, sizeof path, "%s/daemon.log", p->dir);
  FILE *f = fopen(path, "r");
  if (!f) return;
  while (fgets(line, sizeof line, f)) fputs(line, stderr);
  fclose(f);
}

/* SIGTERM (or SIGKILL) and wait; returns the exit status. */
static inline int sbxd_stop(struct sbxd_proc *p, int sig) {
  if (p->pid <= 0) return -1;
  kill(p->pid, sig);
  int st = 0;
  /* Keep draining so a chatty daemon cannot block on a full pipe. */
  for (;;) {
    pid_t w = waitpid(p->pid, &st, WNOHANG);
    if (w == p->pid) break;
    sbxd_drain_log(p);
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  p->pid = -1;
  sbxd_drain_log(p);
  close(p->err_fd);
  p->err_fd = -1;
  int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (sig == SIGTERM && rc != 0) sbxd_dump_log(p);
  return rc;
}

static inline void sbxd_cleanup(struct sbxd_proc *p) {
  if (p->pid > 0) sbxd_stop(p, SIGKILL);
  sbxd_rmrf(p->dir);
}

static inline void sbxd_remove_cgroup_parent(const struct sbxd_proc *p) {
  static const char *const ctl[] = {"cpu", "cpuacct", "cpuset", "memory", "pids", "freezer", "blkio", "devices",
                                    "systemd", "unified", ""};
  char path[256];
  for (size_t i = 0; i < sizeof ctl / sizeof *ctl; i++) {
    snprintf(path, sizeof path, "/sys/fs/cgroup/%s%s%s", ctl[i], ctl[i][0] ? "/" : "", p->cgroup);
    rmdir(path);
  }
}

/* Sandboxes the driver runs for this daemon: one directory each under
 * <data_dir>/run while the jail lives (removed by its destroy). */
static inline int sbxd_count_sandboxes(const struct sbxd_proc *p) {
  char path[320];
  snprintf(path, sizeof path, "%s/data/run", p->dir);
  DIR *dir = opendir(path);
  if (!dir) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(dir)))
    if (de->d_name[0] != '.') n++;
  closedir(dir);
  return n;
}

/* sandboxd leaves sandboxes running when it stops (§5.13), so cleaning up
 * is a restart that owns nothing: no journalled claims and no pools, so
 * reconcile destroys every sandbox under the data_dir and none is made.
 * Call with the daemon stopped (or it is killed first). */
static inline void sbxd_jail_destroy_all(struct sbxd_proc *p) {
  if (p->pid > 0) sbxd_stop(p, SIGKILL);
  char path[320];
  snprintf(path, sizeof path, "%s/data/claims.json", p->dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/data/pools.json", p->dir);
  FILE *f = fopen(path, "w");
  if (f) {
    fputs("{\"pools\":[]}", f);
    fclose(f);
  }
  /* A config without pools, so none is built from it either. */
  const char *cfg = "{\"listen\":\"127.0.0.1:0\",\"data_dir\":\"@DATA@\",\"driver\":\"jail\","
                    "\"jail\":{\"cgroup_root\":\"@CGROUP@\"}}";
  sbxd_write_config(p, cfg);
  if (sbxd_start(p) == 0) sbxd_stop(p, SIGTERM);
}

/* Every sandbox destroyed, then the temp dir and the cgroup parent. */
static inline void sbxd_jail_cleanup(struct sbxd_proc *p) {
  sbxd_jail_destroy_all(p);
  sbxd_cleanup(p);
  sbxd_remove_cgroup_parent(p);
}

/* The driver's name (vm) of a claimed sandbox, from its claim event in
 * usage.jsonl (§6.1); "" if none. */
static inline void sbxd_vm_of(const struct sbxd_proc *p, const char *id, char *vm, size_t len) {
  char path[320], line[4096];
  snprintf(path, sizeof path, "%s/data/usage.jsonl", p->dir);
  vm[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  while (fgets(line, sizeof line, f)) {
    json_t *v = json_loads(line, 0, NULL);
    const char *ev = json_string_value(json_object_get(v, "ev"));
    const char *i = json_string_value(json_object_get(v, "id"));
    if (ev && i && strcmp(ev, "claim") == 0 && strcmp(i, id) == 0)
      snprintf(vm, len, "%s", json_string_value(json_object_get(v, "vm")));
    json_decref(v);
  }
  fclose(f);
}

/* The host pid of a jail's pid 1 (silkd): the process of its pids cgroup
 * that is 1 in its own pid namespace; -1 if none. */
static inline pid_t sbxd_jail_pid1(const struct sbxd_proc *p, const char *vm) {
  char path[400], line[512];
  snprintf(path, sizeof path, "/sys/fs/cgroup/pids/%s/%s/cgroup.procs", p->cgroup, vm);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  pid_t found = -1;
  long pid;
  while (found < 0 && fscanf(f, "%ld", &pid) == 1) {
    char st[64];
    snprintf(st, sizeof st, "/proc/%ld/status", pid);
    FILE *s = fopen(st, "r");
    if (!s) continue;
    while (fgets(line, sizeof line, s)) {
      if (strncmp(line, "NSpid:", 6) != 0) continue;
      char *last = strrchr(line, '\t');
      if (last && atol(last + 1) == 1) found = (pid_t)pid;
    }
    fclose(s);
  }
  fclose(f);
  return found;
}

struct http_resp {
  int status;
  char head[8192];
  char *body; /* malloc'd, NUL-terminated */
  size_t body_len;
};

static inline void http_resp_free(struct http_resp *r) {
  free(r->body);
  r->body = NULL;
}

static inline int sbxd_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static inline int write_all_fd(int fd, const void *p, size_t n) { return sbxi_write_all(fd, p, n); }

/* Read a whole Connection: close response. */
static inline int http_read_resp(int fd, struct http_resp *r) {
  size_t cap = 65536, len = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
    ssize_t n = read(fd, buf + len, cap - len - 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  buf[len] = '\0';
  memset(r, 0, sizeof *r);
  char *end = strstr(buf, "\r\n\r\n");
  if (!end || sscanf(buf, "HTTP/1.1 %d", &r->status) != 1) {
    free(buf);
    r->status = -1;
    return -1;
  }
  size_t hl = (size_t)(end - buf) + 4;
  snprintf(r->head, sizeof r->head, "%.*s", (int)hl, buf);
  r->body_len = len - hl;
  r->body = malloc(r->body_len + 1);
  memcpy(r->body, buf + hl, r->body_len);
  r->body[r->body_len] = '\0';
  free(buf);
  return 0;
}

/* One request. token may be NULL (no Authorization); body may be NULL. */
static inline int sbxd_http(int port, const char *method, const char *path, const char *token, const char *body,
                            struct http_resp *r) {
  int fd = sbxd_connect(port);
  if (fd < 0) return -1;
  char head[2048];
  size_t bl = body ? strlen(body) : 0;
  int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n", method, path);
  if (token) n += snprintf(head + n, sizeof head - (size_t)n, "Authorization: Bearer %s\r\n", token);
  if (body) n += snprintf(head + n, sizeof head - (size_t)n, "Content-Type: application/json\r\nContent-Length: %zu\r\n", bl);
  n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
  write_all_fd(fd, head, (size_t)n);
  if (body) write_all_fd(fd, body, bl);
  int rc = http_read_resp(fd, r);
  close(fd);
  return rc;
}

/* The status alone, for the long matrices. */
static inline int sbxd_status(int port, const char *method, const char *path, const char *token, const char *body) {
  struct http_resp r;
  if (sbxd_http(port, method, path, token, body, &r) < 0) return -1;
  int s = r.status;
  http_resp_free(&r);
  return s;
}

#ifdef CMOCKA_H_
/* A claimed sandbox. */
struct sbxd_claim {
  char id[32], token[64];
};

/* Claim a "host" sandbox (api_token may be NULL), asserting a 200; on any
 * other answer it and the daemon's log are printed first. */
static inline void sbxd_claim(struct sbxd_proc *p, const char *api_token, struct sbxd_claim *c) {
  struct http_resp r;
  assert_int_equal(sbxd_http(p->port, "POST", "/v1/claim", api_token, "{\"template\":\"host\"}", &r), 0);
  if (r.status != 200) {
    fprintf(stderr, "claim: %d %s\n", r.status, r.body);
    sbxd_drain_log(p);
    sbxd_dump_log(p);
  }
  assert_int_equal(r.status, 200);
  json_error_t je;
  json_t *v = json_loads(r.body, 0, &je);
  snprintf(c->id, sizeof c->id, "%s", json_string_value(json_object_get(v, "id")));
  snprintf(c->token, sizeof c->token, "%s", json_string_value(json_object_get(v, "token")));
  json_decref(v);
  http_resp_free(&r);
}

/* POST body to the sandbox's buffered exec; the answer parsed (NULL when it
 * is not JSON, which is printed, as is a 5xx) and its status in *status. */
static inline json_t *sbxd_exec(const struct sbxd_proc *p, const struct sbxd_claim *c, const char *body, int *status) {
  char path[128];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/exec", c->id);
  struct http_resp r;
  assert_int_equal(sbxd_http(p->port, "POST", path, c->token, body, &r), 0);
  *status = r.status;
  if (r.status >= 500) fprintf(stderr, "exec %s: %d %s\n", body, r.status, r.body);
  json_error_t je;
  json_t *v = json_loads(r.body, 0, &je);
  if (!v) fprintf(stderr, "exec answer is not JSON: %s\n", r.body);
  http_resp_free(&r);
  return v;
}

/* The 101 head of an agent relay, exactly (spec §4.21 step 5). */
#define SBXD_AGENT_101 "HTTP/1.1 101 Switching Protocols\r\nUpgrade: silkd\r\nConnection: Upgrade\r\n\r\n"
#define SBXD_AGENT_101_LEN 73

/* The head of an agent upgrade request for c with `Upgrade: upgrade`, and
 * pipelined bytes right behind it (may be ""); returns its length. */
static inline int sbxd_agent_request(char *req, size_t cap, const struct sbxd_claim *c, const char *upgrade,
                                     const char *pipelined) {
  int n = snprintf(req, cap,
                   "GET /v1/sandboxes/%s/agent HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: %s\r\n"
                   "Authorization: Bearer %s\r\n\r\n%s",
                   c->id, upgrade, c->token, pipelined);
  assert_true(n > 0 && (size_t)n < cap);
  return n;
}

/* Read an upgraded agent connection until the 101 head and one whole line
 * after it, asserting the head; returns the bytes read (buf NUL-terminated,
 * the line at buf + SBXD_AGENT_101_LEN). */
static inline size_t sbxd_read_101_and_line(int fd, char *buf, size_t cap) {
  size_t got = 0;
  while (got <= SBXD_AGENT_101_LEN || !memchr(buf + SBXD_AGENT_101_LEN, '\n', got - SBXD_AGENT_101_LEN)) {
    assert_true(got + 1 < cap);
    ssize_t r = read(fd, buf + got, cap - 1 - got);
    assert_true(r > 0);
    got += (size_t)r;
  }
  buf[got] = '\0';
  assert_memory_equal(buf, SBXD_AGENT_101, SBXD_AGENT_101_LEN);
  return got;
}

/* An agent relay for c whose first frame (pipelined behind the head) has
 * been answered: returns the fd, the answer line in buf as above. */
static inline int sbxd_agent_open(const struct sbxd_proc *p, const struct sbxd_claim *c, const char *upgrade,
                                  const char *first_frame, char *buf, size_t cap) {
  int fd = sbxd_connect(p->port);
  assert_true(fd >= 0);
  char req[1024];
  int n = sbxd_agent_request(req, sizeof req, c, upgrade, first_frame);
  assert_int_equal(write_all_fd(fd, req, (size_t)n), 0);
  sbxd_read_101_and_line(fd, buf, cap);
  return fd;
}
#endif /* CMOCKA_H_ */

#endif
