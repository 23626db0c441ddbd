/* sbxctl shell: an interactive pty in the sandbox. The local terminal is
 * put in raw mode (every key, Ctrl-C included, goes to the remote shell)
 * and restored on every way out; SIGWINCH becomes pty_resize. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "remote.h"

static struct termios saved_tio;
static volatile sig_atomic_t raw_on;
static int winch_pipe[2] = {-1, -1};

static void term_restore(void) {
  if (raw_on) {
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
    raw_on = 0;
  }
}

static void on_winch(int sig) {
  (void)sig;
  int e = errno;
  if (write(winch_pipe[1], "w", 1) < 0) { /* full pipe: a resize is pending anyway */
  }
  errno = e;
}

static void on_fatal(int sig) {
  term_restore();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void term_size(uint16_t *cols, uint16_t *rows) {
  struct winsize ws;
  *cols = 80;
  *rows = 24;
  if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) {
    *cols = ws.ws_col;
    *rows = ws.ws_row;
  }
}

static int out_cb(void *ud, const void *p, size_t n) {
  (void)ud;
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(STDOUT_FILENO, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return SBX_E_OS;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static int shell_loop(sbx_pty *p, int *code, sbx_error *err) {
  char buf[16384];
  bool in_open = true;
  for (;;) {
    /* Frames can already sit in the connection's buffer (the shell's first
     * prompt often arrives in the same read as `started`): deliver them
     * before waiting on the socket, or poll would sleep on data we hold. */
    int rc = sbx_pty_read(p, out_cb, NULL, 0, code, err);
    if (rc != 0) return rc < 0 ? rc : 0;
    struct pollfd pf[3] = {{sbx_pty_fd(p), POLLIN, 0}, {winch_pipe[0], POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    int n = poll(pf, in_open ? 3 : 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sbx_err_os(err, errno, "poll");
    if (pf[1].revents) {
      while (read(winch_pipe[0], buf, sizeof buf) > 0) {
      }
      uint16_t cols, rows;
      term_size(&cols, &rows);
      sbx_error e2;
      sbx_pty_resize(p, cols, rows, &e2); /* a failed resize is not worth ending the session */
    }
    if (in_open && pf[2].revents) {
      ssize_t k = read(STDIN_FILENO, buf, sizeof buf);
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k <= 0) {
        /* end of local input: keep showing output until the shell exits
         * (closing the connection would kill it) */
        in_open = false;
        continue;
      }
      if ((rc = sbx_pty_write(p, buf, (size_t)k, err)) < 0) return rc;
    }
  }
}

int cmd_shell(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {{"cwd", required_argument, 0, 'c'}, {"env", required_argument, 0, 'e'},
                                       {"user", required_argument, 0, 'u'}, COMMON_LONGOPTS, {0, 0, 0, 0}};
  sbx_pty_opts po = SBX_PTY_OPTS_INIT();
  const char *env[65] = {0};
  size_t nenv = 0;
  int c, rc;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 'c') {
      po.cwd = optarg;
    } else if (c == 'u') {
      po.user = optarg;
    } else if (c == 'e') {
      if (!strchr(optarg, '=') || optarg[0] == '=' || nenv == 64) return rusage("shell");
      env[nenv++] = optarg;
    } else if ((rc = common_opt(r, c, "shell")) >= 0) {
      return rc;
    }
  }
  if (argc - optind != 1) return rusage("shell");
  po.env = nenv ? env : NULL;
  sbx_sandbox *s;
  if (rsandbox(r, argv[optind], &s)) return EXIT_FAIL;
  term_size(&po.cols, &po.rows);
  sbx_pty *p;
  sbx_error err;
  if (sbx_sandbox_open_pty(s, &po, &p, &err) < 0) {
    sbx_sandbox_free(s);
    return rfail_err("shell", &err);
  }
  if (pipe2(winch_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
    sbx_pty_close(p);
    sbx_sandbox_free(s);
    return rfail("shell: pipe: %s", strerror(errno));
  }
  struct sigaction sa = {.sa_handler = on_winch, .sa_flags = SA_RESTART};
  sigaction(SIGWINCH, &sa, NULL);
  if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_tio) == 0) {
    struct termios raw = saved_tio;
    cfmakeraw(&raw);
    signal(SIGTERM, on_fatal);
    signal(SIGHUP, on_fatal);
    atexit(term_restore);
    if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0) raw_on = 1;
  }
  int code = 0;
  rc = shell_loop(p, &code, &err);
  term_restore();
  signal(SIGWINCH, SIG_DFL);
  close(winch_pipe[0]);
  close(winch_pipe[1]);
  sbx_pty_close(p);
  sbx_sandbox_free(s);
  if (rc < 0) return rfail_err("shell", &err);
  return code < 0 || code > 255 ? 255 : code;
}
