/* Control-plane HTTP/1.1 through libcurl. One easy handle per client keeps
 * connections alive between calls; the mutex makes the client shareable. */
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "client/client_priv.h"

typedef struct {
  sbx_buf *b;
  sbx_error *err;
  int rc;
} sink;

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
  sink *s = ud;
  size_t n = size * nmemb;
  if (s->rc == 0) s->rc = sbx_buf_add(s->b, p, n, s->err);
  return s->rc == 0 ? n : 0; /* 0 aborts the transfer: over the cap */
}

int http_request(sbx_client *c, const sbx_addr *node, const char *method, const char *path, const char *body,
                 const char *token, int timeout_ms, long *status, sbx_buf *resp, sbx_error *err) {
  if (strcmp(node->scheme, "unix") == 0)
    return sbx_err(err, SBX_E_UNSUPPORTED, "%s: no control plane on a unix: address", path);
  if (token && sbx_client_check_header_value("token", token, strlen(token), err) < 0) return SBX_E_INVAL;
  char origin[SBX_ADDR_HOST_MAX + 32];
  sbx_addr_origin(node, origin, sizeof origin);
  sbx_buf url = SBX_BUF_INIT(8192);
  sbx_buf auth = SBX_BUF_INIT(8192);
  int rc = sbx_buf_printf(&url, err, "%s%s", origin, path);
  if (rc == 0 && token) rc = sbx_buf_printf(&auth, err, "Authorization: Bearer %s", token);
  if (rc < 0) goto out;
  sbx_buf_reset(resp);
  sink s = {resp, err, 0};
  struct curl_slist *hdrs = NULL;
  if (token) hdrs = curl_slist_append(hdrs, auth.ptr);
  if (body) hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
  hdrs = curl_slist_append(hdrs, "Expect:"); /* no 100-continue round trip */
  pthread_mutex_lock(&c->lock);
  CURL *h = c->curl;
  curl_easy_reset(h);
  curl_easy_setopt(h, CURLOPT_URL, url.ptr);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  if (c->tls_ca_file) curl_easy_setopt(h, CURLOPT_CAINFO, c->tls_ca_file);
  if (c->tls_insecure) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
  if (body) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
  } else if (strcmp(method, "GET") != 0) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
  }
  CURLcode cc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
  pthread_mutex_unlock(&c->lock);
  curl_slist_free_all(hdrs);
  if (s.rc < 0) {
    rc = s.rc;
    sbx_err_wrap(err, "%s %s", method, path);
  } else if (cc == CURLE_OPERATION_TIMEDOUT) {
    rc = sbx_err(err, SBX_E_TIMEOUT, "%s %s%s: timed out", method, origin, path);
  } else if (cc != CURLE_OK) {
    rc = sbx_err(err, SBX_E_OS, "%s %s%s: %s", method, origin, path, curl_easy_strerror(cc));
  }
out:
  sbx_buf_free(&url);
  sbx_buf_free(&auth);
  return rc;
}

int http_api_error(sbx_error *err, const char *verb, long status, const char *body, size_t len) {
  const char *text = NULL;
  json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
  if (j) text = json_string_value(json_object_get(j, "error"));
  int rc;
  if (text) {
    rc = sbx_err(err, SBX_E_REMOTE, "%s: %ld: %s", verb, status, text);
  } else {
    /* not the JSON error shape (a proxy, an old node): show a bounded, single-line excerpt */
    char snip[160];
    size_t n = 0;
    for (size_t i = 0; body && i < len && n + 1 < sizeof snip; i++) snip[n++] = body[i] < ' ' ? ' ' : body[i];
    snip[n] = 0;
    rc = sbx_err(err, SBX_E_REMOTE, "%s: HTTP %ld%s%s", verb, status, n ? ": " : "", snip);
  }
  if (err) err->detail = (int)status;
  json_decref(j);
  return rc;
}

int http_call(sbx_client *c, const sbx_addr *node, const char *verb, const char *method, const char *path,
              const char *body, const char *token, int timeout_ms, sbx_buf *resp, sbx_error *err) {
  long status = 0;
  int rc = http_request(c, node, method, path, body, token, timeout_ms, &status, resp, err);
  if (rc < 0) {
    sbx_err_wrap(err, "%s", verb);
    return rc;
  }
  if (status < 200 || status > 299) return http_api_error(err, verb, status, resp->ptr, resp->len);
  return 0;
}
