/* sandbox/error.h - the one error convention of libsandbox.
 *
 * Every fallible function returns 0 (or a count) on success and a negative
 * sbx_code on failure, and fills the caller's sbx_error with the code and a
 * human message (as crun's libcrun_error_t). The message is fixed-size so
 * that reporting an error never allocates. Passing err = NULL is allowed
 * where a caller only wants the code.
 */
#ifndef SANDBOX_ERROR_H
#define SANDBOX_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SBX_ERROR_MSG_MAX 1024

typedef enum sbx_code {
  SBX_OK = 0,
  SBX_E_INVAL = -1,       /* bad argument from the caller */
  SBX_E_NOMEM = -2,       /* allocation failed or a hard cap was hit */
  SBX_E_PARSE = -3,       /* malformed input: JSON, frame, config, archive */
  SBX_E_TOOBIG = -4,      /* input over its size cap */
  SBX_E_OS = -5,          /* a system call failed; os_errno says which */
  SBX_E_NOTFOUND = -6,    /* the thing named does not exist */
  SBX_E_UNSUPPORTED = -7, /* not available here (driver, kernel, build) */
  SBX_E_PROTO = -8,       /* the peer broke the protocol */
  SBX_E_TIMEOUT = -9,
  SBX_E_EXISTS = -10,
  SBX_E_BUSY = -11,       /* a limit or a state refuses it right now */
  SBX_E_REMOTE = -12,     /* the remote side answered with an error */
  SBX_E_AUTH = -13,
  SBX_E_INTERNAL = -14,
  SBX_E_NAMETOOLONG = -15, /* a path or name built from parts exceeds its buffer */
} sbx_code;

typedef struct sbx_error {
  int code;     /* a negative sbx_code, or SBX_OK */
  int os_errno; /* the errno behind the failure, and only an errno; 0 if none */
  int detail;   /* SBX_E_REMOTE: the silkd error kind (sbx_wire_error_kind) or
                   the HTTP status; SBX_E_BUSY from a lease reservation: the
                   cap hit (SBX_LEASE_CAP_*); 0 otherwise */
  char msg[SBX_ERROR_MSG_MAX];
} sbx_error;

/* Fill err (if non-NULL) and return code, so call sites read
 * `return sbx_err(err, SBX_E_INVAL, "bad size %zu", n);`. */
int sbx_err(sbx_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int sbx_verr(sbx_error *err, int code, const char *fmt, va_list ap);

/* "<context>: <strerror> (os error N)", the format of the silkd wire spec. */
int sbx_err_os(sbx_error *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix the existing message with more context ("claim: <old msg>"). */
int sbx_err_wrap(sbx_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void sbx_err_clear(sbx_error *err);

/* Stable short name of a code ("parse", "os", ...). */
const char *sbx_code_name(int code);

#ifdef __cplusplus
}
#endif
#endif
