/* Internals shared by the files of libsandbox/client. */
#ifndef SBX_CLIENT_PRIV_H
#define SBX_CLIENT_PRIV_H

#include <pthread.h>

#include <jansson.h>

#include <sandbox/client.h>

#include "core/opts.h"

#define CLIENT_PARK_MAX 8
#define CLIENT_PARK_IDLE_NS (30ull * 1000 * 1000 * 1000)
#define CLIENT_BODY_CAP (16u * 1024 * 1024) /* control-plane answers */
#define AGENT_PENDING_CAP (256u * 1024) /* bytes after a 101 head; the agent read buffer */

struct sbx_client {
  sbx_addr entry;
  char *token; /* node token; NULL in open mode */
  int connect_timeout_ms, request_timeout_ms, claim_timeout_ms, agent_timeout_ms;
  pthread_mutex_t lock; /* serializes the curl handle */
  void *curl;           /* CURL *, reused for keep-alive */
  char *tls_ca_file;    /* NULL = the system's trust store */
  bool tls_insecure;
  void *ssl_ctx; /* SSL_CTX * for the data plane, made on first use */
};

typedef struct parked {
  sbx_agent *agent;
  uint64_t since_ns;
} parked;

struct sbx_sandbox {
  sbx_client *client;
  char *id, *token;
  sbx_addr owner;
  char owner_origin[SBX_ADDR_HOST_MAX + 32];
  char deadline[64];
  pthread_mutex_t lock; /* guards the fields below */
  parked park[CLIENT_PARK_MAX];
  size_t nparked;
  int proto;      /* 0 = unknown yet, else silkd's proto from `info` */
  uint64_t dials; /* fresh connections made */
};

/* ---- http.c ---- */
/* One control-plane request to node. body (JSON) may be NULL. The answer
 * body goes to resp (cap CLIENT_BODY_CAP); *status is the HTTP status.
 * Transport failures return SBX_E_OS/SBX_E_TIMEOUT; HTTP errors are NOT
 * turned into failures here. */
int http_request(sbx_client *c, const sbx_addr *node, const char *method, const char *path, const char *body,
                 const char *token, int timeout_ms, long *status, sbx_buf *resp, sbx_error *err);
/* An API error from a non-2xx answer: "<verb>: <status>: <error text>". */
int http_api_error(sbx_error *err, const char *verb, long status, const char *body, size_t len);
/* Convenience: request and turn a non-2xx status into an API error. */
int http_call(sbx_client *c, const sbx_addr *node, const char *verb, const char *method, const char *path,
              const char *body, const char *token, int timeout_ms, sbx_buf *resp, sbx_error *err);

/* ---- dial.c ---- */
/* Upgrade a fresh connection to the sandbox's agent (or a port when
 * port > 0). For the agent, pipeline_info sends `info` right behind the
 * request head. On success *fd is connected and pending holds bytes that
 * followed the 101 head. */
int dial_upgrade(sbx_sandbox *s, uint16_t port, const void *pipeline, size_t pipeline_len, int *fd,
                 sbx_buf *pending, sbx_error *err);
/* A connection for one RPC: a live parked one or a fresh dial. */
int conn_get(sbx_sandbox *s, sbx_agent **out, sbx_error *err);
/* A fresh connection that will never be parked (long streams). */
int conn_dial(sbx_sandbox *s, sbx_agent **out, sbx_error *err);
/* Give a connection back after an RPC: parked when it is clean and the
 * daemon speaks proto 2, closed otherwise. */
void conn_put(sbx_sandbox *s, sbx_agent *a);
void conn_drop_all(sbx_sandbox *s);

/* The answer to an upgrade request on fd: 0 after a 101 (pending holds the
 * bytes after its head), else the API error of its status and body. */
int dial_read_upgrade(int fd, const char *verb, int timeout_ms, sbx_buf *pending, sbx_error *err);

/* ---- admin.c ---- */
/* A node info answer (GET /v1/info, drain, pools) into out. */
int node_info_parse(const sbx_buf *resp, const char *verb, sbx_node_info *out, sbx_error *err);

/* JSON helpers of the control-plane answers: a string field copied into
 * dst ("" when absent), a PoolKey, and a body that must be an object. */
void sbxi_client_str_field(json_t *o, const char *name, char *dst, size_t cap);
void sbxi_client_key_from(json_t *k, sbx_client_pool_key *key);
json_t *sbxi_client_load(const sbx_buf *b, const char *verb, sbx_error *err);

/* ---- tls.c ---- */
/* TLS over the connected fd (which it takes over, also on failure); *out is
 * a plain stream bridged to it. */
int tls_wrap(sbx_client *c, int fd, const char *host, int timeout_ms, int *out, sbx_error *err);
void tls_client_free(sbx_client *c);

/* ---- sandbox.c ---- */
int sandbox_new(sbx_client *c, const char *id, const char *token, const char *owner, sbx_sandbox **out,
                sbx_error *err);
/* Build an exec request from opts; env pairs are split into *kv (free it). */
int exec_req_from_opts(const sbx_exec_opts *o, sbx_req_exec *req, sbx_wire_kv **kv, sbx_error *err);
int env_to_map(const char *const *env, sbx_wire_map *map, sbx_wire_kv **kv, sbx_error *err);

/* JSON decoding of a claim answer: a ClaimResult, or a Redirect (then
 * *redirect is set and out->id is empty). Internal: the
 * claim call and its tests use it. */
typedef struct sbxi_claim_result {
  char id[64];
  char token[128];
  char deadline[64];
  char owner_addr[300];
  char template_digest[80];
  char from_checkpoint[64];
} sbxi_claim_result;
typedef struct sbxi_redirect {
  char **addrs; /* sbx_free each, then the array */
  size_t len;
  bool require_promoted;
} sbxi_redirect;
int sbxi_client_parse_claim(const char *json, size_t len, sbxi_claim_result *out, sbxi_redirect *redirect,
                            sbx_error *err);
void sbxi_redirect_free(sbxi_redirect *r);

/* The tar halves of sbx_sandbox_push_path / pull_path alone (tests). */
int sbxi_tar_pack(const char *local_path, int (*write_cb)(void *ud, const void *p, size_t n), void *ud,
                  sbx_error *err);
int sbxi_tar_unpack(int (*read_cb)(void *ud, const void **p, size_t *n), void *ud, const char *local_dir,
                    sbx_error *err);

#endif
