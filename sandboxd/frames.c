/* frames.c - the silkd frames sandboxd sends and takes, through
 * libsandbox's wire codec (sbx_wire_*): the one implementation of the
 * protocol, the fuzzed one the fixtures test. exec.c and relay_port.c
 * build requests as sbx_wire_req values and read answers as
 * sbx_wire_resp values; no frame is printed or parsed by hand. */
#include <event2/buffer.h>

#include "sandboxd.h"

int frame_send(struct evbuffer *out, const sbx_wire_req *req, sbx_error *err) {
  sbx_buf b = SBX_BUF_INIT(SBX_WIRE_FRAME_CAP + 1);
  int rc = sbx_wire_encode_req(&b, req, err);
  if (rc == 0 && evbuffer_add(out, b.ptr, b.len) < 0) rc = sbx_err(err, SBX_E_NOMEM, "queue a frame");
  sbx_buf_free(&b);
  return rc;
}

int frame_next(struct evbuffer *in, size_t max, const char **line, size_t *len) {
  struct evbuffer_ptr nl = evbuffer_search(in, "\n", 1, NULL);
  if (nl.pos < 0) return evbuffer_get_length(in) > max ? -1 : 0;
  *len = (size_t)nl.pos;
  *line = (const char *)evbuffer_pullup(in, nl.pos + 1);
  return 1;
}
