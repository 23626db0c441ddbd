/* Encoding through the schema tables: tag first, members in fixture order,
 * absent optionals omitted, never a null. Strings are escaped as §1.9 asks
 * (", \ and C0 controls only; '/' and non-ASCII raw) and invalid UTF-8 is
 * replaced by U+FFFD so that every frame we emit parses. */
#include <string.h>

#include <sandbox/wire.h>

#include "json.h"
#include "schema.h"
#include "util/util.h"

/* One pass measures, the second writes into exactly that much room, so a
 * string never makes the buffer reserve more than it will keep. */
static size_t escape_str(char *w, const unsigned char *p, size_t n) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    unsigned c = p[i];
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      if (w) w[o] = (char)c;
      o++;
      i++;
    } else if (c == '"' || c == '\\') {
      if (w) w[o] = '\\', w[o + 1] = (char)c;
      o += 2;
      i++;
    } else if (c < 0x20) {
      char short_esc = c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : c == '\b' ? 'b' : c == '\f' ? 'f' : 0;
      if (short_esc) {
        if (w) w[o] = '\\', w[o + 1] = short_esc;
        o += 2;
      } else {
        if (w) memcpy(w + o, "\\u00", 4), w[o + 4] = hex[c >> 4], w[o + 5] = hex[c & 15];
        o += 6;
      }
      i++;
    } else {
      size_t k = sbxi_utf8_seq(p + i, n - i);
      if (k) {
        if (w) memcpy(w + o, p + i, k);
        o += k;
        i += k;
      } else {
        if (w) memcpy(w + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i++;
      }
    }
  }
  return o;
}

static int put_str(sbx_buf *b, const char *s, sbx_error *err) {
  size_t n = strlen(s);
  if (n > SBX_WIRE_FRAME_CAP) return sbx_err(err, SBX_E_TOOBIG, "string of %zu bytes exceeds the frame cap", n);
  const unsigned char *p = (const unsigned char *)s;
  size_t elen = escape_str(NULL, p, n);
  char *w;
  int rc = sbx_buf_reserve(b, elen + 2, &w, err);
  if (rc < 0) return rc;
  w[0] = '"';
  escape_str(w + 1, p, n);
  w[elen + 1] = '"';
  sbx_buf_commit(b, elen + 2);
  return 0;
}

static int put_u64(sbx_buf *b, uint64_t v, sbx_error *err) {
  char tmp[24];
  size_t i = sizeof tmp;
  do {
    tmp[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  return sbx_buf_add(b, tmp + i, sizeof tmp - i, err);
}

static int put_i64(sbx_buf *b, int64_t v, sbx_error *err) {
  if (v < 0) {
    int rc = sbx_buf_addc(b, '-', err);
    if (rc < 0) return rc;
    return put_u64(b, (uint64_t)(-(v + 1)) + 1, err);
  }
  return put_u64(b, (uint64_t)v, err);
}

static int put_key(sbx_buf *b, const wire_field *f, bool first, sbx_error *err) {
  char *w;
  int rc = sbx_buf_reserve(b, (size_t)f->name_len + 4, &w, err);
  if (rc < 0) return rc;
  size_t o = 0;
  if (!first) w[o++] = ',';
  w[o++] = '"';
  memcpy(w + o, f->name, f->name_len);
  o += f->name_len;
  w[o++] = '"';
  w[o++] = ':';
  sbx_buf_commit(b, o);
  return 0;
}

static int put_object(sbx_buf *b, const wire_desc *desc, const char *base, bool first, sbx_error *err);

/* Whether a member is emitted at all. */
static bool present(const wire_field *f, const char *base) {
  const void *v = base + f->off;
  if (f->flags & FF_IFF_EXITED) return ((const sbx_wire_proc_info *)base)->state == SBX_PROC_EXITED;
  if (f->flags & FF_ONLY_TRUE) return *(const bool *)v;
  if (f->type == FT_OBJV) return true;
  if (f->aux_off >= 0) return *(const bool *)(base + f->aux_off);
  if (f->type == FT_STR && !(f->flags & FF_REQUIRED)) return *(const char *const *)v != NULL;
  if (f->type == FT_MAP) {
    const sbx_wire_map *m = v;
    return m->present || m->items;
  }
  return true;
}

static int put_field(sbx_buf *b, const wire_field *f, const char *base, sbx_error *err) {
  const void *v = base + f->off;
  int rc = 0;
  switch ((field_type)f->type) {
  case FT_STR: {
    const char *s = *(const char *const *)v;
    if (!s) return sbx_err(err, SBX_E_INVAL, "member \"%s\" is required", f->name);
    return put_str(b, s, err);
  }
  case FT_STRV: {
    const sbx_wire_strv *sv = v;
    if ((rc = sbx_buf_addc(b, '[', err)) < 0) return rc;
    for (size_t i = 0; i < sv->len; i++) {
      if (i && (rc = sbx_buf_addc(b, ',', err)) < 0) return rc;
      if (!sv->items[i]) return sbx_err(err, SBX_E_INVAL, "member \"%s\": NULL element", f->name);
      if ((rc = put_str(b, sv->items[i], err)) < 0) return rc;
    }
    return sbx_buf_addc(b, ']', err);
  }
  case FT_MAP: {
    const sbx_wire_map *m = v;
    if ((rc = sbx_buf_addc(b, '{', err)) < 0) return rc;
    for (size_t i = 0; i < m->len; i++) {
      if (i && (rc = sbx_buf_addc(b, ',', err)) < 0) return rc;
      if (!m->items[i].key || !m->items[i].value)
        return sbx_err(err, SBX_E_INVAL, "member \"%s\": NULL key or value", f->name);
      if ((rc = put_str(b, m->items[i].key, err)) < 0 || (rc = sbx_buf_addc(b, ':', err)) < 0 ||
          (rc = put_str(b, m->items[i].value, err)) < 0)
        return rc;
    }
    return sbx_buf_addc(b, '}', err);
  }
  case FT_BOOL: return *(const bool *)v ? sbx_buf_add(b, "true", 4, err) : sbx_buf_add(b, "false", 5, err);
  case FT_U16: return put_u64(b, *(const uint16_t *)v, err);
  case FT_U32: return put_u64(b, *(const uint32_t *)v, err);
  case FT_U64: return put_u64(b, *(const uint64_t *)v, err);
  case FT_I32: return put_i64(b, *(const int32_t *)v, err);
  case FT_B64: {
    const sbx_wire_bytes *by = v;
    if (by->len > SBX_WIRE_FRAME_CAP) return sbx_err(err, SBX_E_TOOBIG, "payload exceeds the frame cap");
    char *w;
    size_t el = sbx_b64_encoded_len(by->len);
    if ((rc = sbx_buf_reserve(b, el + 2, &w, err)) < 0) return rc;
    w[0] = '"';
    sbx_b64_encode(w + 1, by->ptr, by->len);
    w[el + 1] = '"';
    sbx_buf_commit(b, el + 2);
    return 0;
  }
  case FT_ENUM: {
    const sbx_wire_enum *e = f->aux;
    unsigned idx = (unsigned)*(const int *)v;
    if (idx >= e->count) return sbx_err(err, SBX_E_INVAL, "member \"%s\": value %u is not a %s", f->name, idx, e->name);
    if ((rc = sbx_buf_addc(b, '"', err)) < 0 || (rc = sbx_buf_adds(b, e->values[idx], err)) < 0) return rc;
    return sbx_buf_addc(b, '"', err);
  }
  case FT_OBJ:
    if ((rc = sbx_buf_addc(b, '{', err)) < 0 || (rc = put_object(b, f->aux, v, true, err)) < 0) return rc;
    return sbx_buf_addc(b, '}', err);
  case FT_OBJV: {
    const wire_desc *sub = f->aux;
    const char *items = *(const char *const *)v;
    size_t n = *(const size_t *)(base + f->aux_off);
    if ((rc = sbx_buf_addc(b, '[', err)) < 0) return rc;
    for (size_t i = 0; i < n; i++) {
      if ((i && (rc = sbx_buf_addc(b, ',', err)) < 0) || (rc = sbx_buf_addc(b, '{', err)) < 0 ||
          (rc = put_object(b, sub, items + i * sub->size, true, err)) < 0 || (rc = sbx_buf_addc(b, '}', err)) < 0)
        return rc;
    }
    return sbx_buf_addc(b, ']', err);
  }
  }
  return sbx_err(err, SBX_E_INTERNAL, "unsupported field type");
}

static int put_object(sbx_buf *b, const wire_desc *desc, const char *base, bool first, sbx_error *err) {
  for (unsigned i = 0; i < desc->nfields; i++) {
    const wire_field *f = &desc->fields[i];
    if (!present(f, base)) continue;
    int rc = put_key(b, f, first, err);
    if (rc < 0 || (rc = put_field(b, f, base, err)) < 0) return rc;
    first = false;
  }
  return 0;
}

static int encode_tagged(sbx_buf *out, const char *head, size_t head_len, const wire_desc *desc, const void *variant,
                         sbx_error *err) {
  size_t start = out->len;
  int rc = sbx_buf_add(out, head, head_len, err);
  if (rc < 0) return rc;
  if ((rc = sbx_buf_add(out, desc->tag, desc->tag_len, err)) < 0 || (rc = sbx_buf_addc(out, '"', err)) < 0 ||
      (rc = put_object(out, desc, variant, false, err)) < 0 || (rc = sbx_buf_add(out, "}\n", 2, err)) < 0) {
    if (out->ptr && out->len >= start) { /* roll back; a buffer that hit its own cap is already freed */
      out->len = start;
      out->ptr[start] = '\0';
    }
    return rc;
  }
  if (out->len - start - 1 > SBX_WIRE_FRAME_CAP) {
    out->len = start;
    out->ptr[start] = '\0';
    return sbx_err(err, SBX_E_TOOBIG, "%s frame exceeds the %u-byte cap", desc->tag, SBX_WIRE_FRAME_CAP);
  }
  return 0;
}

int sbx_wire_encode_req(sbx_buf *out, const sbx_wire_req *req, sbx_error *err) {
  if ((unsigned)req->op >= SBX_OP__COUNT) return sbx_err(err, SBX_E_INVAL, "bad op %d", (int)req->op);
  static const char head[] = "{\"v\":1,\"op\":\"";
  return encode_tagged(out, head, sizeof head - 1, &sbxi_req_desc[req->op], &req->u, err);
}

int sbx_wire_encode_resp(sbx_buf *out, const sbx_wire_resp *resp, sbx_error *err) {
  if ((unsigned)resp->type >= SBX_RESP__COUNT) return sbx_err(err, SBX_E_INVAL, "bad type %d", (int)resp->type);
  static const char head[] = "{\"type\":\"";
  return encode_tagged(out, head, sizeof head - 1, &sbxi_resp_desc[resp->type], &resp->u, err);
}

int sbx_wire_encode_error(sbx_buf *out, sbx_wire_error_kind kind, const char *message, sbx_error *err) {
  sbx_wire_resp r = {.type = SBX_RESP_ERROR};
  r.u.error.kind = kind;
  r.u.error.message = message ? message : "";
  return sbx_wire_encode_resp(out, &r, err);
}

int sbx_wire_encode_simple(sbx_buf *out, sbx_wire_type type, sbx_error *err) {
  if (type != SBX_RESP_DONE && type != SBX_RESP_READY)
    return sbx_err(err, SBX_E_INVAL, "%s is not a member-less frame", sbx_wire_type_name(type));
  sbx_wire_resp r = {.type = type};
  return sbx_wire_encode_resp(out, &r, err);
}

int sbx_wire_encode_exit(sbx_buf *out, int32_t code, sbx_error *err) {
  sbx_wire_resp r = {.type = SBX_RESP_EXIT};
  r.u.exit.code = code;
  return sbx_wire_encode_resp(out, &r, err);
}

int sbx_wire_encode_started(sbx_buf *out, uint32_t pid, sbx_error *err) {
  sbx_wire_resp r = {.type = SBX_RESP_STARTED};
  r.u.started.pid = pid;
  return sbx_wire_encode_resp(out, &r, err);
}
