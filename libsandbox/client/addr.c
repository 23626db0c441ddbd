/* Addresses of §9.1, header-value checks and the typed-error helpers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_priv.h"

int sbx_addr_parse(const char *s, const sbx_addr *inherit, sbx_addr *out, sbx_error *err) {
  memset(out, 0, sizeof *out);
  if (!s) return sbx_err(err, SBX_E_INVAL, "address: missing");
  while (*s == ' ' || *s == '\t') s++;
  size_t len = strcspn(s, ","); /* a seed list: only its first entry */
  while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
  if (len == 0) return sbx_err(err, SBX_E_INVAL, "address: empty");
  if (strncmp(s, "unix:", 5) == 0) {
    if (len - 5 == 0 || len - 5 >= sizeof out->host) return sbx_err(err, SBX_E_INVAL, "address: bad unix path");
    strcpy(out->scheme, "unix");
    memcpy(out->host, s + 5, len - 5);
    return 0;
  }
  const char *p = s, *end = s + len;
  uint16_t defport = 0;
  if (len > 7 && strncmp(p, "http://", 7) == 0) {
    strcpy(out->scheme, "http");
    p += 7;
    defport = 80;
  } else if (len > 8 && strncmp(p, "https://", 8) == 0) {
    strcpy(out->scheme, "https");
    p += 8;
    defport = 443;
  } else if (memmem(p, len, "://", 3)) {
    return sbx_err(err, SBX_E_INVAL, "address %.*s: unsupported scheme", (int)len, s);
  } else {
    snprintf(out->scheme, sizeof out->scheme, "%s",
             inherit && strcmp(inherit->scheme, "unix") != 0 ? inherit->scheme : "http");
  }
  /* an origin only: a lone trailing slash is tolerated, nothing else */
  if (end > p && end[-1] == '/') end--;
  for (const char *q = p; q < end; q++) {
    if (*q == '/' || *q == '?' || *q == '#' || *q == '@')
      return sbx_err(err, SBX_E_INVAL, "address %.*s: only scheme://host:port is allowed", (int)len, s);
    if ((unsigned char)*q <= ' ' || *q == 0x7f)
      return sbx_err(err, SBX_E_INVAL, "address %.*s: bad character", (int)len, s);
  }
  const char *host = p, *hend, *portp = NULL;
  if (p < end && *p == '[') {
    hend = memchr(p, ']', (size_t)(end - p));
    if (!hend) return sbx_err(err, SBX_E_INVAL, "address %.*s: unclosed [", (int)len, s);
    host = p + 1;
    if (hend + 1 < end) {
      if (hend[1] != ':') return sbx_err(err, SBX_E_INVAL, "address %.*s: junk after ]", (int)len, s);
      portp = hend + 2;
    }
  } else {
    hend = memchr(p, ':', (size_t)(end - p));
    if (hend) {
      if (memchr(hend + 1, ':', (size_t)(end - hend - 1)))
        return sbx_err(err, SBX_E_INVAL, "address %.*s: IPv6 hosts need brackets", (int)len, s);
      portp = hend + 1;
    } else {
      hend = end;
    }
  }
  size_t hlen = (size_t)(hend - host);
  if (hlen == 0 || hlen >= sizeof out->host) return sbx_err(err, SBX_E_INVAL, "address %.*s: bad host", (int)len, s);
  memcpy(out->host, host, hlen);
  if (portp) {
    if (portp >= end) return sbx_err(err, SBX_E_INVAL, "address %.*s: empty port", (int)len, s);
    unsigned long v = 0;
    for (const char *q = portp; q < end; q++) {
      if (*q < '0' || *q > '9' || (v = v * 10 + (unsigned long)(*q - '0')) > 65535)
        return sbx_err(err, SBX_E_INVAL, "address %.*s: bad port", (int)len, s);
    }
    if (v == 0) return sbx_err(err, SBX_E_INVAL, "address %.*s: bad port", (int)len, s);
    out->port = (uint16_t)v;
  } else if (defport) {
    out->port = defport;
  } else {
    return sbx_err(err, SBX_E_INVAL, "address %.*s: host:port expected", (int)len, s);
  }
  return 0;
}

void sbx_addr_origin(const sbx_addr *a, char *buf, size_t n) {
  if (strcmp(a->scheme, "unix") == 0) {
    snprintf(buf, n, "unix:%s", a->host);
  } else if (strchr(a->host, ':')) {
    snprintf(buf, n, "%s://[%s]:%u", a->scheme, a->host, a->port);
  } else {
    snprintf(buf, n, "%s://%s:%u", a->scheme, a->host, a->port);
  }
}

int sbx_client_check_header_value(const char *what, const char *s, size_t len, sbx_error *err) {
  if (!s || len == 0) return sbx_err(err, SBX_E_INVAL, "%s: empty", what);
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
      return sbx_err(err, SBX_E_INVAL, "%s: contains CR, LF or NUL", what);
  }
  return 0;
}

sbx_client_err_kind sbx_client_error_kind(const sbx_error *err) {
  if (!err || err->code == SBX_OK) return SBX_CLIENT_ERR_NONE;
  if (err->code != SBX_E_REMOTE) return SBX_CLIENT_ERR_OTHER;
  if (err->detail >= SBX_CLIENT_EXIT_BASE) return SBX_CLIENT_ERR_EXIT;
  if (err->detail >= 100 && err->detail <= 599) return SBX_CLIENT_ERR_API;
  if (err->detail >= 0 && err->detail <= 3) return SBX_CLIENT_ERR_SILKD;
  return SBX_CLIENT_ERR_OTHER;
}

int sbx_client_error_exit_code(const sbx_error *err) {
  return err ? err->detail - SBX_CLIENT_EXIT_BASE - 256 : 0;
}
