/* util.c - key hashes, times, JSON replies and body decoding. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "sandboxd.h"

void key_hash(const sbx_pool_key *k, char out[33]) {
  char in[SBX_POOL_NAME_MAX + 32];
  int n = snprintf(in, sizeof in, "%s|%s|%s", k->tmpl, k->net, k->size);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  EVP_Digest(in, (size_t)n, md, &mdlen, EVP_sha256(), NULL);
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  out[32] = '\0';
}

int64_t now_unix(void) { return (int64_t)time(NULL); }

void fmt_time(int64_t secs, long nsec, bool ns, char *buf, size_t len) {
  time_t t = (time_t)secs;
  struct tm tm;
  gmtime_r(&t, &tm);
  char base[32];
  strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
  if (ns) snprintf(buf, len, "%s.%09ldZ", base, nsec);
  else snprintf(buf, len, "%sZ", base);
}

void reply_json(struct http_req *req, int status, json_t *body) {
  char *s = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  size_t n = s ? strlen(s) : 0;
  /* A trailing newline keeps curl output readable; JSON ignores it. */
  char *t = sbx_malloc(n + 2);
  if (s) memcpy(t, s, n);
  t[n] = '\n';
  t[n + 1] = '\0';
  free(s);
  http_reply(req, status, "application/json", t, n + 1, NULL);
  sbx_free(t);
}

void reply_error(struct http_req *req, int status, const char *msg) {
  reply_json(req, status, json_pack("{s:s}", "error", msg));
}

json_t *decode_body(struct http_req *req, bool strict) {
  size_t n = req->body_len;
  const char *p = req->body ? req->body : "";
  size_t ws = 0;
  while (ws < n && (p[ws] == ' ' || p[ws] == '\t' || p[ws] == '\r' || p[ws] == '\n')) ws++;
  if (ws == n) return json_object();
  json_error_t je;
  json_t *v = json_loadb(p, n, strict ? JSON_REJECT_DUPLICATES : 0, &je);
  if (!v || !json_is_object(v)) {
    json_decref(v);
    char msg[256];
    snprintf(msg, sizeof msg, "invalid request body%s%s", v || !je.text[0] ? "" : ": ", v ? "" : je.text);
    reply_error(req, 400, msg);
    return NULL;
  }
  return v;
}

json_t *json_string_lossy(const char *p, size_t n) {
  char *t = sbx_malloc(n * 3 + 1);
  json_t *s = json_stringn(t, sbxi_utf8_repair(p, n, t));
  sbx_free(t);
  return s;
}
