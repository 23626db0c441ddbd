/* The error convention: negative code + message in a caller-owned struct. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <sandbox/error.h>

int sbx_verr(sbx_error *err, int code, const char *fmt, va_list ap) {
  if (err) {
    err->code = code;
    err->os_errno = 0;
    err->detail = 0;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  }
  return code;
}

int sbx_err(sbx_error *err, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sbx_verr(err, code, fmt, ap);
  va_end(ap);
  return code;
}

int sbx_err_os(sbx_error *err, int errnum, const char *fmt, ...) {
  if (err) {
    char ctx[SBX_ERROR_MSG_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    err->code = errnum == ENOENT ? SBX_E_NOTFOUND : SBX_E_OS;
    err->os_errno = errnum;
    err->detail = 0;
    snprintf(err->msg, sizeof err->msg, "%s: %s (os error %d)", ctx, strerror(errnum), errnum);
    return err->code;
  }
  return errnum == ENOENT ? SBX_E_NOTFOUND : SBX_E_OS;
}

int sbx_err_wrap(sbx_error *err, const char *fmt, ...) {
  if (!err) return SBX_E_INTERNAL;
  char prefix[SBX_ERROR_MSG_MAX / 2];
  char old[SBX_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  /* Cut at the end when both do not fit: the start says what failed. */
  if (snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old) < 0) err->msg[0] = '\0';
  return err->code;
}

void sbx_err_clear(sbx_error *err) {
  if (err) {
    err->code = SBX_OK;
    err->os_errno = 0;
    err->detail = 0;
    err->msg[0] = '\0';
  }
}

const char *sbx_code_name(int code) {
  switch (code) {
  case SBX_OK: return "ok";
  case SBX_E_INVAL: return "invalid";
  case SBX_E_NOMEM: return "nomem";
  case SBX_E_PARSE: return "parse";
  case SBX_E_TOOBIG: return "too_big";
  case SBX_E_OS: return "os";
  case SBX_E_NOTFOUND: return "not_found";
  case SBX_E_UNSUPPORTED: return "unsupported";
  case SBX_E_PROTO: return "protocol";
  case SBX_E_TIMEOUT: return "timeout";
  case SBX_E_EXISTS: return "exists";
  case SBX_E_BUSY: return "busy";
  case SBX_E_REMOTE: return "remote";
  case SBX_E_AUTH: return "auth";
  case SBX_E_INTERNAL: return "internal";
  case SBX_E_NAMETOOLONG: return "name_too_long";
  default: return "unknown";
  }
}
