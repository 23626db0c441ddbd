/* Lookup (§9.4): ask the entry node whether it owns the sandbox, else ask
 * every peer it knows at once; the first 200 wins and the rest are
 * cancelled. The sandbox token is what authorizes `…/owner`. */
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "client/client_priv.h"

#define LOOKUP_PEERS_MAX 64

/* owner_addr of an `…/owner` answer; empty means the node that answered */
static void owner_from(const char *body, size_t len, const sbx_addr *node, char *owner, size_t owner_len) {
  json_t *j = json_loadb(body ? body : "", len, 0, NULL);
  const char *a = j ? json_string_value(json_object_get(j, "owner_addr")) : NULL;
  if (a && *a) {
    snprintf(owner, owner_len, "%s", a);
  } else {
    sbx_addr_origin(node, owner, owner_len);
  }
  json_decref(j);
}

typedef struct probe {
  CURL *h;
  sbx_addr node;
  sbx_buf body;
  int rc; /* of sbx_buf_add */
} probe;

static size_t probe_body(char *p, size_t size, size_t nmemb, void *ud) {
  probe *pr = ud;
  sbx_error e;
  if (pr->rc == 0) pr->rc = sbx_buf_add(&pr->body, p, size * nmemb, &e);
  return pr->rc == 0 ? size * nmemb : 0;
}

/* Every peer at once through one curl multi handle. 0 with owner set, or
 * SBX_E_NOTFOUND. */
static int ask_peers(sbx_client *c, json_t *peers, const char *id, struct curl_slist *hdrs, char *owner,
                     size_t owner_len) {
  size_t n = json_array_size(peers);
  if (n > LOOKUP_PEERS_MAX) n = LOOKUP_PEERS_MAX;
  probe *pr = sbx_calloc(n ? n : 1, sizeof *pr);
  CURLM *m = curl_multi_init();
  int rc = SBX_E_NOTFOUND;
  for (size_t i = 0; i < n; i++) {
    const char *p = json_string_value(json_array_get(peers, i));
    sbx_error e;
    if (!p || sbx_addr_parse(p, &c->entry, &pr[i].node, &e) < 0 || strcmp(pr[i].node.scheme, "unix") == 0) continue;
    char origin[SBX_ADDR_HOST_MAX + 32], url[SBX_ADDR_HOST_MAX + 256];
    sbx_addr_origin(&pr[i].node, origin, sizeof origin);
    snprintf(url, sizeof url, "%s/v1/sandboxes/%s/owner", origin, id);
    sbx_buf_init(&pr[i].body, 64 * 1024);
    CURL *h = curl_easy_init();
    if (!h) continue;
    pr[i].h = h;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)c->request_timeout_ms);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (c->tls_ca_file) curl_easy_setopt(h, CURLOPT_CAINFO, c->tls_ca_file);
    if (c->tls_insecure) {
      curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, probe_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &pr[i]);
    curl_easy_setopt(h, CURLOPT_PRIVATE, &pr[i]);
    curl_multi_add_handle(m, h);
  }
  int running = 1;
  while (running && rc != 0) {
    if (curl_multi_perform(m, &running) != CURLM_OK) break;
    CURLMsg *msg;
    int left;
    while (rc != 0 && (msg = curl_multi_info_read(m, &left))) {
      if (msg->msg != CURLMSG_DONE || msg->data.result != CURLE_OK) continue;
      probe *p = NULL;
      long status = 0;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&p);
      curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
      if (status == 200 && p && p->rc == 0) {
        owner_from(p->body.ptr, p->body.len, &p->node, owner, owner_len);
        rc = 0;
      }
    }
    if (rc != 0 && running) curl_multi_poll(m, NULL, 0, 1000, NULL);
  }
  /* removing the handles cancels the probes still in flight */
  for (size_t i = 0; i < n; i++) {
    if (pr[i].h) {
      curl_multi_remove_handle(m, pr[i].h);
      curl_easy_cleanup(pr[i].h);
    }
    sbx_buf_free(&pr[i].body);
  }
  curl_multi_cleanup(m);
  sbx_free(pr);
  return rc;
}

int sbx_client_lookup(sbx_client *c, const char *id, const char *token, sbx_sandbox **out, sbx_error *err) {
  sbx_error tmp;
  if (!err) err = &tmp;
  int rc;
  if ((rc = sbx_client_check_header_value("sandbox id", id, id ? strlen(id) : 0, err)) < 0 ||
      (rc = sbx_client_check_header_value("sandbox token", token, token ? strlen(token) : 0, err)) < 0)
    return rc;
  for (const char *p = id; *p; p++) /* it becomes a path segment */
    if (*p == '/' || *p == '?' || *p == '#' || *p == '%' || *p == ' ')
      return sbx_err(err, SBX_E_INVAL, "sandbox id: bad character");
  if (strcmp(c->entry.scheme, "unix") == 0) return sbx_client_attach(c, id, token, NULL, out, err);
  char path[200], owner[SBX_ADDR_HOST_MAX + 32];
  snprintf(path, sizeof path, "/v1/sandboxes/%s/owner", id);
  sbx_buf resp = SBX_BUF_INIT(CLIENT_BODY_CAP);
  rc = http_call(c, &c->entry, "lookup", "GET", path, NULL, token, c->request_timeout_ms, &resp, err);
  if (rc == 0) owner_from(resp.ptr, resp.len, &c->entry, owner, sizeof owner);
  if (rc < 0 && rc == SBX_E_REMOTE && err->detail == 404) {
    /* not here: the peers, with the node token for the list */
    sbx_error perr;
    sbx_buf_reset(&resp);
    rc = http_call(c, &c->entry, "peers", "GET", "/v1/peers", NULL, c->token, c->request_timeout_ms, &resp, &perr);
    json_t *j = rc == 0 ? json_loadb(resp.ptr ? resp.ptr : "", resp.len, 0, NULL) : NULL;
    sbx_buf auth = SBX_BUF_INIT(16384);
    struct curl_slist *hdrs = NULL;
    if (sbx_buf_printf(&auth, &perr, "Authorization: Bearer %s", token) == 0) hdrs = curl_slist_append(NULL, auth.ptr);
    rc = j && hdrs ? ask_peers(c, json_object_get(j, "peers"), id, hdrs, owner, sizeof owner) : SBX_E_NOTFOUND;
    curl_slist_free_all(hdrs);
    sbx_buf_free(&auth);
    json_decref(j);
    if (rc < 0) sbx_err(err, SBX_E_NOTFOUND, "lookup %s: unknown sandbox", id);
  }
  sbx_buf_free(&resp);
  return rc < 0 ? rc : sandbox_new(c, id, token, owner, out, err);
}
