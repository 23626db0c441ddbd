/* Internals shared by the files of libsandbox/agent. Names carry no sbx_
 * prefix so the version script keeps them out of the shared library. */
#ifndef SBX_AGENT_PRIV_H
#define SBX_AGENT_PRIV_H

#include <sandbox/agent.h>

#define AGENT_READ_BUF (256 * 1024)
#define AGENT_CHUNK (256 * 1024) /* upload chunk, as the reference clients use */

/* Send n bytes as bulk frames of at most AGENT_CHUNK (stdin or data). */
int agent_send_chunked(sbx_agent *a, sbx_wire_bulk kind, const void *data, size_t n, sbx_error *err);

struct sbx_agent {
  int fd;
  int timeout_ms;
  bool broken;
  bool eof;
  bool not_socket; /* a pipe or a file: plain write() */
  sbx_frame_reader *reader;
  char *rbuf;
  uint8_t *scratch;
  size_t scratch_cap;
  sbx_buf wbuf;
};

/* Marks the connection unusable and passes rc through. */
int agent_broken(sbx_agent *a, int rc);
int agent_send_op(sbx_agent *a, sbx_wire_op op, sbx_error *err);
/* 1 with a raw frame, 0 at end of stream, <0 on failure. */
int agent_next_line(sbx_agent *a, const char **line, size_t *len, sbx_error *err);
/* As agent_next_line, but end of stream is a failure. */
int agent_need_frame(sbx_agent *a, const char **line, size_t *len, sbx_error *err);
int agent_remote_error(const sbx_wire_resp *r, sbx_error *err);
int agent_unexpected(sbx_agent *a, const sbx_wire_resp *r, const char *verb, sbx_error *err);
int agent_recv_reply(sbx_agent *a, sbx_wire_type want, sbx_wire_resp *out, const char *verb, sbx_error *err);
int agent_ensure_scratch(sbx_agent *a, size_t n);

/* A streamed reply read to its final frame: `done` ends it, `error` fails
 * it, every other frame goes to on_frame, which returns 0 to read on, 1 to
 * end the stream, AGENT_FRAME_UNEXPECTED for a frame its verb never gets
 * (a protocol error naming verb), or < 0. */
#define AGENT_FRAME_UNEXPECTED 2
typedef int (*agent_frame_fn)(sbx_agent *a, const sbx_wire_resp *r, void *ud, sbx_error *err);
int agent_stream(sbx_agent *a, const char *verb, agent_frame_fn on_frame, void *ud, sbx_error *err);

#endif
