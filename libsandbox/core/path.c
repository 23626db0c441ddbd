/* path.c - checked path formatting (see path.h). */
#include "path.h"

#include <stdarg.h>
#include <stdio.h>

int sbxi_path_fmt(char *out, size_t cap, sbx_error *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = cap ? vsnprintf(out, cap, fmt, ap) : -1;
  va_end(ap);
  if (n >= 0 && (size_t)n < cap) return 0;
  if (cap) out[0] = '\0';
  /* The start of the would-be path says which one failed. */
  char head[64];
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  return sbx_err(err, SBX_E_NAMETOOLONG, "path too long (%d bytes, limit %zu): %s...", n, cap ? cap - 1 : 0, head);
}
