/* examples/version.c - the smallest program using an installed libsandbox.
 *
 * Prints the version of the headers it was compiled against and of the
 * library it runs with (they differ after a library upgrade), then encodes one wire frame with the public
 * codec API and decodes it back. Exits 0 only if the round trip matches.
 *
 * Build against an installed copy with pkg-config only:
 *   cc -std=gnu11 version.c $(pkg-config --cflags --libs sandbox) -o version
 */
#include <stdio.h>
#include <string.h>

#include <sandbox/sandbox.h>

int main(void) {
  printf("libsandbox %s (wire proto %d)\n", sbx_version(), SBX_WIRE_PROTO);
  printf("headers %s (0x%06x), library %s (0x%06x)\n", SBX_VERSION_STRING, (unsigned)SBX_VERSION_NUM,
         sbx_version(), sbx_version_num());
#if SBX_VERSION_CHECK(0, 1, 0)
  /* Features of 0.1.0 and later may be used here. */
#endif
  if (sbx_version_num() < SBX_VERSION_NUM) {
    fprintf(stderr, "libsandbox %s is older than the headers (%s)\n", sbx_version(), SBX_VERSION_STRING);
    return 1;
  }

  sbx_error err = {0};
  sbx_buf frame = SBX_BUF_INIT(1 << 20);
  const char *argv[] = {"echo", "hello"};
  sbx_wire_req req = {.op = SBX_OP_EXEC};
  req.u.exec.argv.items = argv;
  req.u.exec.argv.len = 2;
  req.u.exec.cwd = "/workspace";

  if (sbx_wire_encode_req(&frame, &req, &err) < 0) {
    fprintf(stderr, "encode: %s\n", err.msg);
    sbx_buf_free(&frame);
    return 1;
  }
  printf("frame: %s", frame.ptr); /* the frame ends with its LF */

  sbx_wire_req back;
  int ok = 0;
  if (sbx_wire_decode_req(frame.ptr, frame.len - 1, &back, &err) < 0) {
    fprintf(stderr, "decode: %s\n", err.msg);
  } else {
    ok = back.op == SBX_OP_EXEC && back.u.exec.argv.len == 2 &&
         strcmp(back.u.exec.argv.items[0], "echo") == 0 &&
         strcmp(back.u.exec.argv.items[1], "hello") == 0 && back.u.exec.cwd != NULL &&
         strcmp(back.u.exec.cwd, "/workspace") == 0 && back.u.exec.user == NULL &&
         !back.u.exec.has_detach && back.u.exec.session == NULL;
    sbx_wire_req_free(&back);
  }
  sbx_buf_free(&frame);
  printf("round trip: %s\n", ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
