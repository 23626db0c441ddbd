/* Secrets for ids and tokens (defined in lease.c): generic helpers that
 * sandboxd shares with the lease table, kept out of the public headers. */
#ifndef SBX_POOL_SECRET_H
#define SBX_POOL_SECRET_H

#include <stdbool.h>
#include <stddef.h>

#include <sandbox/error.h>

/* Equality of two NUL-terminated secrets that never stops at the first
 * differing byte: the time depends only on the lengths (spec §2.7). */
bool sbxi_secret_eq(const char *a, const char *b);
/* n random bytes as 2n lowercase hex + NUL, from getrandom(2). */
int sbxi_random_hex(char *out, size_t nbytes, sbx_error *err);

#endif
