/* Internal glue between the wire codec's files. */
#ifndef SBX_WIRE_INTERNAL_H
#define SBX_WIRE_INTERNAL_H

#include <sandbox/wire.h>

sbx_wire_arena *sbxi_arena_new(size_t first_block);
void *sbxi_arena_alloc(sbx_wire_arena *a, size_t n);
void sbxi_arena_free(sbx_wire_arena *a);

/* Bulk fast path inside the generic decoders: 1 if the line was a
 * canonical bulk frame with valid base64 and *out is filled, else 0 (the
 * caller then runs the full decoder, which reports any error). */
int sbxi_bulk_decode_req(const char *line, size_t len, sbx_wire_req *out);
int sbxi_bulk_decode_resp(const char *line, size_t len, sbx_wire_resp *out);

#endif
