/* bulk.h - the bulk fast path (bulk.c) as the generic decoders use it.
 * bulk.c needs only the arena; decode.c needs this: the dependency runs
 * one way. */
#ifndef SBX_WIRE_BULK_H
#define SBX_WIRE_BULK_H

#include <sandbox/wire.h>

/* 1 if the line was a canonical bulk frame with valid base64 and *out is
 * filled, else 0 (the caller then runs the full decoder, which reports any
 * error). */
int sbxi_bulk_decode_req(const char *line, size_t len, sbx_wire_req *out);
int sbxi_bulk_decode_resp(const char *line, size_t len, sbx_wire_resp *out);

#endif
