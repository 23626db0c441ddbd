/* tests/fuzz/fuzz_mcp.c - libFuzzer target for `sbxctl mcp`'s JSON-RPC
 * reader: the input is what an agent writes on the server's stdin.
 *
 * mcp_serve_bytes runs the server's own line splitting, JSON-RPC checks,
 * protocol methods and tool argument checks over the bytes, then waits for
 * the tool calls they started. Those calls go to a client whose node is a
 * Unix socket path in the harness's temp dir where nothing listens, so each
 * fails at once without touching anything outside the process. Answers are
 * written to a pipe the harness drains on a thread. Checked: every answer is
 * one line of JSON, an object with "jsonrpc":"2.0" and an "id", and exactly
 * one of "result" and "error". */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>

#include <jansson.h>

#include <sandbox/sandbox.h>

#include "fuzz_util.h"
#include "mcp.h"

typedef struct {
  int fd;
  char *buf;
  size_t len, alloc;
} answers;

static void *collect(void *arg) {
  answers *a = arg;
  for (;;) {
    if (a->alloc - a->len < 65536) {
      a->alloc = a->alloc ? a->alloc * 2 : 131072;
      a->buf = realloc(a->buf, a->alloc);
      FUZZ_CHECK(a->buf != NULL, "out of memory");
    }
    ssize_t n = read(a->fd, a->buf + a->len, a->alloc - a->len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return NULL;
    a->len += (size_t)n;
  }
}

static void check_answer(const char *line, size_t len) {
  json_error_t je;
  json_t *m = json_loadb(line, len, 0, &je);
  FUZZ_CHECK(m != NULL, "an answer is not JSON: %s: %.*s", je.text, (int)(len > 300 ? 300 : len), line);
  FUZZ_CHECK(json_is_object(m), "an answer is not an object");
  const char *v = json_string_value(json_object_get(m, "jsonrpc"));
  FUZZ_CHECK(v && strcmp(v, "2.0") == 0, "an answer without \"jsonrpc\":\"2.0\"");
  json_t *id = json_object_get(m, "id");
  FUZZ_CHECK(id && (json_is_null(id) || json_is_string(id) || json_is_integer(id)), "an answer with a bad id");
  FUZZ_CHECK(!json_object_get(m, "result") != !json_object_get(m, "error"),
             "an answer needs exactly one of result and error");
  json_decref(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static sbx_client *client;
  if (!client) {
    char addr[4200];
    snprintf(addr, sizeof addr, "unix:%s/nobody-listens", fuzz_tmpdir());
    sbx_client_opts co = SBX_CLIENT_OPTS_INIT(.addr = addr, .connect_timeout_ms = 1000, .request_timeout_ms = 1000);
    sbx_error err;
    FUZZ_CHECK(sbx_client_new(&co, &client, &err) == 0, "client: %s", err.msg);
  }
  int p[2];
  FUZZ_CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
  answers a = {.fd = p[0]};
  pthread_t th;
  FUZZ_CHECK(pthread_create(&th, NULL, collect, &a) == 0, "pthread_create");
  mcp_serve_bytes(client, (const char *)data, size, p[1]);
  close(p[1]);
  pthread_join(th, NULL);
  close(p[0]);

  for (size_t start = 0; start < a.len;) {
    char *nl = memchr(a.buf + start, '\n', a.len - start);
    FUZZ_CHECK(nl != NULL, "the last answer does not end with a newline");
    check_answer(a.buf + start, (size_t)(nl - (a.buf + start)));
    start = (size_t)(nl - a.buf) + 1;
  }
  free(a.buf);
  return 0;
}
