/* http_parse.c - the HTTP/1.1 request parser, on byte buffers.
 *
 * sandboxd has its own HTTP/1.1 server on purpose: libevent 2.1's evhttp
 * cannot hand a connection off cleanly after a 101 (the agent connection
 * goes to silkd with the exact 101 bytes and whatever the client pipelined
 * behind its head), and its one connection timeout would also cut pending
 * claims. Owning the parser means owning its strictness (RFC 9112): the
 * bytes that two parsers could read differently are refused, not guessed
 * at, because a front proxy reads them too.
 *
 * Nothing here touches a socket, so a fuzzer can drive http_parse() on a
 * buffer; the server (http.c) calls http_parse_head() on the head it has
 * read and takes the body itself. */
#include <string.h>
#include <strings.h>

#include <sandbox/core.h>

#include "http.h"

void http_req_free(struct http_req *r) {
  if (!r) return;
  sbx_free(r->path);
  sbx_free(r->query);
  for (size_t i = 0; i < r->nheaders; i++) {
    sbx_free(r->headers[i].name);
    sbx_free(r->headers[i].value);
  }
  sbx_free(r->body);
  sbx_free(r);
}

bool http_token_in_list(const char *list, const char *tok) {
  size_t tl = strlen(tok);
  const char *p = list;
  while (*p) {
    while (*p == ' ' || *p == '\t' || *p == ',') p++;
    const char *e = p;
    while (*e && *e != ',') e++;
    const char *t = e;
    while (t > p && (t[-1] == ' ' || t[-1] == '\t')) t--;
    if ((size_t)(t - p) == tl && strncasecmp(p, tok, tl) == 0) return true;
    p = e;
  }
  return false;
}

/* tchar (RFC 9110 §5.6.2): what a method and a field name are made of. */
static bool is_tchar(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* A field value byte: VCHAR, obs-text, SP or HTAB; never NUL, CR, LF or
 * another control character (RFC 9110 §5.5). */
static bool is_value_char(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

/* A request-target byte: VCHAR or obs-text, no space, no control. */
static bool is_target_char(unsigned char c) { return c > 0x20 && c != 0x7f; }

/* The next line of [p, end): its length without CRLF, or -1 when it does
 * not end in CRLF or holds a lone CR or LF. */
static long next_line(const char *p, const char *end) {
  const char *lf = memchr(p, '\n', (size_t)(end - p));
  if (!lf || lf == p || lf[-1] != '\r') return -1;
  if (memchr(p, '\r', (size_t)(lf - 1 - p))) return -1;
  return (long)(lf - 1 - p);
}

static bool name_is(const char *name, size_t len, const char *want) {
  return strlen(want) == len && strncasecmp(name, want, len) == 0;
}

/* METHOD SP /target SP HTTP/1.x */
static int parse_request_line(struct http_req *r, const char *l, size_t n) {
  size_t i = 0;
  while (i < n && is_tchar((unsigned char)l[i])) i++;
  if (i == 0 || i >= sizeof r->method || i == n || l[i] != ' ') return -1;
  memcpy(r->method, l, i);
  const char *t = l + i + 1;
  size_t tl = 0;
  while (t + tl < l + n && is_target_char((unsigned char)t[tl])) tl++;
  if (tl == 0 || t[0] != '/' || t + tl == l + n || t[tl] != ' ') return -1;
  const char *v = t + tl + 1;
  size_t vl = (size_t)(l + n - v);
  if (vl != 8 || memcmp(v, "HTTP/1.", 7) != 0 || (v[7] != '0' && v[7] != '1')) return -1;
  r->http10 = v[7] == '0';
  const char *q = memchr(t, '?', tl);
  if (q) r->query = sbx_strndup(q + 1, tl - (size_t)(q + 1 - t));
  r->path = sbx_strndup(t, q ? (size_t)(q - t) : tl);
  return 0;
}

/* Headers that must appear at most once: a second Content-Length or
 * Authorization is how one request hides another (or another token). */
static const char *const single[] = {"Content-Length", "Authorization", "Host", "Transfer-Encoding"};

/* name: OWS value OWS, appended to r; 0, or the status with *why. */
static int parse_field(struct http_req *r, const char *l, size_t n, const char **why) {
  *why = "malformed request";
  size_t i = 0;
  while (i < n && is_tchar((unsigned char)l[i])) i++;
  /* Also refuses obs-fold (a line starting with whitespace), whitespace
   * before the colon and any control character in the name. */
  if (i == 0 || i == n || l[i] != ':') return 400;
  const char *v = l + i + 1, *ve = l + n;
  for (const char *p = v; p < ve; p++)
    if (!is_value_char((unsigned char)*p)) return 400;
  while (v < ve && (*v == ' ' || *v == '\t')) v++;
  while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
  for (size_t k = 0; k < sizeof single / sizeof *single; k++)
    if (name_is(l, i, single[k]) && http_header(r, single[k])) {
      *why = "duplicate header";
      return 400;
    }
  if (r->nheaders == HTTP_MAX_HEADERS) {
    *why = "too many header fields";
    return 431;
  }
  r->headers[r->nheaders].name = sbx_strndup(l, i);
  r->headers[r->nheaders].value = sbx_strndup(v, (size_t)(ve - v));
  r->nheaders++;
  return 0;
}

/* Content-Length is 1*DIGIT and at most the body cap; no body is sent
 * with Transfer-Encoding here, and the two together are a smuggling
 * attempt (RFC 9112 §6.3): both are refused. */
static int parse_framing(struct http_req *r, const char **why) {
  *why = "invalid request body";
  if (http_header(r, "Transfer-Encoding")) return 400;
  const char *cl = http_header(r, "Content-Length");
  if (!cl) return 0;
  size_t v = 0;
  if (!*cl) return 400;
  for (const char *p = cl; *p; p++) {
    if (*p < '0' || *p > '9') return 400;
    v = v * 10 + (size_t)(*p - '0');
    /* Over the cap: 400, not 413 (spec §3.2). */
    if (v > HTTP_BODY_MAX) return 400;
  }
  r->content_length = v;
  return 0;
}

/* The request line, then fields up to the blank line, which must end the
 * buffer: 0, or the status with *why. */
static int parse_lines(struct http_req *r, const char *p, const char *end, const char **why) {
  long n = next_line(p, end);
  if (n < 0 || parse_request_line(r, p, (size_t)n) < 0) return 400;
  p += n + 2;
  for (;;) {
    n = next_line(p, end);
    if (n < 0) return 400;
    if (n == 0) break;
    int st = parse_field(r, p, (size_t)n, why);
    if (st) return st;
    p += n + 2;
  }
  *why = "malformed request";
  return p + 2 == end ? 0 : 400;
}

int http_parse_head(const char *buf, size_t len, struct http_req **out, const char **why) {
  *out = NULL;
  *why = "malformed request";
  if (len > HTTP_HEAD_MAX) {
    *why = "request head too large";
    return 431;
  }
  struct http_req *r = sbx_calloc(1, sizeof *r);
  int st = parse_lines(r, buf, buf + len, why);
  if (!st) st = parse_framing(r, why);
  if (st) {
    http_req_free(r);
    return st;
  }
  const char *conn = http_header(r, "Connection");
  r->keep_alive =
      r->http10 ? (conn && http_token_in_list(conn, "keep-alive")) : !(conn && http_token_in_list(conn, "close"));
  *out = r;
  return 0;
}

struct http_req *http_parse(const char *buf, size_t len, size_t *used, int *status) {
  *used = 0;
  *status = 0;
  size_t scan = len < HTTP_HEAD_MAX ? len : HTTP_HEAD_MAX;
  const char *e = memmem(buf, scan, "\r\n\r\n", 4);
  if (!e) {
    if (len >= HTTP_HEAD_MAX) *status = 431;
    return NULL;
  }
  size_t hlen = (size_t)(e - buf) + 4;
  struct http_req *r;
  const char *why;
  *status = http_parse_head(buf, hlen, &r, &why);
  if (*status) return NULL;
  if (len - hlen < r->content_length) {
    http_req_free(r);
    return NULL;
  }
  r->body = sbx_malloc(r->content_length + 1);
  memcpy(r->body, buf + hlen, r->content_length);
  r->body[r->content_length] = '\0';
  r->body_len = r->content_length;
  *used = hlen + r->content_length;
  return r;
}

const char *http_header(const struct http_req *req, const char *name) {
  for (size_t i = 0; i < req->nheaders; i++)
    if (strcasecmp(req->headers[i].name, name) == 0) return req->headers[i].value;
  return NULL;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

const char *http_query(const struct http_req *req, const char *name, char *buf, size_t buflen) {
  if (!req->query) return NULL;
  size_t nl = strlen(name);
  const char *p = req->query;
  while (*p) {
    const char *e = strchr(p, '&');
    if (!e) e = p + strlen(p);
    if ((size_t)(e - p) >= nl && strncmp(p, name, nl) == 0 && (p[nl] == '=' || p + nl == e)) {
      const char *v = p[nl] == '=' ? p + nl + 1 : e;
      size_t w = 0;
      while (v < e && w + 1 < buflen) {
        if (*v == '%' && e - v >= 3 && hexval(v[1]) >= 0 && hexval(v[2]) >= 0) {
          buf[w++] = (char)(hexval(v[1]) * 16 + hexval(v[2]));
          v += 3;
        } else {
          buf[w++] = *v == '+' ? ' ' : *v;
          v++;
        }
      }
      buf[w] = '\0';
      return buf;
    }
    p = *e ? e + 1 : e;
  }
  return NULL;
}
