/* Bulk fast path: data, stdout, stderr (responses) and data, stdin
 * (requests) in their canonical shape carry nearly all the bytes on the
 * wire. They are recognised by a fixed prefix and their base64 payload goes
 * straight between the line and the caller's buffer: no tokens, no tree,
 * no intermediate copy. Any other shape takes the full decoder. */
#include <string.h>

#include <sandbox/wire.h>

#include "arena.h"
#include "bulk.h"

typedef struct {
  const char *prefix;
  size_t len;
} bulk_prefix;

#define P(s) {s, sizeof(s) - 1}
static const bulk_prefix prefixes[] = {
    [SBX_BULK_NONE] = {"", 0},
    [SBX_BULK_STDOUT] = P("{\"type\":\"stdout\",\"data\":\""),
    [SBX_BULK_STDERR] = P("{\"type\":\"stderr\",\"data\":\""),
    [SBX_BULK_DATA] = P("{\"type\":\"data\",\"data\":\""),
    [SBX_BULK_REQ_DATA] = P("{\"v\":1,\"op\":\"data\",\"data\":\""),
    [SBX_BULK_REQ_STDIN] = P("{\"v\":1,\"op\":\"stdin\",\"data\":\""),
};
#undef P
#define SUFFIX "\"}\n"
#define SUFFIX_LEN 3

size_t sbx_wire_bulk_frame_len(sbx_wire_bulk kind, size_t payload_len) {
  return prefixes[kind].len + sbx_b64_encoded_len(payload_len) + SUFFIX_LEN;
}

size_t sbx_wire_bulk_encode_into(char *dst, sbx_wire_bulk kind, const void *payload, size_t n) {
  const bulk_prefix *p = &prefixes[kind];
  memcpy(dst, p->prefix, p->len);
  size_t o = p->len + sbx_b64_encode(dst + p->len, payload, n);
  memcpy(dst + o, SUFFIX, SUFFIX_LEN);
  return o + SUFFIX_LEN;
}

int sbx_wire_bulk_encode(sbx_buf *out, sbx_wire_bulk kind, const void *payload, size_t n, sbx_error *err) {
  if (kind == SBX_BULK_NONE || kind > SBX_BULK_REQ_STDIN) return sbx_err(err, SBX_E_INVAL, "bad bulk kind");
  size_t flen = sbx_wire_bulk_frame_len(kind, n);
  if (flen - 1 > SBX_WIRE_FRAME_CAP)
    return sbx_err(err, SBX_E_TOOBIG, "a %zu-byte payload exceeds the frame cap", n);
  char *where;
  int rc = sbx_buf_reserve(out, flen, &where, err);
  if (rc < 0) return rc;
  sbx_buf_commit(out, sbx_wire_bulk_encode_into(where, kind, payload, n));
  return 0;
}

/* Which canonical prefix, if any, starts the line. */
static sbx_wire_bulk classify(const char *line, size_t len) {
  if (len < 20 || line[0] != '{' || line[1] != '"') return SBX_BULK_NONE;
  sbx_wire_bulk first, last;
  if (line[2] == 't') {
    first = SBX_BULK_STDOUT;
    last = SBX_BULK_DATA;
  } else if (line[2] == 'v') {
    first = SBX_BULK_REQ_DATA;
    last = SBX_BULK_REQ_STDIN;
  } else {
    return SBX_BULK_NONE;
  }
  for (sbx_wire_bulk k = first; k <= last; k++)
    if (len > prefixes[k].len && memcmp(line, prefixes[k].prefix, prefixes[k].len) == 0) return k;
  return SBX_BULK_NONE;
}

/* Locate the payload of a canonical frame: [*start, *start + *n). The end
 * is found from the back (`"}` then only whitespace), so the payload is not
 * scanned here; a payload holding a quote or a backslash is not canonical,
 * which the base64 decoder notices as a bad character (see not_canonical). */
static bool payload_span(const char *line, size_t len, sbx_wire_bulk kind, size_t *start, size_t *n) {
  size_t s = prefixes[kind].len;
  size_t e = len;
  while (e > s && (line[e - 1] == ' ' || line[e - 1] == '\t' || line[e - 1] == '\r' || line[e - 1] == '\n')) e--;
  if (e < s + 2 || line[e - 1] != '}' || line[e - 2] != '"') return false;
  *start = s;
  *n = e - 2 - s;
  return true;
}

/* After a failed decode: was it another JSON shape rather than bad base64? */
static bool not_canonical(const char *payload, size_t n) {
  return memchr(payload, '"', n) || memchr(payload, '\\', n);
}

int sbx_wire_bulk_decode(const char *line, size_t len, sbx_wire_bulk *kind, void *dst, size_t dst_cap,
                         size_t *out_len, sbx_error *err) {
  sbx_wire_bulk k = classify(line, len);
  size_t s, n;
  if (k == SBX_BULK_NONE || !payload_span(line, len, k, &s, &n)) return 0;
  if (sbx_b64_decoded_max(n) > dst_cap) {
    if (not_canonical(line + s, n)) return 0;
    return sbx_err(err, SBX_E_TOOBIG, "payload of %zu base64 bytes does not fit in %zu", n, dst_cap);
  }
  int rc = sbx_b64_decode(dst, line + s, n, out_len, err);
  if (rc < 0) return not_canonical(line + s, n) ? 0 : rc;
  *kind = k;
  return 1;
}

static int bulk_into_arena(const char *line, size_t len, sbx_wire_bulk *kind, sbx_wire_bytes *bytes,
                           sbx_wire_arena **arena_out) {
  sbx_wire_bulk k = classify(line, len);
  size_t s, n;
  if (k == SBX_BULK_NONE || !payload_span(line, len, k, &s, &n)) return 0;
  sbx_wire_arena *arena = sbxi_arena_new(sbx_b64_decoded_max(n) + 16);
  uint8_t *dst = sbxi_arena_alloc(arena, sbx_b64_decoded_max(n) + 1);
  size_t outlen;
  if (sbx_b64_decode(dst, line + s, n, &outlen, NULL) < 0) {
    sbxi_arena_free(arena);
    return 0;
  }
  *kind = k;
  *bytes = (sbx_wire_bytes){dst, outlen};
  *arena_out = arena;
  return 1;
}

int sbxi_bulk_decode_req(const char *line, size_t len, sbx_wire_req *out) {
  sbx_wire_bulk k;
  sbx_wire_bytes bytes;
  if (len < 20 || line[2] != 'v' || !bulk_into_arena(line, len, &k, &bytes, &out->arena)) return 0;
  if (k == SBX_BULK_REQ_DATA) {
    out->op = SBX_OP_DATA;
    out->u.data.data = bytes;
  } else {
    out->op = SBX_OP_STDIN;
    out->u.stdin_.data = bytes;
  }
  return 1;
}

int sbxi_bulk_decode_resp(const char *line, size_t len, sbx_wire_resp *out) {
  sbx_wire_bulk k;
  sbx_wire_bytes bytes;
  if (len < 20 || line[2] != 't' || !bulk_into_arena(line, len, &k, &bytes, &out->arena)) return 0;
  out->type = k == SBX_BULK_STDOUT ? SBX_RESP_STDOUT : k == SBX_BULK_STDERR ? SBX_RESP_STDERR : SBX_RESP_DATA;
  out->u.data.data = bytes; /* stdout_, stderr_ and data share one layout */
  return 1;
}
