/* util.h - libsandbox's one internal utility layer.
 *
 * The small helpers the library and its programs (silkd, sandboxd, sbxctl,
 * the benches and the tests) would otherwise each copy live here, once:
 * fd and file helpers, UTF-8 validation and the sandbox id format. A helper
 * that a second place needs moves here instead of being copied.
 *
 * Internal: not under include/, not installed, and not exported from
 * libsandbox.so (the version script lets only sbx_* out), so the names
 * carry the sbxi_ prefix. Programs link sandbox_static and include this
 * header as "util/util.h". The size tiers are public already
 * (sbx_size_tiers, sbx_size_tier_get in <sandbox/driver.h>). */
#ifndef SBX_UTIL_H
#define SBX_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <sandbox/error.h>

/* ---- fds and files (fd.c) ---- */

/* write(2) until all n bytes are out, retrying EINTR: 0, or -1 with errno. */
int sbxi_write_all(int fd, const void *p, size_t n);

/* openat2 of rel beneath root with no symlink, magic link or "..", so the
 * result is inside root or the call fails; O_CLOEXEC is added. */
int sbxi_open_beneath(int root, const char *rel, int flags);

/* mkdir -p of rel beneath root, one component at a time through fds, so
 * no component is ever resolved through a symlink; then an O_PATH fd on
 * the final directory, or -1 with errno. rel is cut up in place. Makes no
 * allocation: the jail's child runs it between clone and exec. */
int sbxi_mkdirs_beneath(int root, char *rel, unsigned mode);

/* pwrite(2) until all n bytes are at off, retrying EINTR: 0, or -1 with
 * errno. */
int sbxi_pwrite_all(int fd, const void *p, size_t n, off_t off);

/* mkdir -p with mode for each created directory: 0, or -1 with errno
 * (EEXIST when a component exists and is not a directory). */
int sbxi_mkdirs(const char *path, unsigned mode);
/* The same, reporting "mkdir <path>" through err. */
int sbxi_mkdir_p(const char *path, unsigned mode, sbx_error *err);

/* Replace dirfd/name with data atomically: write dirfd/tmp (mode, created
 * or truncated, O_NOFOLLOW), fsync it when sync, rename it over name, then
 * fsync the directory when sync. tmp is removed on failure. 0, or -1 with
 * errno; *step (when not NULL) names what failed: "create", "write",
 * "rename" or "fsync". dirfd may be AT_FDCWD. */
int sbxi_write_file_atomic(int dirfd, const char *name, const char *tmp, const void *data, size_t len,
                           unsigned mode, bool sync, const char **step);

/* ---- UTF-8 (utf8.c) ---- */

/* Length of the valid UTF-8 sequence at s (first byte >= 0x80), or 0 if
 * it is invalid, overlong, a surrogate or above U+10FFFF. */
size_t sbxi_utf8_seq(const unsigned char *s, size_t avail);
/* Length of the longest valid UTF-8 prefix of p (n when all of it is). */
size_t sbxi_utf8_valid_len(const char *p, size_t n);
/* p with every byte that starts no valid sequence replaced by U+FFFD,
 * into dst (room for 3 * n bytes); returns the length written. */
size_t sbxi_utf8_repair(const char *p, size_t n, char *dst);

/* ---- the sandbox id (id.c) ---- */

/* A lease's id as sandboxd hands it out: "sb_" and 16 lowercase hex
 * digits (SBX_LEASE_ID_LEN). */
#define SBXI_LEASE_ID_PREFIX "sb_"
bool sbxi_lease_id_valid(const char *s);

#endif
