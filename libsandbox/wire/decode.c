/* Decoding: tokenize the line, find the tag, bind members through the
 * schema tables. Decoded strings, arrays and payloads live in one arena per
 * message, so freeing a message is a walk over a few blocks. */
#include <string.h>

#include <sandbox/wire.h>

#include "json.h"
#include "arena.h"
#include "bulk.h"
#include "schema.h"

/* ---- binding ---- */
typedef struct {
  const jdoc *d;
  sbx_wire_arena *arena;
  const char **nul_field;
  sbx_error *err;
} binder;

static int member_err(binder *b, const wire_field *f, const char *what) {
  return sbx_err(b->err, SBX_E_PARSE, "member \"%s\": %s", f->name, what);
}

static const char *bind_str(binder *b, const wire_field *f, const jtok *t) {
  size_t n = sbxi_json_str_len(b->d, t);
  char *s = sbxi_arena_alloc(b->arena, n + 1);
  sbxi_json_str_copy(b->d, t, s);
  s[n] = '\0';
  if ((t->flags & JTF_NUL) && !*b->nul_field) *b->nul_field = f->name;
  return s;
}

static const char *expect_int(int type) {
  switch (type) {
  case FT_U16: return "expected u16";
  case FT_U32: return "expected u32";
  case FT_U64: return "expected u64";
  case FT_I32: return "expected i32";
  default: return "expected integer";
  }
}

/* Integer literal -> value within [min, max]; rejects fractions, exponents,
 * quoted numbers, and a minus sign on unsigned fields. */
static int bind_int(binder *b, const wire_field *f, const jtok *t, int64_t min, uint64_t max, uint64_t *mag,
                    bool *neg) {
  const char *what = expect_int(f->type);
  if (t->type != JT_NUM || !(t->flags & JTF_INT)) return member_err(b, f, what);
  const char *s = b->d->src + t->start;
  size_t n = t->len, i = 0;
  *neg = (t->flags & JTF_NEG) != 0;
  if (*neg) {
    if (min == 0) return member_err(b, f, what);
    i = 1;
  }
  uint64_t v = 0;
  for (; i < n; i++) {
    unsigned dgt = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - dgt) / 10) return member_err(b, f, what);
    v = v * 10 + dgt;
  }
  if (*neg ? v > (uint64_t)(-(min + 1)) + 1 : v > max) return member_err(b, f, what);
  *mag = v;
  return 0;
}

static int bind_object(binder *b, const wire_desc *desc, uint32_t obj, char *base);

static int bind_field(binder *b, const wire_field *f, uint32_t vi, char *base) {
  const jdoc *d = b->d;
  const jtok *t = &d->tok[vi];
  void *dst = base + f->off;
  int rc;
  switch ((field_type)f->type) {
  case FT_STR:
    if (t->type != JT_STR) return member_err(b, f, "expected string");
    *(const char **)dst = bind_str(b, f, t);
    return 0;
  case FT_STRV: {
    if (t->type != JT_ARR) return member_err(b, f, "expected array of strings");
    size_t n = 0;
    for (uint32_t i = vi + 1; i < t->next; i = d->tok[i].next) n++;
    const char **items = sbxi_arena_alloc(b->arena, (n ? n : 1) * sizeof *items);
    size_t k = 0;
    for (uint32_t i = vi + 1; i < t->next; i = d->tok[i].next) {
      if (d->tok[i].type != JT_STR) return member_err(b, f, "expected array of strings");
      items[k++] = bind_str(b, f, &d->tok[i]);
    }
    *(sbx_wire_strv *)dst = (sbx_wire_strv){items, n};
    return 0;
  }
  case FT_MAP: {
    if (t->type != JT_OBJ) return member_err(b, f, "expected object of strings");
    size_t n = 0;
    for (uint32_t i = vi + 1; i < t->next; i = d->tok[i + 1].next) n++;
    sbx_wire_kv *items = sbxi_arena_alloc(b->arena, (n ? n : 1) * sizeof *items);
    size_t k = 0;
    for (uint32_t i = vi + 1; i < t->next; i = d->tok[i + 1].next) {
      if (d->tok[i + 1].type != JT_STR) return member_err(b, f, "expected object of strings");
      items[k].key = bind_str(b, f, &d->tok[i]);
      items[k].value = bind_str(b, f, &d->tok[i + 1]);
      k++;
    }
    *(sbx_wire_map *)dst = (sbx_wire_map){items, n, true};
    return 0;
  }
  case FT_BOOL:
    if (t->type != JT_TRUE && t->type != JT_FALSE) return member_err(b, f, "expected bool");
    *(bool *)dst = t->type == JT_TRUE;
    return 0;
  case FT_U16:
  case FT_U32:
  case FT_U64:
  case FT_I32: {
    static const uint64_t maxv[] = {[FT_U16] = UINT16_MAX, [FT_U32] = UINT32_MAX, [FT_U64] = UINT64_MAX,
                                    [FT_I32] = INT32_MAX};
    uint64_t mag = 0;
    bool neg = false;
    int64_t min = f->type == FT_I32 ? INT32_MIN : 0;
    if ((rc = bind_int(b, f, t, min, maxv[f->type], &mag, &neg)) < 0) return rc;
    if (f->type == FT_U16) *(uint16_t *)dst = (uint16_t)mag;
    else if (f->type == FT_U32) *(uint32_t *)dst = (uint32_t)mag;
    else if (f->type == FT_U64) *(uint64_t *)dst = mag;
    else *(int32_t *)dst = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    return 0;
  }
  case FT_B64: {
    if (t->type != JT_STR) return member_err(b, f, "expected base64 string");
    size_t n = sbxi_json_str_len(d, t);
    const char *src = d->src + t->start;
    char *tmp = NULL;
    if (t->flags & JTF_ESCAPED) {
      tmp = sbx_malloc(n ? n : 1);
      sbxi_json_str_copy(d, t, tmp);
      src = tmp;
    }
    uint8_t *out = sbxi_arena_alloc(b->arena, sbx_b64_decoded_max(n) + 1);
    size_t outlen = 0;
    sbx_error berr;
    rc = sbx_b64_decode(out, src, n, &outlen, &berr);
    sbx_free(tmp);
    if (rc < 0) return sbx_err(b->err, SBX_E_PARSE, "member \"%s\": %s", f->name, berr.msg);
    *(sbx_wire_bytes *)dst = (sbx_wire_bytes){out, outlen};
    return 0;
  }
  case FT_ENUM: {
    const sbx_wire_enum *e = f->aux;
    if (t->type == JT_STR)
      for (size_t i = 0; i < e->count; i++)
        if (sbxi_json_str_eq(d, t, e->values[i], strlen(e->values[i]))) {
          *(int *)dst = (int)i;
          return 0;
        }
    return sbx_err(b->err, SBX_E_PARSE, "member \"%s\": expected one of the %s values", f->name, e->name);
  }
  case FT_OBJ:
    if (t->type != JT_OBJ) return member_err(b, f, "expected object");
    return bind_object(b, f->aux, vi, dst);
  case FT_OBJV: {
    const wire_desc *sub = f->aux;
    if (t->type != JT_ARR) return member_err(b, f, "expected array of objects");
    size_t n = 0;
    for (uint32_t i = vi + 1; i < t->next; i = d->tok[i].next) n++;
    char *items = sbxi_arena_alloc(b->arena, (n ? n : 1) * sub->size);
    memset(items, 0, (n ? n : 1) * sub->size);
    size_t k = 0;
    for (uint32_t i = vi + 1; i < t->next; i = d->tok[i].next, k++) {
      if (d->tok[i].type != JT_OBJ) return member_err(b, f, "expected array of objects");
      if ((rc = bind_object(b, sub, i, items + k * sub->size)) < 0) return rc;
    }
    *(void **)dst = items;
    *(size_t *)(base + f->aux_off) = n;
    return 0;
  }
  }
  return member_err(b, f, "unsupported field type");
}

static int bind_object(binder *b, const wire_desc *desc, uint32_t obj, char *base) {
  const jdoc *d = b->d;
  uint32_t seen = 0; /* bit per field; every table has < 32 fields */
  for (uint32_t k = obj + 1; k < d->tok[obj].next; k = d->tok[k + 1].next) {
    const jtok *key = &d->tok[k];
    for (unsigned fi = 0; fi < desc->nfields; fi++) {
      const wire_field *f = &desc->fields[fi];
      if (!sbxi_json_str_eq(d, key, f->name, f->name_len)) continue;
      seen |= 1u << fi;
      if (d->tok[k + 1].type == JT_NULL) {
        if (f->flags & FF_REQUIRED) return member_err(b, f, "must not be null");
        break; /* null optional = absent */
      }
      int rc = bind_field(b, f, k + 1, base);
      if (rc < 0) return rc;
      if (f->aux_off >= 0 && f->type != FT_OBJV) *(bool *)(base + f->aux_off) = true;
      break;
    }
  }
  for (unsigned fi = 0; fi < desc->nfields; fi++) {
    const wire_field *f = &desc->fields[fi];
    if ((f->flags & FF_REQUIRED) && !(seen & (1u << fi)))
      return sbx_err(b->err, SBX_E_PARSE, "missing member \"%s\"%s%s", f->name, obj ? " in " : "",
                     obj ? desc->tag : "");
  }
  return 0;
}

/* Find the tag member ("op" or "type") among the top-level members. */
static int find_tag(const jdoc *d, const char *name, size_t name_len, uint32_t *vi, sbx_error *err) {
  for (uint32_t k = 1; k < d->tok[0].next; k = d->tok[k + 1].next) {
    if (sbxi_json_str_eq(d, &d->tok[k], name, name_len)) {
      if (d->tok[k + 1].type != JT_STR) return sbx_err(err, SBX_E_PARSE, "member \"%s\": expected string", name);
      *vi = k + 1;
      return 0;
    }
  }
  return sbx_err(err, SBX_E_PARSE, "missing member \"%s\"", name);
}

static int decode_tagged(const char *line, size_t len, bool is_req, int *tag_out, void *variant, size_t variant_size,
                         const char **nul_field, sbx_wire_arena **arena_out, sbx_error *err) {
  jdoc d;
  int rc = sbxi_json_parse(&d, line, len, err);
  if (rc < 0) {
    sbxi_json_release(&d);
    return rc;
  }
  uint32_t vi = 0;
  rc = find_tag(&d, is_req ? "op" : "type", is_req ? 2 : 4, &vi, err);
  if (rc < 0) goto out;
  const jtok *t = &d.tok[vi];
  char tagbuf[64];
  size_t tlen = sbxi_json_str_len(&d, t);
  int tag = -1;
  if (tlen < sizeof tagbuf) {
    sbxi_json_str_copy(&d, t, tagbuf);
    tag = is_req ? sbx_wire_op_from_name(tagbuf, tlen) : sbx_wire_type_from_name(tagbuf, tlen);
  }
  if (tag < 0) {
    rc = sbx_err(err, SBX_E_PARSE, "unknown %s \"%.*s\"", is_req ? "op" : "type", (int)(tlen < 48 ? tlen : 48),
                 tlen < sizeof tagbuf ? tagbuf : "");
    goto out;
  }
  const wire_desc *desc = is_req ? &sbxi_req_desc[tag] : &sbxi_resp_desc[tag];
  memset(variant, 0, variant_size);
  sbx_wire_arena *arena = sbxi_arena_new(desc->nfields ? len + 64 : 0);
  binder b = {&d, arena, nul_field, err};
  rc = bind_object(&b, desc, 0, variant);
  if (rc < 0) {
    sbxi_arena_free(arena);
    goto out;
  }
  *tag_out = tag;
  *arena_out = arena;
out:
  sbxi_json_release(&d);
  return rc;
}

int sbx_wire_decode_req(const char *line, size_t len, sbx_wire_req *out, sbx_error *err) {
  memset(out, 0, sizeof *out);
  if (sbxi_bulk_decode_req(line, len, out) == 1) return 0;
  int tag;
  int rc = decode_tagged(line, len, true, &tag, &out->u, sizeof out->u, &out->nul_field, &out->arena, err);
  if (rc < 0) {
    memset(out, 0, sizeof *out);
    return rc;
  }
  out->op = (sbx_wire_op)tag;
  return 0;
}

int sbx_wire_decode_resp(const char *line, size_t len, sbx_wire_resp *out, sbx_error *err) {
  memset(out, 0, sizeof *out);
  if (sbxi_bulk_decode_resp(line, len, out) == 1) return 0;
  int tag;
  int rc = decode_tagged(line, len, false, &tag, &out->u, sizeof out->u, &out->nul_field, &out->arena, err);
  if (rc < 0) {
    memset(out, 0, sizeof *out);
    return rc;
  }
  out->type = (sbx_wire_type)tag;
  return 0;
}

void sbx_wire_req_free(sbx_wire_req *req) {
  if (!req) return;
  sbxi_arena_free(req->arena);
  req->arena = NULL;
}

void sbx_wire_resp_free(sbx_wire_resp *resp) {
  if (!resp) return;
  sbxi_arena_free(resp->arena);
  resp->arena = NULL;
}
