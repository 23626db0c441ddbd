/* core/path.h - the one way libsandbox and its programs build a path.
 *
 * A path cut short by snprintf names another file: a mkdir, rename or
 * unlink would then act on the wrong one. sbxi_path_fmt formats into a
 * fixed buffer and fails instead when the result does not fit. Internal:
 * not exported from libsandbox.so; the programs link libsandbox.a.
 */
#ifndef SBX_CORE_PATH_H
#define SBX_CORE_PATH_H

#include <stddef.h>

#include <sandbox/error.h>

/* printf into out[cap]. 0 on success; SBX_E_NAMETOOLONG (err filled, out
 * set to "") when the result needs cap bytes or more. */
int sbxi_path_fmt(char *out, size_t cap, sbx_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
