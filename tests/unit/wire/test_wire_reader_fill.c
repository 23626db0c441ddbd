/* The frame reader's fill mode (sbx_frame_reader_space/commit), which silkd
 * reads its sockets with: the same lines as fed mode for any split of the
 * stream into reads, the same cap rule (a line of exactly cap bytes passes,
 * one more byte is refused, and the refusal is sticky), the unterminated
 * last line at end of stream, and a bounded buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <sandbox/wire.h>

/* xorshift: a fixed seed keeps every run identical. */
static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

typedef struct {
  char *data;
  size_t len;
  size_t *line_len; /* each line, without its LF */
  size_t lines;
} stream;

/* Lines of 0..max bytes (some near max), LF-terminated, printable. */
static stream make_stream(size_t lines, size_t max) {
  stream s = {0};
  s.line_len = calloc(lines, sizeof *s.line_len);
  size_t total = 0;
  for (size_t i = 0; i < lines; i++) {
    uint64_t r = next_rand();
    size_t n = r % 4 == 0 ? max - r % 64 : (size_t)(r >> 8) % (max / 8 + 1);
    s.line_len[i] = n;
    total += n + 1;
  }
  s.data = malloc(total);
  size_t o = 0;
  for (size_t i = 0; i < lines; i++) {
    for (size_t k = 0; k < s.line_len[i]; k++) s.data[o++] = (char)('a' + (i + k) % 26);
    s.data[o++] = '\n';
  }
  s.len = total;
  s.lines = lines;
  return s;
}

static void free_stream(stream *s) {
  free(s->data);
  free(s->line_len);
}

/* Push s through a fill-mode reader in reads of random size up to max_read
 * and check every line in order; returns the largest pending count seen. */
static size_t check_fill(const stream *s, size_t max_read, size_t cap) {
  sbx_frame_reader *r = sbx_frame_reader_new(cap);
  size_t pos = 0, line = 0, off = 0, most = 0;
  for (;;) {
    const char *l;
    size_t n;
    sbx_error e;
    int rc;
    while ((rc = sbx_frame_reader_next(r, &l, &n, &e)) == 1) {
      assert_true(line < s->lines);
      assert_int_equal(n, s->line_len[line]);
      assert_memory_equal(l, s->data + off, n);
      off += n + 1;
      line++;
    }
    assert_int_equal(rc, 0);
    if (pos == s->len) break;
    char *where;
    size_t room;
    assert_int_equal(sbx_frame_reader_space(r, 1 + next_rand() % 4096, &where, &room, &e), 0);
    assert_true(room > 0);
    size_t k = 1 + next_rand() % max_read;
    if (k > room) k = room;
    if (k > s->len - pos) k = s->len - pos;
    memcpy(where, s->data + pos, k);
    sbx_frame_reader_commit(r, k);
    pos += k;
    if (sbx_frame_reader_pending(r) > most) most = sbx_frame_reader_pending(r);
  }
  assert_int_equal(line, s->lines);
  assert_int_equal(sbx_frame_reader_pending(r), 0);
  sbx_frame_reader_free(r);
  return most;
}

static void test_fill_matches_stream(void **state) {
  (void)state;
  /* Small lines, reads smaller and larger than a line. */
  stream a = make_stream(2000, 300);
  check_fill(&a, 7, 0);
  check_fill(&a, 1000, 0);
  check_fill(&a, 70000, 0);
  free_stream(&a);
  /* Bulk-sized lines (350 KB) in socket-sized reads. */
  stream b = make_stream(60, 350000);
  check_fill(&b, 212992, 0);
  check_fill(&b, 4096, 0);
  free_stream(&b);
}

static void test_fill_cap(void **state) {
  (void)state;
  enum { CAP = 1000 };
  /* A line of exactly CAP bytes passes. */
  char *line = malloc(CAP + 2);
  memset(line, 'x', CAP + 1);
  line[CAP] = '\n';
  sbx_frame_reader *r = sbx_frame_reader_new(CAP);
  char *where;
  size_t room, n;
  const char *l;
  sbx_error e;
  assert_int_equal(sbx_frame_reader_space(r, CAP + 1, &where, &room, &e), 0);
  memcpy(where, line, CAP + 1);
  sbx_frame_reader_commit(r, CAP + 1);
  assert_int_equal(sbx_frame_reader_next(r, &l, &n, &e), 1);
  assert_int_equal(n, CAP);
  /* CAP + 1 bytes with a LF: refused, and it stays refused. */
  line[CAP] = 'x';
  line[CAP + 1] = '\n';
  assert_int_equal(sbx_frame_reader_space(r, CAP + 2, &where, &room, &e), 0);
  memcpy(where, line, CAP + 2);
  sbx_frame_reader_commit(r, CAP + 2);
  assert_int_equal(sbx_frame_reader_next(r, &l, &n, &e), SBX_E_TOOBIG);
  assert_int_equal(sbx_frame_reader_next(r, &l, &n, &e), SBX_E_TOOBIG);
  assert_int_equal(sbx_frame_reader_space(r, 1, &where, &room, &e), SBX_E_TOOBIG);
  sbx_frame_reader_free(r);
  /* Without a LF, the line is refused as soon as it passes the cap, and
   * the buffer never grew past cap + one read on the way. */
  r = sbx_frame_reader_new(CAP);
  int rc = 0;
  size_t fed = 0;
  while (rc == 0) {
    assert_true(fed <= CAP + 100);
    rc = sbx_frame_reader_space(r, 100, &where, &room, &e);
    if (rc < 0) break;
    assert_true(room <= CAP + 100);
    memset(where, 'y', 100);
    sbx_frame_reader_commit(r, 100);
    fed += 100;
    rc = sbx_frame_reader_next(r, &l, &n, &e);
  }
  assert_int_equal(rc, SBX_E_TOOBIG);
  assert_int_equal(fed, CAP + 100);
  sbx_frame_reader_free(r);
  free(line);
}

static void test_fill_eof_and_trim(void **state) {
  (void)state;
  sbx_frame_reader *r = sbx_frame_reader_new(0);
  char *where;
  size_t room, n;
  const char *l;
  sbx_error e;
  /* Grow the buffer with a large line, then trim it once it is empty. */
  size_t big = 600000;
  assert_int_equal(sbx_frame_reader_space(r, big + 1, &where, &room, &e), 0);
  memset(where, 'z', big);
  where[big] = '\n';
  sbx_frame_reader_commit(r, big + 1);
  assert_int_equal(sbx_frame_reader_next(r, &l, &n, &e), 1);
  assert_int_equal(n, big);
  assert_int_equal(sbx_frame_reader_next(r, &l, &n, &e), 0);
  sbx_frame_reader_trim(r, 65536);
  /* An unterminated last line is a frame at end of stream, then nothing. */
  assert_int_equal(sbx_frame_reader_space(r, 16, &where, &room, &e), 0);
  assert_true(room >= 16);
  memcpy(where, "a\nlast", 6);
  sbx_frame_reader_commit(r, 6);
  assert_int_equal(sbx_frame_reader_next(r, &l, &n, &e), 1);
  assert_int_equal(n, 1);
  assert_int_equal(sbx_frame_reader_next(r, &l, &n, &e), 0);
  assert_int_equal(sbx_frame_reader_pending(r), 4);
  sbx_frame_reader_finish(r);
  assert_true(sbx_frame_reader_at_eof(r));
  assert_int_equal(sbx_frame_reader_next(r, &l, &n, &e), 1);
  assert_int_equal(n, 4);
  assert_memory_equal(l, "last", 4);
  assert_int_equal(sbx_frame_reader_next(r, &l, &n, &e), 0);
  assert_int_equal(sbx_frame_reader_pending(r), 0);
  sbx_frame_reader_free(r);
}

static void test_fill_buffer_bounded(void **state) {
  (void)state;
  /* 350 KB lines in 208 KiB reads: the buffer settles, it does not creep. */
  stream s = make_stream(200, 350000);
  size_t most = check_fill(&s, 212992, 0);
  assert_true(most <= 350000 + 212992 + 1);
  free_stream(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fill_matches_stream),
      cmocka_unit_test(test_fill_cap),
      cmocka_unit_test(test_fill_eof_and_trim),
      cmocka_unit_test(test_fill_buffer_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
