/* utf8.c - UTF-8 validation and repair of the utility layer (see util.h):
 * the wire encoder, sandboxd's exec output and sbxctl's MCP text all judge
 * bytes the same way (as jansson does). */
#include <stdint.h>
#include <string.h>

#include "util.h"

size_t sbxi_utf8_seq(const unsigned char *s, size_t avail) {
  unsigned c = s[0];
  if (c >= 0xC2 && c <= 0xDF) {
    if (avail >= 2 && (s[1] & 0xC0) == 0x80) return 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    if (avail < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
    if (c == 0xED && s[1] >= 0xA0) return 0; /* UTF-16 surrogate */
    return 3;
  } else if (c >= 0xF0 && c <= 0xF4) {
    if (avail < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
    if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
    if (c == 0xF4 && s[1] >= 0x90) return 0; /* above U+10FFFF */
    return 4;
  }
  return 0;
}

/* 1..4 for a valid sequence at u (ASCII, NUL included, is 1), 0 if none. */
static size_t seq_at(const unsigned char *u, size_t avail) { return u[0] < 0x80 ? 1 : sbxi_utf8_seq(u, avail); }

size_t sbxi_utf8_valid_len(const char *p, size_t n) {
  const unsigned char *u = (const unsigned char *)p;
  size_t i = 0;
  while (i < n) {
    /* ASCII runs, eight bytes at a time: most text searched or sent is. */
    while (i + 8 <= n) {
      uint64_t w;
      memcpy(&w, u + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    size_t l = seq_at(u + i, n - i);
    if (!l) break;
    i += l;
  }
  return i;
}

size_t sbxi_utf8_repair(const char *p, size_t n, char *dst) {
  const unsigned char *u = (const unsigned char *)p;
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t l = seq_at(u + i, n - i);
    if (l) {
      memcpy(dst + o, p + i, l);
      o += l;
      i += l;
    } else {
      memcpy(dst + o, "\xef\xbf\xbd", 3);
      o += 3;
      i++;
    }
  }
  return o;
}
