/* fork_checkpoint: the lifecycle calls of the client, one each: claim,
 * write a file, checkpoint, fork into 3 children, branch the checkpoint,
 * hibernate and wake; every child and branch sees the file. Everything
 * made is released at the end, and the checkpoint deleted.
 *
 *   fork_checkpoint [ADDR]   (default $SANDBOXD_ADDR, else 127.0.0.1:7777;
 *                             node token from $SANDBOXD_TOKEN)
 *
 * Built against the installed library with pkg-config only:
 *   cc fork_checkpoint.c $(pkg-config --cflags --libs sandbox) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sandbox/client.h>

/* The file's content in s ("" when it cannot be read). */
static void cat(sbx_sandbox *s, char *buf, size_t cap) {
  const char *argv[] = {"cat", "/root/note", NULL};
  sbx_exec_opts run = SBX_EXEC_OPTS_INIT(.argv = argv);
  sbx_buf out = SBX_BUF_INIT(4096);
  int code = -1;
  sbx_error err;
  buf[0] = '\0';
  if (sbx_sandbox_run(s, &run, &out, NULL, &code, &err) == 0 && code == 0 && out.ptr)
    snprintf(buf, cap, "%s", out.ptr);
  sbx_buf_free(&out);
}

static int done(sbx_sandbox *s, int status) {
  sbx_error err;
  if (sbx_sandbox_release(s, &err) < 0) status = 1;
  sbx_sandbox_free(s);
  return status;
}

int main(int argc, char **argv) {
  const char *addr = argc > 1 ? argv[1] : getenv("SANDBOXD_ADDR");
  sbx_client_opts opts = SBX_CLIENT_OPTS_INIT(.addr = addr, .token = getenv("SANDBOXD_TOKEN"));
  sbx_client *client;
  sbx_sandbox *parent;
  sbx_error err;
  if (sbx_client_new(&opts, &client, &err) < 0) {
    fprintf(stderr, "client: %s\n", err.msg);
    return 1;
  }
  sbx_claim_opts claim = SBX_CLAIM_OPTS_INIT(.template_ = "host", .ttl_seconds = 120);
  if (sbx_client_claim(client, &claim, &parent, &err) < 0) {
    fprintf(stderr, "claim: %s\n", err.msg);
    sbx_client_free(client);
    return 1;
  }
  int status = 0;
  const char *write_argv[] = {"sh", "-c", "echo hello > /root/note", NULL};
  sbx_exec_opts w = SBX_EXEC_OPTS_INIT(.argv = write_argv);
  int code = -1;
  char buf[64];
  sbx_checkpoint ck = {0};
  if (sbx_sandbox_run(parent, &w, NULL, NULL, &code, &err) < 0 || code != 0 ||
      sbx_sandbox_checkpoint(parent, "example", &ck, NULL, &err) < 0) {
    fprintf(stderr, "write or checkpoint: %s\n", err.msg);
    sbx_client_free(client);
    return done(parent, 1);
  }
  printf("checkpoint %s of %s\n", ck.id, sbx_sandbox_id(parent));

  sbx_fork_opts fo = SBX_FORK_OPTS_INIT(.count = 3);
  sbx_sandbox **kids = NULL;
  size_t n = 0;
  char *json = NULL;
  if (sbx_sandbox_fork(parent, &fo, &kids, &n, &json, &err) < 0) {
    fprintf(stderr, "fork: %s\n", err.msg);
    status = 1;
  } else {
    printf("fork: %s\n", json);
    for (size_t i = 0; i < n; i++) {
      cat(kids[i], buf, sizeof buf);
      printf("  child %s sees %s", sbx_sandbox_id(kids[i]), buf[0] ? buf : "nothing\n");
      if (strcmp(buf, "hello\n") != 0) status = 1;
      status = done(kids[i], status);
    }
    sbx_free(kids);
    sbx_free(json);
  }

  sbx_sandbox *branch;
  sbx_branch_opts bo = SBX_BRANCH_OPTS_INIT(.ttl_seconds = 60);
  if (sbx_client_branch(client, ck.id, &bo, &branch, NULL, &err) < 0) {
    fprintf(stderr, "branch: %s\n", err.msg);
    status = 1;
  } else {
    cat(branch, buf, sizeof buf);
    printf("branch %s sees %s", sbx_sandbox_id(branch), buf[0] ? buf : "nothing\n");
    if (strcmp(buf, "hello\n") != 0) status = 1;
    status = done(branch, status);
  }

  if (sbx_sandbox_hibernate(parent, &err) < 0 || sbx_sandbox_wake(parent, &err) < 0) {
    fprintf(stderr, "hibernate/wake: %s\n", err.msg);
    status = 1;
  }
  if (sbx_client_checkpoint_delete(client, ck.id, &err) < 0) status = 1;
  status = done(parent, status);
  sbx_client_free(client);
  printf("%s\n", status ? "FAILED" : "ok");
  return status;
}
