/* Encode -> decode identity for every op and response type, with every
 * optional member present and with each absent; encoder rules (tag first,
 * omissions, escaping, lossy UTF-8, the cap). The values are generated from
 * the schema tables so a new field is covered without a new test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sandbox/wire.h>

#include "fixtures.h"
#include "wire/schema.h"

static const char *sample_strv[] = {"sh", "-c", "echo \"hi\"\n\t\\ \xc3\xa9"};
static sbx_wire_kv sample_kv[] = {{"A", "1"}, {"PATH_X", "/usr/bin:/bin"}};
static uint8_t sample_bytes[] = {0, 1, 2, 0xfe, 0xff, 'x', '\n'};

/* Fill one struct from its table: required members always; optional ones
 * when with_optional. Nested arrays get two elements. */
static void fill(const wire_desc *desc, char *base, bool with_optional, int salt) {
  for (unsigned i = 0; i < desc->nfields; i++) {
    const wire_field *f = &desc->fields[i];
    bool required = (f->flags & FF_REQUIRED) || f->type == FT_OBJV;
    if (!required && !with_optional && !(f->flags & FF_IFF_EXITED)) continue;
    void *v = base + f->off;
    switch ((field_type)f->type) {
    case FT_STR: *(const char **)v = (f->flags & FF_REQUIRED) ? "value/\"req\"" : "opt \xe2\x82\xac"; break;
    case FT_STRV: *(sbx_wire_strv *)v = (sbx_wire_strv){sample_strv, 3}; break;
    case FT_MAP: *(sbx_wire_map *)v = (sbx_wire_map){sample_kv, 2, true}; break;
    case FT_BOOL: *(bool *)v = true; break;
    case FT_U16: *(uint16_t *)v = 65535; break;
    case FT_U32: *(uint32_t *)v = 4294967295u; break;
    case FT_U64: *(uint64_t *)v = UINT64_MAX - (uint64_t)salt; break;
    case FT_I32: *(int32_t *)v = INT32_MIN + salt; break;
    case FT_B64: *(sbx_wire_bytes *)v = (sbx_wire_bytes){sample_bytes, sizeof sample_bytes}; break;
    case FT_ENUM: *(int *)v = (int)(((const sbx_wire_enum *)f->aux)->count - 1); break;
    case FT_OBJ: fill(f->aux, v, with_optional, salt); break;
    case FT_OBJV: {
      const wire_desc *sub = f->aux;
      char *items = test_calloc(2, sub->size);
      fill(sub, items, with_optional, salt);
      fill(sub, items + sub->size, with_optional, salt + 1);
      *(char **)v = items;
      *(size_t *)(base + f->aux_off) = 2;
      break;
    }
    }
    if (f->aux_off >= 0 && f->type != FT_OBJV) *(bool *)(base + f->aux_off) = true;
  }
}

static void free_filled(const wire_desc *desc, char *base) {
  for (unsigned i = 0; i < desc->nfields; i++)
    if (desc->fields[i].type == FT_OBJV) test_free(*(char **)(base + desc->fields[i].off));
}

static void identity_req(sbx_wire_op op, bool with_optional) {
  sbx_wire_req r = {.op = op};
  fill(&sbxi_req_desc[op], (char *)&r.u, with_optional, 0);
  sbx_error err;
  sbx_buf a = SBX_BUF_INIT(1 << 20), b = SBX_BUF_INIT(1 << 20);
  assert_int_equal(sbx_wire_encode_req(&a, &r, &err), 0);
  char head[64];
  snprintf(head, sizeof head, "{\"v\":1,\"op\":\"%s\"", sbx_wire_op_name(op));
  assert_memory_equal(a.ptr, head, strlen(head)); /* tag first */
  assert_null(strstr(a.ptr, "null"));
  sbx_wire_req d;
  if (sbx_wire_decode_req(a.ptr, a.len - 1, &d, &err) < 0) fail_msg("%s: %s\n%s", sbx_wire_op_name(op), err.msg, a.ptr);
  assert_int_equal(d.op, op);
  assert_int_equal(sbx_wire_encode_req(&b, &d, &err), 0);
  assert_string_equal(a.ptr, b.ptr);
  sbx_wire_req_free(&d);
  free_filled(&sbxi_req_desc[op], (char *)&r.u);
  sbx_buf_free(&a);
  sbx_buf_free(&b);
}

static void identity_resp(sbx_wire_type type, bool with_optional) {
  sbx_wire_resp r = {.type = type};
  fill(&sbxi_resp_desc[type], (char *)&r.u, with_optional, 3);
  sbx_error err;
  sbx_buf a = SBX_BUF_INIT(1 << 20), b = SBX_BUF_INIT(1 << 20);
  assert_int_equal(sbx_wire_encode_resp(&a, &r, &err), 0);
  char head[64];
  snprintf(head, sizeof head, "{\"type\":\"%s\"", sbx_wire_type_name(type));
  assert_memory_equal(a.ptr, head, strlen(head));
  assert_null(strstr(a.ptr, "null"));
  assert_null(strstr(a.ptr, "\"truncated\":false"));
  sbx_wire_resp d;
  if (sbx_wire_decode_resp(a.ptr, a.len - 1, &d, &err) < 0)
    fail_msg("%s: %s\n%s", sbx_wire_type_name(type), err.msg, a.ptr);
  assert_int_equal(d.type, type);
  assert_int_equal(sbx_wire_encode_resp(&b, &d, &err), 0);
  assert_string_equal(a.ptr, b.ptr);
  sbx_wire_resp_free(&d);
  free_filled(&sbxi_resp_desc[type], (char *)&r.u);
  sbx_buf_free(&a);
  sbx_buf_free(&b);
}

static void test_identity_all_ops(void **state) {
  (void)state;
  for (int op = 0; op < SBX_OP__COUNT; op++) {
    identity_req(op, true);
    identity_req(op, false);
  }
  for (int t = 0; t < SBX_RESP__COUNT; t++) {
    identity_resp(t, true);
    identity_resp(t, false);
  }
}

/* Each optional member on its own: absent means absent after a round trip. */
static void test_each_optional_alone(void **state) {
  (void)state;
  for (int op = 0; op < SBX_OP__COUNT; op++) {
    const wire_desc *desc = &sbxi_req_desc[op];
    for (unsigned i = 0; i < desc->nfields; i++) {
      if (desc->fields[i].flags & FF_REQUIRED) continue;
      sbx_wire_req r = {.op = op};
      fill(desc, (char *)&r.u, false, 0);
      sbx_wire_req full = {.op = op};
      fill(desc, (char *)&full.u, true, 0);
      /* copy just this optional member (and its has_ flag) from full */
      const wire_field *f = &desc->fields[i];
      size_t sz = f->type == FT_STR   ? sizeof(char *)
                  : f->type == FT_MAP ? sizeof(sbx_wire_map)
                  : f->type == FT_BOOL ? sizeof(bool)
                  : f->type == FT_U16 ? sizeof(uint16_t)
                  : f->type == FT_U64 ? sizeof(uint64_t)
                                      : sizeof(uint32_t);
      memcpy((char *)&r.u + f->off, (char *)&full.u + f->off, sz);
      if (f->aux_off >= 0) *((char *)&r.u + f->aux_off) = 1;
      sbx_error err;
      sbx_buf a = SBX_BUF_INIT(1 << 20);
      assert_int_equal(sbx_wire_encode_req(&a, &r, &err), 0);
      char key[64];
      snprintf(key, sizeof key, "\"%s\":", f->name);
      assert_non_null(strstr(a.ptr, key));
      sbx_wire_req d;
      assert_int_equal(sbx_wire_decode_req(a.ptr, a.len, &d, &err), 0);
      sbx_buf b = SBX_BUF_INIT(1 << 20);
      assert_int_equal(sbx_wire_encode_req(&b, &d, &err), 0);
      assert_string_equal(a.ptr, b.ptr);
      sbx_wire_req_free(&d);
      sbx_buf_free(&a);
      sbx_buf_free(&b);
    }
  }
}

static void test_omission_rules(void **state) {
  (void)state;
  sbx_error err;
  sbx_buf b = SBX_BUF_INIT(4096);
  sbx_wire_proc_info procs[2] = {
      {.pid = 1, .state = SBX_PROC_RUNNING, .has_exit_code = true, .exit_code = 5},
      {.pid = 2, .state = SBX_PROC_EXITED, .has_exit_code = false, .exit_code = 7},
  };
  sbx_wire_resp r = {.type = SBX_RESP_PROCS};
  r.u.procs.items = procs;
  r.u.procs.len = 2;
  assert_int_equal(sbx_wire_encode_resp(&b, &r, &err), 0);
  assert_string_equal(b.ptr, "{\"type\":\"procs\",\"procs\":[{\"pid\":1,\"argv\":[],\"detached\":false,\"state\":\"running\","
                             "\"started_at_epoch_secs\":0},{\"pid\":2,\"argv\":[],\"detached\":false,\"state\":\"exited\","
                             "\"exit_code\":7,\"started_at_epoch_secs\":0}]}\n");
  sbx_buf_reset(&b);
  sbx_wire_resp g = {.type = SBX_RESP_GIT_STATUS_RESULT};
  g.u.git_status_result.branch = "main";
  assert_int_equal(sbx_wire_encode_resp(&b, &g, &err), 0);
  assert_string_equal(b.ptr, "{\"type\":\"git_status_result\",\"branch\":\"main\",\"ahead\":0,\"behind\":0,\"files\":[]}\n");
  sbx_buf_free(&b);
}

static void test_escaping_and_lossy_utf8(void **state) {
  (void)state;
  sbx_error err;
  sbx_buf b = SBX_BUF_INIT(4096);
  assert_int_equal(sbx_wire_encode_error(&b, SBX_ERR_NOT_FOUND, "a\"b\\c/d\x01\x1f\n\xff\xc3\xa9", &err), 0);
  assert_string_equal(b.ptr,
                      "{\"type\":\"error\",\"kind\":\"not_found\",\"message\":\"a\\\"b\\\\c/d\\u0001\\u001f\\n\xef\xbf\xbd\xc3\xa9\"}\n");
  sbx_wire_resp r;
  assert_int_equal(sbx_wire_decode_resp(b.ptr, b.len, &r, &err), 0);
  assert_string_equal(r.u.error.message, "a\"b\\c/d\x01\x1f\n\xef\xbf\xbd\xc3\xa9");
  sbx_wire_resp_free(&r);
  sbx_buf_free(&b);
}

static void test_encoder_cap(void **state) {
  (void)state;
  sbx_error err;
  sbx_buf b = SBX_BUF_INIT(64u << 20);
  assert_int_equal(sbx_buf_add(&b, "keep", 4, &err), 0);
  size_t n = SBX_WIRE_FRAME_CAP;
  char *big = test_malloc(n + 1);
  memset(big, 'a', n);
  big[n] = '\0';
  assert_int_equal(sbx_wire_encode_error(&b, SBX_ERR_INTERNAL, big, &err), SBX_E_TOOBIG);
  assert_int_equal(b.len, 4); /* previous content kept */
  assert_string_equal(b.ptr, "keep");
  /* the largest canonical upload payload fits exactly */
  uint8_t *payload = test_calloc(1, SBX_WIRE_MAX_UPLOAD_PAYLOAD + 3);
  sbx_buf_reset(&b);
  assert_int_equal(sbx_wire_bulk_encode(&b, SBX_BULK_REQ_DATA, payload, SBX_WIRE_MAX_UPLOAD_PAYLOAD, &err), 0);
  assert_true(b.len - 1 <= SBX_WIRE_FRAME_CAP);
  assert_int_equal(sbx_wire_bulk_encode(&b, SBX_BULK_REQ_DATA, payload, SBX_WIRE_MAX_UPLOAD_PAYLOAD + 3, &err),
                   SBX_E_TOOBIG);
  test_free(payload);
  test_free(big);
  sbx_buf_free(&b);
}

static void test_convenience_encoders(void **state) {
  (void)state;
  sbx_error err;
  sbx_buf b = SBX_BUF_INIT(4096);
  assert_int_equal(sbx_wire_encode_simple(&b, SBX_RESP_DONE, &err), 0);
  assert_int_equal(sbx_wire_encode_simple(&b, SBX_RESP_READY, &err), 0);
  assert_int_equal(sbx_wire_encode_exit(&b, -1, &err), 0);
  assert_int_equal(sbx_wire_encode_started(&b, 4294967295u, &err), 0);
  assert_string_equal(b.ptr, "{\"type\":\"done\"}\n{\"type\":\"ready\"}\n{\"type\":\"exit\",\"code\":-1}\n"
                             "{\"type\":\"started\",\"pid\":4294967295}\n");
  assert_int_equal(sbx_wire_encode_simple(&b, SBX_RESP_EXIT, &err), SBX_E_INVAL);
  sbx_buf_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_identity_all_ops),
      cmocka_unit_test(test_each_optional_alone),
      cmocka_unit_test(test_omission_rules),
      cmocka_unit_test(test_escaping_and_lossy_utf8),
      cmocka_unit_test(test_encoder_cap),
      cmocka_unit_test(test_convenience_encoders),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
