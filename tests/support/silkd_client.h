/* silkd_client.h - test harness shared by tests/unit/silkd/test_silkd_*.c
 * and bench/silkd (tests/support, a library both link):
 * start a real build/bin/silkd on a Unix socket in a temp dir, and talk the
 * wire protocol to it with libsandbox's codec.
 *
 * Reads carry a generous hang guard (SC_HANG_MS) so a broken daemon fails a
 * test instead of stalling CI; no test asserts on elapsed time.
 */
#ifndef SILKD_CLIENT_H
#define SILKD_CLIENT_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sandbox/core.h>
#include <sandbox/wire.h>

#define SC_HANG_MS 120000

/* Where silkd_start finds silkd: the build's bin directory unless set. */
extern const char *sc_bin_dir;

typedef struct silkd_srv {
  char dir[256];
  char sock[300];
  pid_t pid;
} silkd_srv;

typedef struct sc {
  int fd;
  sbx_frame_reader *fr;
  char *buf;
  bool eof;
} sc;

int sc_rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f);

void sc_rmrf(const char *path);

int sc_try_connect(const char *path);

/* Start silkd; returns 0 or -1. */
int silkd_start(silkd_srv *s);
/* The same with up to two extra arguments (NULL for none). */
int silkd_start_args(silkd_srv *s, const char *a1, const char *a2);

/* SIGTERM, expect exit 0, remove the temp dir. Returns the exit status. */
int silkd_stop(silkd_srv *s);

sc *sc_open(const silkd_srv *s);

void sc_close(sc *c);

int sc_send_raw(sc *c, const void *p, size_t n);

/* Send one frame given as printf format (the LF is added). */
__attribute__((format(printf, 2, 3))) int sc_sendf(sc *c, const char *fmt, ...);

int sc_send_bulk(sc *c, sbx_wire_bulk kind, const void *p, size_t n);

/* Next frame as raw line (copied, NUL-terminated). 1 = frame, 0 = EOF,
 * -1 = error or hang guard. */
int sc_recv_line(sc *c, char **line, size_t *len);

/* Next frame decoded. Returns 1, 0 on EOF, -1 on error. */
int sc_recv(sc *c, sbx_wire_resp *r);

/* Is the connection closed by the peer with no further frame? */
bool sc_closed(sc *c);

/* Result of running an RPC to its final frame. */
typedef struct sc_result {
  sbx_wire_type final;   /* type of the final frame; SBX_RESP__COUNT on EOF */
  int32_t code;          /* exit code */
  uint32_t pid;          /* from started */
  sbx_buf out, err, data; /* stdout, stderr, data payloads */
  sbx_wire_error_kind kind;
  char msg[1024];
  int frames;
  bool saw_exit; /* logs: exit before done */
} sc_result;

void sc_result_free(sc_result *r);

/* Read frames until one of the given final types (or error) arrives.
 * `finals` lists the terminal types for this verb, ended by SBX_RESP__COUNT. */
int sc_collect(sc *c, sc_result *res, const sbx_wire_type *finals);

extern const sbx_wire_type SC_FIN_EXIT[];
extern const sbx_wire_type SC_FIN_DONE[];
extern const sbx_wire_type SC_FIN_ATTACH[];
extern const sbx_wire_type SC_FIN_NONE_OR_CREATED[];


/* Run a shell snippet in the foreground and collect it. */
int sc_exec_sh(sc *c, const char *script, sc_result *res);

/* A JSON string literal of s (quotes included); caller frees. */
char *sc_json_str(const char *s);

#endif
