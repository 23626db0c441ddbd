/* claim_exec: claim a sandbox, run python3 in it, check the answer, release.
 *
 *   claim_exec [ADDR]    (default $SANDBOXD_ADDR, else 127.0.0.1:7777;
 *                         node token from $SANDBOXD_TOKEN)
 *
 * Built against the installed library with pkg-config only:
 *   cc claim_exec.c $(pkg-config --cflags --libs sandbox) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sandbox/client.h>

int main(int argc, char **argv) {
  const char *addr = argc > 1 ? argv[1] : getenv("SANDBOXD_ADDR");
  sbx_client_opts opts = SBX_CLIENT_OPTS_INIT(.addr = addr, .token = getenv("SANDBOXD_TOKEN"));
  sbx_client *client;
  sbx_sandbox *sbx;
  sbx_error err;
  if (sbx_client_new(&opts, &client, &err) < 0) {
    fprintf(stderr, "client: %s\n", err.msg);
    return 1;
  }
  sbx_claim_opts claim = SBX_CLAIM_OPTS_INIT(.template_ = "host", .ttl_seconds = 120);
  if (sbx_client_claim(client, &claim, &sbx, &err) < 0) {
    fprintf(stderr, "claim: %s\n", err.msg);
    sbx_client_free(client);
    return 1;
  }
  printf("claimed %s on %s\n", sbx_sandbox_id(sbx), sbx_sandbox_owner(sbx));

  const char *argv_py[] = {"python3", "-c", "print(6*7)", NULL};
  sbx_exec_opts run = SBX_EXEC_OPTS_INIT(.argv = argv_py);
  sbx_buf out = SBX_BUF_INIT(1 << 20);
  int code = -1, status = 1;
  if (sbx_sandbox_run(sbx, &run, &out, NULL, &code, &err) < 0) {
    fprintf(stderr, "exec: %s\n", err.msg);
  } else if (code != 0 || !out.ptr || strcmp(out.ptr, "42\n") != 0) {
    fprintf(stderr, "unexpected: exit %d, output %s\n", code, out.ptr ? out.ptr : "(none)");
  } else {
    printf("python3 says %s", out.ptr);
    status = 0;
  }
  sbx_buf_free(&out);

  if (sbx_sandbox_release(sbx, &err) < 0) {
    fprintf(stderr, "release: %s\n", err.msg);
    status = 1;
  }
  sbx_sandbox_free(sbx);
  sbx_client_free(client);
  return status;
}
