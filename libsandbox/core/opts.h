/* Growable option structs (docs/client.md, "Option structs and the ABI").
 *
 * Every struct a caller fills and hands to the library starts with
 * `size_t struct_size`, set by the struct's SBX_*_INIT macro to the size
 * the caller was compiled with. The library never reads the caller's copy
 * past that size: each entry point first copies it into a zeroed struct of
 * the library's own size, so fields appended in a later version read as
 * zero (their default) for an older caller, and a newer caller's extra
 * fields are accepted only while they are zero (what an older library
 * cannot honour, it refuses instead of ignoring). */
#ifndef SBX_CORE_OPTS_H
#define SBX_CORE_OPTS_H

#include <stddef.h>

#include <sandbox/error.h>

/* Bytes from the start of type to the end of field: the size of the
 * struct's first release, the smallest struct_size accepted. */
#define SBXI_SIZE_TO(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* Copy the caller's struct src into dst (the library's size dst_size) as
 * above; what names the struct in errors. src NULL: dst is all zeros
 * except struct_size (the caller decides whether NULL is allowed).
 * SBX_E_INVAL when struct_size is below min_size (an uninitialised struct,
 * most often) or absurd; SBX_E_UNSUPPORTED when a field this library does
 * not know is set. dst->struct_size is then dst_size. */
int sbxi_opts_load(void *dst, size_t dst_size, const void *src, size_t min_size, const char *what,
                   sbx_error *err);

/* The i-th element of an array of such structs: the stride is the first
 * element's struct_size (the caller's sizeof), and every element must
 * carry the same one. */
int sbxi_opts_load_at(void *dst, size_t dst_size, const void *array, size_t i, size_t min_size, const char *what,
                      sbx_error *err);

#endif
