/* Streaming frame reader, in two modes.
 *
 * Fed mode (sbx_frame_reader_feed): lines wholly inside a fed chunk are
 * handed out in place; only a line split across chunks is copied, into a
 * buffer that is refused growth past the cap. So a peer streaming 100 MB
 * without a LF costs at most cap bytes before it is refused.
 *
 * Fill mode (sbx_frame_reader_space/commit): the caller reads straight into
 * the reader's own buffer, so every line is handed out in place. Bulk frames
 * (about 350 KB) are larger than one socket read, and in fed mode each one
 * was copied whole into the assembly buffer; here only the unfinished tail
 * is moved to the front now and then, and the buffer grows instead when that
 * tail would be a large share of it. The buffer never holds more than
 * cap + one read. */
#include <string.h>

#include <sandbox/wire.h>

/* Fill mode starts here and, for large lines, grows to about 8 lines. */
#define FILL_FIRST (64 * 1024)

struct sbx_frame_reader {
  size_t cap;
  /* fed mode */
  const char *chunk;
  size_t chunk_len, chunk_pos;
  char *part; /* the line assembled across chunks */
  size_t part_len, part_alloc;
  bool part_handed_out; /* part was returned: clear it on the next call */
  /* fill mode: buf[start, end) is unread, no LF in buf[start, scan) */
  char *buf;
  size_t alloc, start, end, scan;
  bool filled; /* fill mode in use */
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
  sbx_free(r->buf);
  sbx_free(r);
}

void sbx_frame_reader_feed(sbx_frame_reader *r, const void *chunk, size_t n) {
  r->chunk = chunk;
  r->chunk_len = n;
  r->chunk_pos = 0;
}

void sbx_frame_reader_finish(sbx_frame_reader *r) { r->eof = true; }

size_t sbx_frame_reader_pending(const sbx_frame_reader *r) {
  return (r->part_handed_out ? 0 : r->part_len) + (r->chunk_len - r->chunk_pos) + (r->end - r->start);
}

bool sbx_frame_reader_at_eof(const sbx_frame_reader *r) { return r->eof; }

static int oversize(sbx_frame_reader *r, sbx_error *err) {
  r->failed = true;
  sbx_free(r->part);
  r->part = NULL;
  r->part_len = r->part_alloc = 0;
  sbx_free(r->buf);
  r->buf = NULL;
  r->alloc = r->start = r->end = r->scan = 0;
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

int sbx_frame_reader_space(sbx_frame_reader *r, size_t min, char **where, size_t *avail, sbx_error *err) {
  if (r->failed) return sbx_err(err, SBX_E_TOOBIG, "frame longer than %zu bytes", r->cap);
  if (min == 0) min = 1;
  r->filled = true;
  size_t held = r->end - r->start;
  if (held > r->cap) return oversize(r, err);
  if (held == 0) r->start = r->end = r->scan = 0;
  if (r->alloc - r->end < min) {
    if (held + min <= r->alloc && (held <= r->alloc / 8 || held + min <= r->alloc / 2)) {
      /* A short tail: moving it is cheaper than a bigger buffer. */
      if (held) memmove(r->buf, r->buf + r->start, held);
    } else {
      size_t a = r->alloc ? r->alloc : FILL_FIRST;
      while (a < held + min || held > a / 8) a *= 2;
      if (a > r->cap + min) a = r->cap + min;
      char *nb = sbx_malloc(a);
      if (held) memcpy(nb, r->buf + r->start, held);
      sbx_free(r->buf);
      r->buf = nb;
      r->alloc = a;
    }
    r->scan -= r->start;
    r->start = 0;
    r->end = held;
  }
  *where = r->buf + r->end;
  *avail = r->alloc - r->end;
  return 0;
}

void sbx_frame_reader_commit(sbx_frame_reader *r, size_t n) { r->end += n; }

void sbx_frame_reader_trim(sbx_frame_reader *r, size_t keep) {
  if (r->alloc <= keep || r->end > r->start) return;
  sbx_free(r->buf);
  r->buf = NULL;
  r->alloc = r->start = r->end = r->scan = 0;
}

static int next_filled(sbx_frame_reader *r, const char **line, size_t *len, sbx_error *err) {
  if (r->end > r->scan) {
    const char *nl = memchr(r->buf + r->scan, '\n', r->end - r->scan);
    if (nl) {
      size_t n = (size_t)(nl - (r->buf + r->start));
      if (n > r->cap) return oversize(r, err);
      *line = r->buf + r->start;
      *len = n;
      r->start += n + 1;
      r->scan = r->start;
      return 1;
    }
    r->scan = r->end;
    if (r->end - r->start > r->cap) return oversize(r, err);
  }
  if (r->eof && !r->eof_done) {
    r->eof_done = true;
    if (r->end > r->start) {
      *line = r->buf + r->start;
      *len = r->end - r->start;
      r->start = r->scan = r->end;
      return 1;
    }
  }
  return 0;
}

int sbx_frame_reader_next(sbx_frame_reader *r, const char **line, size_t *len, sbx_error *err) {
  if (r->failed) return sbx_err(err, SBX_E_TOOBIG, "frame longer than %zu bytes", r->cap);
  if (r->filled) return next_filled(r, line, len, err);
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
