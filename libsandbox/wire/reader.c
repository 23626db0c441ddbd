/* Streaming frame reader. Lines wholly inside a fed chunk are handed out in
 * place; only a line split across chunks is copied, into a buffer that is
 * refused growth past the cap. So a peer streaming 100 MB without a LF costs
 * at most cap bytes before it is refused. */
#include <string.h>

#include <sandbox/wire.h>

struct sbx_frame_reader {
  size_t cap;
  const char *chunk;
  size_t chunk_len, chunk_pos;
  char *part; /* the line assembled across chunks */
  size_t part_len, part_alloc;
  bool part_handed_out; /* part was returned: clear it on the next call */
  bool eof;
  bool eof_done;
  bool failed;
};

sbx_frame_reader *sbx_frame_reader_new(size_t cap) {
  sbx_frame_reader *r = sbx_calloc(1, sizeof *r);
  r->cap = cap ? cap : SBX_WIRE_FRAME_CAP;
  return r;
}

void sbx_frame_reader_free(sbx_frame_reader *r) {
  if (!r) return;
  sbx_free(r->part);
  sbx_free(r);
}

void sbx_frame_reader_feed(sbx_frame_reader *r, const void *chunk, size_t n) {
  r->chunk = chunk;
  r->chunk_len = n;
  r->chunk_pos = 0;
}

void sbx_frame_reader_finish(sbx_frame_reader *r) { r->eof = true; }

size_t sbx_frame_reader_pending(const sbx_frame_reader *r) {
  return (r->part_handed_out ? 0 : r->part_len) + (r->chunk_len - r->chunk_pos);
}

bool sbx_frame_reader_at_eof(const sbx_frame_reader *r) { return r->eof; }

static int oversize(sbx_frame_reader *r, sbx_error *err) {
  r->failed = true;
  sbx_free(r->part);
  r->part = NULL;
  r->part_len = r->part_alloc = 0;
  return sbx_err(err, SBX_E_TOOBIG, "frame longer than %zu bytes", r->cap);
}

static void append_part(sbx_frame_reader *r, const char *p, size_t n) {
  if (r->part_len + n > r->part_alloc) {
    size_t a = r->part_alloc ? r->part_alloc : 4096;
    while (a < r->part_len + n) a *= 2;
    if (a > r->cap) a = r->cap;
    r->part = sbx_realloc(r->part, a);
    r->part_alloc = a;
  }
  memcpy(r->part + r->part_len, p, n);
  r->part_len += n;
}

int sbx_frame_reader_next(sbx_frame_reader *r, const char **line, size_t *len, sbx_error *err) {
  if (r->failed) return sbx_err(err, SBX_E_TOOBIG, "frame longer than %zu bytes", r->cap);
  if (r->part_handed_out) {
    r->part_len = 0;
    r->part_handed_out = false;
  }
  if (r->chunk_pos < r->chunk_len) {
    const char *rem = r->chunk + r->chunk_pos;
    size_t n = r->chunk_len - r->chunk_pos;
    const char *nl = memchr(rem, '\n', n);
    if (nl) {
      size_t add = (size_t)(nl - rem);
      if (r->part_len + add > r->cap) return oversize(r, err);
      r->chunk_pos += add + 1;
      if (r->part_len == 0) {
        *line = rem;
        *len = add;
        return 1;
      }
      append_part(r, rem, add);
      *line = r->part;
      *len = r->part_len;
      r->part_handed_out = true;
      return 1;
    }
    if (r->part_len + n > r->cap) return oversize(r, err);
    append_part(r, rem, n);
    r->chunk_pos = r->chunk_len;
  }
  if (r->eof && !r->eof_done) {
    r->eof_done = true;
    if (r->part_len > 0) {
      *line = r->part;
      *len = r->part_len;
      r->part_handed_out = true;
      return 1;
    }
  }
  return 0;
}
