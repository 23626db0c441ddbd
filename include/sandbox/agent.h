/* sandbox/agent.h - a client of silkd over one connected stream.
 *
 * The stream can be anything that carries the wire protocol: a jail's Unix
 * socket (sbx_sandbox_connect), a sandboxd relay after `Upgrade: silkd`, a
 * VM's forwarded port. RPCs run back to back on it (proto 2). An sbx_agent
 * belongs to one thread at a time.
 *
 * Errors: an `error` frame from silkd becomes SBX_E_REMOTE with err->detail =
 * the sbx_wire_error_kind and err->msg = its message; the connection stays
 * usable. A broken stream or a protocol violation makes the connection
 * unusable (sbx_agent_usable() == false): close it and dial again.
 */
#ifndef SANDBOX_AGENT_H
#define SANDBOX_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sandbox/core.h>
#include <sandbox/error.h>
#include <sandbox/wire.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sbx_agent sbx_agent;

/* Takes ownership of fd (closed by sbx_agent_close, also on failure). */
int sbx_agent_open(int fd, sbx_agent **out, sbx_error *err);
void sbx_agent_close(sbx_agent *a);
int sbx_agent_fd(const sbx_agent *a);
/* Longest wait for the next frame; -1 = forever (the default). A timeout
 * fails the call with SBX_E_TIMEOUT and leaves the connection unusable. */
void sbx_agent_set_timeout(sbx_agent *a, int timeout_ms);
bool sbx_agent_usable(const sbx_agent *a);

/* ---- frames ---- */
int sbx_agent_send(sbx_agent *a, const sbx_wire_req *req, sbx_error *err);
int sbx_agent_send_bulk(sbx_agent *a, sbx_wire_bulk kind, const void *data, size_t n, sbx_error *err);
/* The next response frame (free it with sbx_wire_resp_free). An error frame
 * is returned as a frame here, not as a failure. */
int sbx_agent_recv(sbx_agent *a, sbx_wire_resp *out, sbx_error *err);

/* ---- RPCs ---- */
int sbx_agent_info(sbx_agent *a, sbx_resp_info *out, char *version, size_t version_len, sbx_error *err);

typedef enum { SBX_STREAM_STDOUT = 1, SBX_STREAM_STDERR = 2 } sbx_stream;

typedef struct sbx_agent_exec_io {
  /* Called for every output piece; a non-zero return stops reading and
   * fails the exec with that code (the connection is then dropped). */
  int (*on_output)(void *ud, sbx_stream stream, const void *data, size_t n);
  void *ud;
  /* Input: a buffer sent whole, or an fd read until EOF (-1 = none). Either
   * way stdin_close follows, so the child sees EOF. */
  const void *stdin_data;
  size_t stdin_len;
  int stdin_fd;
  /* Called once with the pid from `started` (e.g. to arm a Ctrl-C kill). */
  void (*on_started)(void *ud, uint32_t pid);
} sbx_agent_exec_io;

/* Foreground exec: started -> output -> exit. *exit_code as silkd reports it
 * (128 + signal when killed). */
int sbx_agent_exec(sbx_agent *a, const sbx_req_exec *req, const sbx_agent_exec_io *io, int *exit_code,
                   sbx_error *err);
/* Run argv to completion capturing stdout and stderr (each bounded by its
 * buffer's cap; a full buffer fails with SBX_E_TOOBIG). */
int sbx_agent_run(sbx_agent *a, const char *const *argv, sbx_buf *out, sbx_buf *errout, int *exit_code,
                  sbx_error *err);
int sbx_agent_kill(sbx_agent *a, uint32_t pid, int signal, sbx_error *err);
int sbx_agent_read_file(sbx_agent *a, const char *path, sbx_buf *out, sbx_error *err);
/* Atomic on the guest side (temp + rename); mode < 0 keeps silkd's default. */
int sbx_agent_write_file(sbx_agent *a, const char *path, const void *data, size_t n, int mode, sbx_error *err);
int sbx_agent_stat(sbx_agent *a, const char *path, sbx_wire_file_info *out, sbx_error *err);

#ifdef __cplusplus
}
#endif
#endif
