/* test_sandboxd_http_parse: sandboxd's HTTP/1.1 request parser on byte
 * buffers, through http_parse(), the entry point a fuzzer drives: a table
 * of heads with the status the server answers (0 = accepted), a request
 * fed one byte at a time, and the head cap. The same bytes against a
 * running daemon are in test_sandboxd_http.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http.h"

#define ROOT "Authorization: Bearer root\r\n"

static const struct {
  const char *bytes;
  size_t len;
  int status; /* 0: parsed, -1: needs more bytes */
} cases[] = {
#define C(s, st) {s, sizeof(s) - 1, st}
    C("GET / HTTP/1.1\r\n\r\n", 0),
    C("GET /a?b=c HTTP/1.0\r\nHost: x\r\n\r\n", 0),
    C("POST /v1/claim HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 0),
    C("POST /v1/claim HTTP/1.1\r\nContent-Length: 3\r\n\r\n{}", -1),
    C("GET / HTTP/1.1\r\nX: a\tb \xff\r\n\r\n", 0),
    C("GET / HTTP/1.1\r\nHost: x\r\n", -1),
    /* framing */
    C("GET / HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nContent-Length: 0\r\nContent-length: 5\r\n\r\nhello", 400),
    C("GET / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\nx", 400),
    C("GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nContent-Length: \r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nContent-Length: 1048577\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    /* repeated headers that carry authority */
    C("GET / HTTP/1.1\r\n" ROOT ROOT "\r\n", 400),
    C("GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", 400),
    /* control characters, lone CR and LF, folding */
    C("GET / HTTP/1.1\r\nAuthorization: Bearer root\0junk\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nX: \x1b[0m\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nX: a\nY: b\r\n\r\n", 400),
    C("GET / HTTP/1.1\nX: a\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nX\0: a\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nX : a\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\n: a\r\n\r\n", 400),
    C("GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400),
    /* the request line */
    C("GET /\0 HTTP/1.1\r\n\r\n", 400),
    C("GET  / HTTP/1.1\r\n\r\n", 400),
    C("GET / HTTP/1.1 \r\n\r\n", 400),
    C("GET x HTTP/1.1\r\n\r\n", 400),
    C("GET / HTTP/2.0\r\n\r\n", 400),
    C("G\x01T / HTTP/1.1\r\n\r\n", 400),
    C("AVERYLONGMETHODNAME / HTTP/1.1\r\n\r\n", 400),
    C("\r\n\r\n", 400),
#undef C
};

static void test_table(void **state) {
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    size_t used;
    int st;
    struct http_req *r = http_parse(cases[i].bytes, cases[i].len, &used, &st);
    int got = r ? 0 : st == 0 ? -1 : st;
    if (got != cases[i].status) fprintf(stderr, "case %zu: %d, want %d\n", i, got, cases[i].status);
    assert_int_equal(got, cases[i].status);
    if (r) assert_int_equal(used, cases[i].len);
    http_req_free(r);
  }
}

static void test_fields(void **state) {
  const char req[] = "POST /v1/x?a=1%2F2 HTTP/1.1\r\nHost: h\r\nX-Pad:  v  \r\n" ROOT
                     "Content-Length: 4\r\n\r\nbodyGET / HTTP/1.1\r\n\r\n";
  size_t used;
  int st;
  struct http_req *r = http_parse(req, sizeof req - 1, &used, &st);
  assert_non_null(r);
  assert_string_equal(r->method, "POST");
  assert_string_equal(r->path, "/v1/x");
  char q[16];
  assert_string_equal(http_query(r, "a", q, sizeof q), "1/2");
  assert_string_equal(http_header(r, "x-pad"), "v");
  assert_string_equal(http_header(r, "authorization"), "Bearer root");
  assert_int_equal(r->body_len, 4);
  assert_memory_equal(r->body, "body", 4);
  assert_true(r->keep_alive);
  /* The pipelined request after the body is left for the next call. */
  assert_int_equal(used, sizeof req - 1 - strlen("GET / HTTP/1.1\r\n\r\n"));
  http_req_free(r);
}

/* Fed one byte more each time: nothing until the last byte, then the whole
 * request, as the server sees it arrive in pieces. */
static void test_bytewise(void **state) {
  const char req[] = "PUT /v1/pools HTTP/1.1\r\n" ROOT "Content-Length: 2\r\n\r\n[]";
  for (size_t n = 0; n < sizeof req - 1; n++) {
    size_t used;
    int st;
    assert_null(http_parse(req, n, &used, &st));
    assert_int_equal(st, 0);
  }
  size_t used;
  int st;
  struct http_req *r = http_parse(req, sizeof req - 1, &used, &st);
  assert_non_null(r);
  assert_int_equal(used, sizeof req - 1);
  http_req_free(r);
}

/* A head that does not end within HTTP_HEAD_MAX is 431, and so are too
 * many fields. */
static void test_caps(void **state) {
  size_t n = HTTP_HEAD_MAX + 16;
  char *big = malloc(n);
  memset(big, 'a', n);
  memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
  size_t used;
  int st;
  assert_null(http_parse(big, n, &used, &st));
  assert_int_equal(st, 431);
  free(big);
  char many[(HTTP_MAX_HEADERS + 2) * 8 + 64];
  size_t w = (size_t)snprintf(many, sizeof many, "GET / HTTP/1.1\r\n");
  for (int i = 0; i <= HTTP_MAX_HEADERS; i++) w += (size_t)snprintf(many + w, sizeof many - w, "X%d: a\r\n", i % 10);
  w += (size_t)snprintf(many + w, sizeof many - w, "\r\n");
  assert_null(http_parse(many, w, &used, &st));
  assert_int_equal(st, 431);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_fields),
      cmocka_unit_test(test_bytewise),
      cmocka_unit_test(test_caps),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
