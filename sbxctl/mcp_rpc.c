/* sbxctl mcp: reading one line of JSON-RPC 2.0 input into a request, or
 * into the error response it earns.
 *
 * Valid JSON that jansson refuses (an integer beyond 64 bits, a number
 * past the double range, \u0000 in an object key) is still a request with
 * an id: the caller must get an answer to that id, so such input is
 * rewritten into something jansson parses (the number becomes 0.5, the
 * escape U+FFFD), the envelope is read from that, and the request is
 * answered -32602. \u0000 in a string value parses as it is and is refused
 * the same way (every string the tools take is a C string). Only input
 * that is not JSON at all gets -32700 with a null id. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"

enum { TAMED_NUMBER = 1, TAMED_NUL_KEY = 2 };

/* Whether the number token p[0..n) is one jansson refuses: an integer
 * outside int64, or a real that overflows a double. */
static bool number_out_of_range(const char *p, size_t n) {
  char *tok = sbx_strndup(p, n);
  bool integer = !strpbrk(tok, ".eE");
  errno = 0;
  bool out;
  if (integer) {
    (void)strtoll(tok, NULL, 10);
    out = errno == ERANGE;
  } else {
    out = isinf(strtod(tok, NULL));
  }
  sbx_free(tok);
  return out;
}

/* Replace each \u0000 escape in the string body s[0..n) (escape-aware);
 * returns whether there was one. */
static bool unnul(char *s, size_t n) {
  bool any = false;
  for (size_t i = 0; i + 1 < n; i++) {
    if (s[i] != '\\') continue;
    if (s[i + 1] == 'u' && i + 6 <= n && memcmp(s + i + 2, "0000", 4) == 0) {
      memcpy(s + i + 2, "fffd", 4);
      any = true;
    }
    i++; /* skip the escaped character */
  }
  return any;
}

/* The text with refused numbers and NUL keys rewritten (never longer than
 * the input), and what was rewritten in *what; NULL when nothing was. No
 * syntax check: the parse of the result does that. */
static char *tame(const char *in, size_t len, int *what) {
  char *out = sbx_malloc(len + 1);
  size_t o = 0;
  *what = 0;
  for (size_t i = 0; i < len;) {
    char c = in[i];
    if (c == '"') {
      size_t start = o;
      out[o++] = in[i++];
      while (i < len && in[i] != '"') {
        if (in[i] == '\\' && i + 1 < len) out[o++] = in[i++];
        out[o++] = in[i++];
      }
      if (i < len) out[o++] = in[i++];
      size_t j = i;
      while (j < len && in[j] && strchr(" \t\r\n", in[j])) j++;
      if (j < len && in[j] == ':' && o - start >= 2 && unnul(out + start + 1, o - start - 2)) *what |= TAMED_NUL_KEY;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t j = i;
      while (j < len && in[j] && strchr("+-0123456789.eE", in[j])) j++;
      if (number_out_of_range(in + i, j - i)) {
        memcpy(out + o, "0.5", 3); /* not longer: such a token has 5 chars or more */
        o += 3;
        *what |= TAMED_NUMBER;
      } else {
        memcpy(out + o, in + i, j - i);
        o += j - i;
      }
      i = j;
    } else {
      out[o++] = in[i++];
    }
  }
  out[o] = 0;
  if (!*what) {
    sbx_free(out);
    return NULL;
  }
  return out;
}

/* Whether v holds a string with a NUL byte, at any depth. */
static bool has_nul(json_t *v) {
  if (json_is_string(v)) return memchr(json_string_value(v), 0, json_string_length(v)) != NULL;
  size_t i;
  json_t *e;
  const char *k;
  if (json_is_array(v)) json_array_foreach(v, i, e) if (has_nul(e)) return true;
  if (json_is_object(v)) json_object_foreach(v, k, e) if (has_nul(e)) return true;
  return false;
}

json_t *mcp_rpc_error(json_t *id, int code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_t *jmsg = mcp_json_text(msg, strlen(msg), NULL);
  return json_pack("{s:s,s:O,s:{s:i,s:o}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error", "code", code,
                   "message", jmsg);
}

static bool is_str(json_t *v, const char *want) {
  return json_is_string(v) && json_string_length(v) == strlen(want) && strcmp(json_string_value(v), want) == 0;
}

void mcp_rpc_read(const char *line, size_t len, mcp_rpc_msg *m) {
  memset(m, 0, sizeof *m);
  json_error_t je;
  int tamed = 0;
  m->msg = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
  if (!m->msg) {
    char *t = tame(line, len, &tamed);
    if (t) m->msg = json_loads(t, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    sbx_free(t);
  }
  if (!m->msg) {
    m->reply = mcp_rpc_error(NULL, MCP_RPC_PARSE, "Parse error: %s (line %d, column %d)", je.text, je.line, je.column);
    return;
  }
  json_t *msg = m->msg, *id = json_object_get(msg, "id");
  if (!json_is_object(msg)) {
    m->reply = mcp_rpc_error(NULL, MCP_RPC_INVALID, "Invalid Request: %s",
                             json_is_array(msg) ? "batches are not supported, send one message per line"
                                                : "a message must be a JSON object");
    return;
  }
  if (id && !json_is_string(id) && !json_is_integer(id)) {
    m->reply = mcp_rpc_error(NULL, MCP_RPC_INVALID, "Invalid Request: \"id\" must be a string or an integer%s",
                             tamed & TAMED_NUMBER ? " (within 64 bits)" : "");
    return;
  }
  if (!is_str(json_object_get(msg, "jsonrpc"), "2.0")) {
    if (id) m->reply = mcp_rpc_error(id, MCP_RPC_INVALID, "Invalid Request: \"jsonrpc\" must be \"2.0\"");
    return;
  }
  json_t *jm = json_object_get(msg, "method");
  if (!jm) {
    /* a response to a request of ours: we send none, so it is dropped */
    if (!json_object_get(msg, "result") && !json_object_get(msg, "error"))
      m->reply = mcp_rpc_error(id, MCP_RPC_INVALID, "Invalid Request: no \"method\"");
    return;
  }
  if (!json_is_string(jm) || memchr(json_string_value(jm), 0, json_string_length(jm))) {
    m->reply = mcp_rpc_error(id, MCP_RPC_INVALID, "Invalid Request: \"method\" must be a string%s",
                             json_is_string(jm) ? " without \\u0000" : "");
    return;
  }
  m->method = json_string_value(jm);
  m->id = id;
  if (!id) return; /* notifications: initialized, cancelled, ... need no answer */
  json_t *params = json_object_get(msg, "params");
  if (params && json_is_null(params)) params = NULL;
  if (params && !json_is_object(params)) {
    m->reply = mcp_rpc_error(id, MCP_RPC_PARAMS, "Invalid params: \"params\" must be an object");
  } else if (tamed & TAMED_NUMBER) {
    m->reply = mcp_rpc_error(id, MCP_RPC_PARAMS,
                             "Invalid params: a number is out of range (integers must fit in 64 bits)");
  } else if ((tamed & TAMED_NUL_KEY) || has_nul(params)) {
    m->reply = mcp_rpc_error(id, MCP_RPC_PARAMS, "Invalid params: a string holds \\u0000, which no tool accepts");
  }
  if (m->reply) return;
  m->params = params ? params : (m->empty = json_object());
}

void mcp_rpc_msg_free(mcp_rpc_msg *m) {
  json_decref(m->reply);
  json_decref(m->empty);
  json_decref(m->msg);
  memset(m, 0, sizeof *m);
}
