/* pattern.c - the regex side of fs_find and fs_replace: PCRE2 in UTF+UCP
 * mode with JIT, bounded by match, depth and heap limits so a catastrophic
 * pattern fails fast instead of holding a worker; plus the UTF-8 check that
 * decides "binary", the file-name glob of §5.7 and the replacement template.
 */
#include <string.h>

#include "pattern.h"

/* Bounds per pcre2_match call. With JIT a call of 10M steps takes some tens
 * of milliseconds here; the depth and heap limits only bind the interpreter
 * (used when the JIT cannot compile a pattern). */
#define MATCH_LIMIT 10000000u
#define DEPTH_LIMIT 1000000u
#define HEAP_LIMIT_KIB (64u * 1024)

static pcre2_code *compile1(const char *src, uint32_t extra, int *errcode, PCRE2_SIZE *erroff) {
  pcre2_code *code = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | extra, errcode,
                                   erroff, NULL);
  if (code) pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* failing JIT: the interpreter */
  return code;
}

/* Whether a whole-file search in multiline mode finds every line a
 * per-line search finds (it may find more: the caller checks the line).
 * Constructs that see past a line's end or start differently do not
 * qualify: subject anchors, look-around, atomic groups and possessive
 * quantifiers, verbs, unsetting flags (`(?-m)`), \Q...\E. */
static bool buffer_safe(const char *s) {
  for (const char *p = s; *p; p++) {
    if (p[0] == '\\' && p[1]) {
      if (strchr("AzZGKQ", p[1])) return false;
      p++;
      continue;
    }
    if (p[0] == '(' && p[1] == '*') return false;
    if (p[0] == '(' && p[1] == '?') {
      const char *q = p + 2;
      if (*q == '=' || *q == '!' || *q == '>' || *q == '|' || (*q == '<' && (q[1] == '=' || q[1] == '!'))) return false;
      for (; *q && *q != ')' && *q != ':'; q++)
        if (*q == '-') return false;
    }
    if (strchr("*+?}", p[0]) && p[1] == '+') return false;
  }
  return true;
}

int pattern_compile(struct pattern *pt, const char *src, bool for_lines, char *msg, size_t msglen) {
  int ec;
  PCRE2_SIZE off;
  memset(pt, 0, sizeof *pt);
  pt->code = compile1(src, 0, &ec, &off);
  if (!pt->code) {
    PCRE2_UCHAR buf[256];
    if (pcre2_get_error_message(ec, buf, sizeof buf) < 0) strcpy((char *)buf, "invalid pattern");
    snprintf(msg, msglen, "invalid pattern: %s at offset %zu", (char *)buf, (size_t)off);
    return -1;
  }
  if (for_lines && buffer_safe(src)) pt->multi = compile1(src, PCRE2_MULTILINE, &ec, &off);
  return 0;
}

void pattern_free(struct pattern *pt) {
  pcre2_code_free(pt->code);
  pcre2_code_free(pt->multi);
  memset(pt, 0, sizeof *pt);
}

int matcher_init(struct matcher *m, const struct pattern *pt) {
  memset(m, 0, sizeof *m);
  m->mctx = pcre2_match_context_create(NULL);
  m->stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
  m->md = pcre2_match_data_create_from_pattern(pt->code, NULL);
  if (!m->mctx || !m->stack || !m->md) {
    matcher_free(m);
    return -1;
  }
  pcre2_set_match_limit(m->mctx, MATCH_LIMIT);
  pcre2_set_depth_limit(m->mctx, DEPTH_LIMIT);
  pcre2_set_heap_limit(m->mctx, HEAP_LIMIT_KIB);
  pcre2_jit_stack_assign(m->mctx, NULL, m->stack);
  return 0;
}

void matcher_free(struct matcher *m) {
  pcre2_match_data_free(m->md);
  pcre2_jit_stack_free(m->stack);
  pcre2_match_context_free(m->mctx);
  memset(m, 0, sizeof *m);
}

int matcher_run(struct matcher *m, const pcre2_code *code, const char *s, size_t n, size_t start, uint32_t opts) {
  return pcre2_match(code, (PCRE2_SPTR)s, n, start, opts | PCRE2_NO_UTF_CHECK, m->md, m->mctx);
}

bool match_rc_is_limit(int rc) {
  return rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
         rc == PCRE2_ERROR_JIT_STACKLIMIT;
}

void match_rc_message(int rc, char *msg, size_t msglen) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(rc, buf, sizeof buf) < 0) strcpy((char *)buf, "match error");
  snprintf(msg, msglen, "%s", (char *)buf);
}

/* ---- glob: `*` any run, `?` one character, the rest literal, whole name ---- */

static size_t utf8_step(const char *s) {
  size_t k = 1;
  while (((unsigned char)s[k] & 0xC0) == 0x80) k++;
  return k;
}

bool glob_match(const char *g, const char *name) {
  const char *star = NULL, *resume = NULL;
  while (*name) {
    if (*g == '*') {
      star = ++g;
      resume = name;
    } else if (*g == '?' || (*g && *g == *name)) {
      name += *g == '?' ? utf8_step(name) : 1;
      g++;
    } else if (star) {
      g = star;
      resume += utf8_step(resume);
      name = resume;
    } else {
      return false;
    }
  }
  while (*g == '*') g++;
  return *g == '\0';
}

/* ---- replacement template (§5.7) ---- */

static bool name_char(char ch) {
  return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
}

static int add_group(sbx_buf *out, const pcre2_code *code, pcre2_match_data *md, const char *subj, const char *name,
                     size_t nlen, sbx_error *err) {
  char tmp[256];
  int num = -1;
  bool digits = true;
  for (size_t i = 0; i < nlen; i++)
    if (name[i] < '0' || name[i] > '9') digits = false;
  if (nlen >= sizeof tmp) return 0; /* no group has such a name */
  memcpy(tmp, name, nlen);
  tmp[nlen] = '\0';
  if (digits) {
    if (nlen > 6) return 0;
    num = atoi(tmp);
  } else {
    num = pcre2_substring_number_from_name(code, (PCRE2_SPTR)tmp);
    if (num < 0) return 0;
  }
  if ((uint32_t)num >= pcre2_get_ovector_count(md)) return 0;
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
  if (ov[2 * num] == PCRE2_UNSET) return 0; /* did not participate */
  return sbx_buf_add(out, subj + ov[2 * num], ov[2 * num + 1] - ov[2 * num], err);
}

int expand_replacement(sbx_buf *out, const char *tpl, const pcre2_code *code, pcre2_match_data *md, const char *subj,
                       sbx_error *err) {
  const char *p = tpl;
  while (*p) {
    const char *d = strchr(p, '$');
    if (!d) return sbx_buf_adds(out, p, err);
    if (d > p && sbx_buf_add(out, p, (size_t)(d - p), err) < 0) return -1;
    p = d + 1;
    if (*p == '$') {
      if (sbx_buf_addc(out, '$', err) < 0) return -1;
      p++;
    } else if (*p == '{' && strchr(p, '}')) {
      const char *e = strchr(p, '}');
      if (add_group(out, code, md, subj, p + 1, (size_t)(e - p - 1), err) < 0) return -1;
      p = e + 1;
    } else if (name_char(*p)) {
      const char *e = p;
      while (name_char(*e)) e++;
      if (add_group(out, code, md, subj, p, (size_t)(e - p), err) < 0) return -1;
      p = e;
    } else if (sbx_buf_addc(out, '$', err) < 0) {
      return -1;
    }
  }
  return 0;
}
