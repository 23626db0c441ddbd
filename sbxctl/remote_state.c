/* The tokens of the sandboxes sbxctl claimed, in a 0600 JSON file:
 * $XDG_STATE_HOME/sbxctl/tokens.json (default ~/.local/state/...).
 * {"sb_...":{"token":"...","owner":"http://host:port"}, ...}
 * Writes go through a temporary file and a rename so a crash never leaves
 * half a file; concurrent writers may lose an entry, not the file. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "remote.h"
#include "core/path.h"

static int state_path(char *path, size_t n, bool create_dir) {
  const char *xdg = getenv("XDG_STATE_HOME");
  const char *home = getenv("HOME");
  char dir[PATH_MAX];
  if (xdg && *xdg) {
    if (sbxi_path_fmt(dir, sizeof dir, NULL, "%s/sbxctl", xdg) < 0) return -1;
  } else if (home && *home) {
    if (sbxi_path_fmt(dir, sizeof dir, NULL, "%s/.local/state/sbxctl", home) < 0) return -1;
  } else {
    return -1;
  }
  if (create_dir) { /* mkdir -p, private */
    for (char *p = dir + 1; *p; p++) {
      if (*p != '/') continue;
      *p = 0;
      mkdir(dir, 0700);
      *p = '/';
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) return -1;
  }
  return sbxi_path_fmt(path, n, NULL, "%s/tokens.json", dir) < 0 ? -1 : 0;
}

static json_t *state_load(void) {
  char path[PATH_MAX];
  json_t *j = NULL;
  if (state_path(path, sizeof path, false) == 0) j = json_load_file(path, 0, NULL);
  if (!json_is_object(j)) {
    json_decref(j);
    j = json_object();
  }
  return j;
}

static int state_store(json_t *j) {
  char path[PATH_MAX], tmp[PATH_MAX + 32];
  if (state_path(path, sizeof path, true) < 0) return -1;
  if (sbxi_path_fmt(tmp, sizeof tmp, NULL, "%s.%d.tmp", path, (int)getpid()) < 0) return -1;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  int rc = json_dumpfd(j, fd, JSON_INDENT(1) | JSON_SORT_KEYS);
  if (close(fd) < 0) rc = -1;
  if (rc == 0) rc = rename(tmp, path);
  if (rc < 0) unlink(tmp);
  return rc;
}

int state_save(const char *id, const char *token, const char *owner) {
  json_t *j = state_load();
  json_object_set_new(j, id, json_pack("{s:s,s:s}", "token", token, "owner", owner ? owner : ""));
  int rc = state_store(j);
  json_decref(j);
  return rc;
}

int state_get(const char *id, char *token, size_t token_len, char *owner, size_t owner_len) {
  json_t *j = state_load();
  json_t *e = json_object_get(j, id);
  const char *t = json_string_value(json_object_get(e, "token"));
  const char *o = json_string_value(json_object_get(e, "owner"));
  int rc = -1;
  if (t && *t) {
    snprintf(token, token_len, "%s", t);
    snprintf(owner, owner_len, "%s", o ? o : "");
    rc = 0;
  }
  json_decref(j);
  return rc;
}

int state_forget(const char *id) {
  json_t *j = state_load();
  int rc = 0;
  if (json_object_get(j, id)) {
    json_object_del(j, id);
    rc = state_store(j);
  }
  json_decref(j);
  return rc;
}
