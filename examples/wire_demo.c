/* examples/wire_demo.c - sbx-wire-demo: a tour of the silkd wire codec.
 *
 * Encodes an exec request and a stdout response, prints both frames, then
 * decodes them back and prints the decoded fields. Also shows the bulk fast
 * path, which moves a payload between the caller's buffer and base64 on the
 * wire without building a JSON tree. Exits non-zero on any mismatch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sandbox/sandbox.h>

static int fail(const char *what, const sbx_error *err) {
  fprintf(stderr, "sbx-wire-demo: %s: %s (%s)\n", what, err->msg, sbx_code_name(err->code));
  return 1;
}

/* A frame from the encoder ends with LF; decoders take it without. */
static size_t line_len(const sbx_buf *b) {
  return b->len > 0 && b->ptr[b->len - 1] == '\n' ? b->len - 1 : b->len;
}

int main(void) {
  sbx_error err = {0};
  int rc = 1;
  sbx_buf req_frame = SBX_BUF_INIT(SBX_WIRE_FRAME_CAP + 1);
  sbx_buf resp_frame = SBX_BUF_INIT(SBX_WIRE_FRAME_CAP + 1);
  sbx_wire_req req_back;
  sbx_wire_resp resp_back;
  bool have_req = false, have_resp = false;

  printf("sbx-wire-demo: libsandbox %s, silkd wire v1 proto %d\n\n", sbx_version(), SBX_WIRE_PROTO);

  /* 1. an exec request: run python3 in /workspace with one env var */
  const char *argv[] = {"python3", "-c", "print(40+2)"};
  sbx_wire_kv env[] = {{"PYTHONUNBUFFERED", "1"}};
  sbx_wire_req req = {.op = SBX_OP_EXEC};
  req.u.exec.argv = (sbx_wire_strv){argv, 3};
  req.u.exec.cwd = "/workspace";
  req.u.exec.env = (sbx_wire_map){env, 1, true};
  req.u.exec.has_detach = true;
  req.u.exec.detach = false;
  if (sbx_wire_encode_req(&req_frame, &req, &err) < 0) { rc = fail("encode exec", &err); goto out; }

  /* 2. the stdout response its process would produce */
  static const char out_bytes[] = "42\n";
  sbx_wire_resp resp = {.type = SBX_RESP_STDOUT};
  resp.u.stdout_.data = (sbx_wire_bytes){(uint8_t *)out_bytes, sizeof out_bytes - 1};
  if (sbx_wire_encode_resp(&resp_frame, &resp, &err) < 0) { rc = fail("encode stdout", &err); goto out; }

  printf("request frame  (%zu bytes): %s", req_frame.len, req_frame.ptr);
  printf("response frame (%zu bytes): %s\n", resp_frame.len, resp_frame.ptr);

  /* 3. decode both back */
  if (sbx_wire_decode_req(req_frame.ptr, line_len(&req_frame), &req_back, &err) < 0) {
    rc = fail("decode exec", &err);
    goto out;
  }
  have_req = true;
  const sbx_req_exec *x = &req_back.u.exec;
  printf("decoded request:\n  op      = %s\n  argv    =", sbx_wire_op_name(req_back.op));
  for (size_t i = 0; i < x->argv.len; i++) printf(" \"%s\"", x->argv.items[i]);
  printf("\n  cwd     = %s\n  env     =", x->cwd ? x->cwd : "(absent)");
  for (size_t i = 0; i < x->env.len; i++) printf(" %s=%s", x->env.items[i].key, x->env.items[i].value);
  printf("\n  user    = %s\n  detach  = %s\n  session = %s\n  input   = %s\n",
         x->user ? x->user : "(absent)", x->has_detach ? (x->detach ? "true" : "false") : "(absent)",
         x->session ? x->session : "(absent)",
         sbx_wire_req_input_mode(&req_back) == SBX_INPUT_FED ? "fed (stdin frames follow)" : "none");

  if (sbx_wire_decode_resp(resp_frame.ptr, line_len(&resp_frame), &resp_back, &err) < 0) {
    rc = fail("decode stdout", &err);
    goto out;
  }
  have_resp = true;
  const sbx_wire_bytes *d = &resp_back.u.stdout_.data;
  printf("decoded response:\n  type    = %s\n  data    = %zu bytes: \"", sbx_wire_type_name(resp_back.type),
         d->len);
  for (size_t i = 0; i < d->len; i++) {
    if (d->ptr[i] == '\n') fputs("\\n", stdout);
    else putchar(d->ptr[i]);
  }
  printf("\"\n");

  bool same = req_back.op == SBX_OP_EXEC && x->argv.len == 3 && strcmp(x->argv.items[2], argv[2]) == 0 &&
              x->cwd && strcmp(x->cwd, "/workspace") == 0 && x->env.present && x->env.len == 1 &&
              strcmp(x->env.items[0].key, "PYTHONUNBUFFERED") == 0 && x->user == NULL &&
              x->has_detach && !x->detach && x->session == NULL && resp_back.type == SBX_RESP_STDOUT &&
              d->len == 3 && memcmp(d->ptr, out_bytes, 3) == 0;

  /* 4. the bulk fast path decodes the same stdout frame with no JSON tree */
  uint8_t payload[64];
  size_t n = 0;
  sbx_wire_bulk kind = SBX_BULK_NONE;
  int b = sbx_wire_bulk_decode(resp_frame.ptr, line_len(&resp_frame), &kind, payload, sizeof payload, &n, &err);
  if (b < 0) { rc = fail("bulk decode", &err); goto out; }
  printf("bulk fast path: %s, %zu payload bytes\n", b == 1 && kind == SBX_BULK_STDOUT ? "stdout" : "not bulk", n);
  same = same && b == 1 && kind == SBX_BULK_STDOUT && n == 3 && memcmp(payload, out_bytes, 3) == 0;

  printf("\nround trip: %s\n", same ? "ok" : "MISMATCH");
  rc = same ? 0 : 1;
out:
  if (have_req) sbx_wire_req_free(&req_back);
  if (have_resp) sbx_wire_resp_free(&resp_back);
  sbx_buf_free(&req_frame);
  sbx_buf_free(&resp_frame);
  return rc;
}
