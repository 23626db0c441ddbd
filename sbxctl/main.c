/* sbxctl: dispatch to the local commands (driving libsandbox directly,
 * no daemon) or to the remote ones (sandboxd through the client API). */
#include <stdio.h>
#include <string.h>

#include <sandbox/sandbox.h>

#include "../libsandbox/core/env.h"
#include "local.h"
#include "mcp.h"
#include "remote.h"

static void usage(FILE *f) {
  fprintf(f, "usage: sbxctl [--version] [--help]\n"
             "       sbxctl local run [--template T] [--size S] [--driver D] -- ARGV...\n"
             "       sbxctl mcp [--addr A] [--token T] [--template T]  (MCP server on stdio, docs/mcp.md)\n"
             "       sbxctl [--addr ADDR] [--token TOKEN] [--json] COMMAND [ARGS]  (see below)\n\n");
}

int main(int argc, char **argv) {
  sbxi_env_apply(NULL); /* SBX_B64_SCALAR; cmd_local.c applies the driver's */
  if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
    printf("sbxctl %s\n", sbx_version());
    return 0;
  }
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage(stdout);
    fflush(stdout);
    return sbxctl_remote_main(argc, argv);
  }
  if (argc >= 2 && strcmp(argv[1], "local") == 0) return sbxctl_local_main(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "mcp") == 0) return sbxctl_mcp_main(argc - 1, argv + 1);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  /* everything else, an unknown command too ("did you mean"), is the
   * remote table's */
  return sbxctl_remote_main(argc, argv);
}
