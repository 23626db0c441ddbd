/* replace.c - the atomic "rename over" behind fs_write's commit and the
 * fs_push merge, without ext4's replace-via-rename flush.
 *
 * ext4 (auto_da_alloc, on by default) starts writeback of the whole source
 * file inside rename(2) whenever the rename replaces an existing file. For a
 * freshly written 128 MiB file that is block allocation and I/O submission
 * for all of it, 80-100 ms here, before the caller hears anything; the spec
 * asks for no fsync (§5.5), and this hidden one cost more than the write.
 * renameat2(RENAME_EXCHANGE) is just as atomic for anyone looking at the
 * target name (it names the old file, then the new one, never nothing), is
 * not subject to that heuristic, and leaves the old file under the source
 * name, which is then unlinked. The unlink frees the old file's page cache
 * and blocks: a few ms.
 *
 * The exchange would also succeed against a directory, where rename(2) must
 * fail, so it is used only when the target is a non-directory, and a target
 * that turned into a directory in between is swapped back and handed to
 * plain rename for its verdict. Filesystems without RENAME_EXCHANGE
 * (EINVAL) and missing targets take plain rename too. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "silkd.h"

int replace_at(int fromdir, const char *from, int todir, const char *to) {
  struct stat st;
  if (fstatat(todir, to, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))
    return renameat(fromdir, from, todir, to);
  if (renameat2(fromdir, from, todir, to, RENAME_EXCHANGE) < 0) return renameat(fromdir, from, todir, to);
  /* `from` now names what `to` held. */
  if (fstatat(fromdir, from, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
    if (renameat2(fromdir, from, todir, to, RENAME_EXCHANGE) == 0) return renameat(fromdir, from, todir, to);
    /* Cannot swap back: the new file is in place, so report success and keep the old directory. */
    sbx_warn("replace %s: left the directory that appeared there at %s", to, from);
    return 0;
  }
  if (unlinkat(fromdir, from, 0) < 0 && errno != ENOENT)
    sbx_warn("replace %s: cannot remove the old file at %s: %s", to, from, strerror(errno));
  return 0;
}
