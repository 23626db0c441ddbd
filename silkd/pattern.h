/* pattern.h - regex, UTF-8, glob and template helpers of fs_find and
 * fs_replace (pattern.c). */
#ifndef SILKD_PATTERN_H
#define SILKD_PATTERN_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <sandbox/core.h>
#include <sandbox/error.h>

struct pattern {
  pcre2_code *code;  /* the pattern as given */
  pcre2_code *multi; /* find only: multiline twin for whole-file searches, or NULL */
};

/* Compile; on a rejected pattern fill msg with the compiler's message. */
int pattern_compile(struct pattern *pt, const char *src, bool for_lines, char *msg, size_t msglen);
void pattern_free(struct pattern *pt);

/* Per-thread match state with the limits set. */
struct matcher {
  pcre2_match_context *mctx;
  pcre2_jit_stack *stack;
  pcre2_match_data *md;
};
int matcher_init(struct matcher *m, const struct pattern *pt);
void matcher_free(struct matcher *m);
/* pcre2_match on valid UTF-8: > 0 matched, PCRE2_ERROR_NOMATCH, or an error. */
int matcher_run(struct matcher *m, const pcre2_code *code, const char *s, size_t n, size_t start, uint32_t opts);
bool match_rc_is_limit(int rc);
void match_rc_message(int rc, char *msg, size_t msglen);

bool glob_match(const char *glob, const char *name);
/* Append the template expanded for the match in md ($$, $name, ${name}). */
int expand_replacement(sbx_buf *out, const char *tpl, const pcre2_code *code, pcre2_match_data *md, const char *subj,
                       sbx_error *err);

#endif
