/* File commands: cp (either direction, trees through tar push/pull), cat,
 * put. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "remote.h"
#include "core/path.h"

/* "ID:/path" -> id and path (pointing into a copy). Local paths have no
 * colon before their first slash. */
static bool split_remote(const char *arg, char *id, size_t id_len, const char **path) {
  const char *colon = strchr(arg, ':');
  const char *slash = strchr(arg, '/');
  if (!colon || colon == arg || (slash && slash < colon)) return false;
  if ((size_t)(colon - arg) >= id_len) return false;
  memcpy(id, arg, (size_t)(colon - arg));
  id[colon - arg] = 0;
  *path = colon + 1;
  return true;
}

static int simple_opts(rctx *r, int argc, char **argv, const char *cmd) {
  static const struct option opts[] = {COMMON_LONGOPTS, {0, 0, 0, 0}};
  int c, rc;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1)
    if ((rc = common_opt(r, c, cmd)) >= 0) return rc;
  return -1;
}

/* the last path component, ignoring trailing slashes; < 0 when too long */
static int base_of(const char *p, char *out, size_t n) {
  char tmp[PATH_MAX];
  if (sbxi_path_fmt(tmp, sizeof tmp, NULL, "%s", p) < 0) return -1;
  return sbxi_path_fmt(out, n, NULL, "%s", basename(tmp));
}

static int dir_of(const char *p, char *out, size_t n) {
  char tmp[PATH_MAX];
  if (sbxi_path_fmt(tmp, sizeof tmp, NULL, "%s", p) < 0) return -1;
  return sbxi_path_fmt(out, n, NULL, "%s", dirname(tmp));
}

static int cp_up(sbx_sandbox *s, const char *local, const char *rpath) {
  struct stat st;
  if (lstat(local, &st) < 0) return rfail("cp: %s: %s", local, strerror(errno));
  sbx_wire_file_info fi;
  sbx_error err;
  size_t rl = strlen(rpath);
  bool into = rl > 0 && rpath[rl - 1] == '/';
  if (!into && sbx_sandbox_stat(s, rpath, &fi, &err) == 0 && fi.kind == SBX_FILE_DIR) into = true;
  if (into) { /* like cp -r: SRC lands inside the directory under its own name */
    if (sbx_sandbox_push_path(s, local, rpath, &err) < 0) return rfail_err("cp", &err);
    return 0;
  }
  if (S_ISREG(st.st_mode)) {
    int fd = open(local, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rfail("cp: %s: %s", local, strerror(errno));
    int rc = sbx_sandbox_write_file_fd(s, rpath, fd, (int)(st.st_mode & 07777), &err);
    close(fd);
    return rc < 0 ? rfail_err("cp", &err) : 0;
  }
  /* a tree under a new name: push next to it, then rename into place */
  char rdir[PATH_MAX], rbase[PATH_MAX], lbase[PATH_MAX], from[PATH_MAX * 2];
  if (dir_of(rpath, rdir, sizeof rdir) < 0 || base_of(rpath, rbase, sizeof rbase) < 0 ||
      base_of(local, lbase, sizeof lbase) < 0)
    return rfail("cp: path too long");
  if (sbx_sandbox_push_path(s, local, rdir, &err) < 0) return rfail_err("cp", &err);
  if (strcmp(rbase, lbase) != 0) {
    if (sbxi_path_fmt(from, sizeof from, NULL, "%s/%s", rdir, lbase) < 0) return rfail("cp: path too long");
    if (sbx_sandbox_rename(s, from, rpath, &err) < 0) return rfail_err("cp", &err);
  }
  return 0;
}

static int cp_down(sbx_sandbox *s, const char *rpath, const char *local) {
  struct stat st;
  sbx_error err;
  if (stat(local, &st) == 0 && S_ISDIR(st.st_mode)) {
    if (sbx_sandbox_pull_path(s, rpath, local, &err) < 0) return rfail_err("cp", &err);
    return 0;
  }
  sbx_wire_file_info fi;
  if (sbx_sandbox_stat(s, rpath, &fi, &err) < 0) return rfail_err("cp", &err);
  if (fi.kind == SBX_FILE_FILE) {
    int fd = open(local, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, fi.mode & 07777);
    if (fd < 0) return rfail("cp: %s: %s", local, strerror(errno));
    int rc = sbx_sandbox_read_file_fd(s, rpath, fd, &err);
    fchmod(fd, fi.mode & 07777);
    close(fd);
    if (rc < 0) {
      unlink(local);
      return rfail_err("cp", &err);
    }
    return 0;
  }
  char ldir[PATH_MAX], lbase[PATH_MAX], rbase[PATH_MAX], from[PATH_MAX * 2];
  if (dir_of(local, ldir, sizeof ldir) < 0 || base_of(local, lbase, sizeof lbase) < 0 ||
      base_of(rpath, rbase, sizeof rbase) < 0)
    return rfail("cp: path too long");
  if (strcmp(lbase, rbase) == 0) {
    if (sbx_sandbox_pull_path(s, rpath, ldir, &err) < 0) return rfail_err("cp", &err);
    return 0;
  }
  /* a tree under a new name: unpack into a private directory beside it, then rename */
  char tmpl[PATH_MAX * 2];
  if (sbxi_path_fmt(tmpl, sizeof tmpl, NULL, "%s/.sbxctl-cp-XXXXXX", ldir) < 0) return rfail("cp: path too long");
  if (!mkdtemp(tmpl)) return rfail("cp: %s: %s", ldir, strerror(errno));
  int rc = 0;
  if (sbx_sandbox_pull_path(s, rpath, tmpl, &err) < 0) {
    rc = rfail_err("cp", &err);
  } else {
    if (sbxi_path_fmt(from, sizeof from, NULL, "%s/%s", tmpl, rbase) < 0) rc = rfail("cp: path too long");
    else if (rename(from, local) < 0) rc = rfail("cp: %s: %s", local, strerror(errno));
  }
  /* empty after a success; after a failure it keeps what was unpacked, for the user to inspect */
  if (rmdir(tmpl) < 0 && rc == 0) rc = rfail("cp: %s: %s", tmpl, strerror(errno));
  return rc;
}

int cmd_cp(rctx *r, int argc, char **argv) {
  int rc = simple_opts(r, argc, argv, "cp");
  if (rc >= 0) return rc;
  if (argc - optind != 2) return rusage("cp");
  const char *src = argv[optind], *dst = argv[optind + 1];
  char sid[128], did[128];
  const char *spath, *dpath;
  bool sr = split_remote(src, sid, sizeof sid, &spath), dr = split_remote(dst, did, sizeof did, &dpath);
  if (sr == dr || (sr && !*spath) || (dr && !*dpath)) return rusage("cp");
  sbx_sandbox *s;
  if (rsandbox(r, sr ? sid : did, &s)) return EXIT_FAIL;
  rc = sr ? cp_down(s, spath, dst) : cp_up(s, src, dpath);
  sbx_sandbox_free(s);
  return rc;
}

int cmd_cat(rctx *r, int argc, char **argv) {
  int rc = simple_opts(r, argc, argv, "cat");
  if (rc >= 0) return rc;
  char id[128];
  const char *path;
  if (argc - optind != 1 || !split_remote(argv[optind], id, sizeof id, &path) || !*path) return rusage("cat");
  sbx_sandbox *s;
  if (rsandbox(r, id, &s)) return EXIT_FAIL;
  sbx_error err;
  rc = sbx_sandbox_read_file_fd(s, path, STDOUT_FILENO, &err);
  sbx_sandbox_free(s);
  return rc < 0 ? rfail_err(argv[optind], &err) : 0; /* the file is named */
}

int cmd_put(rctx *r, int argc, char **argv) {
  static const struct option opts[] = {{"mode", required_argument, 0, 'm'}, COMMON_LONGOPTS, {0, 0, 0, 0}};
  int mode = -1, c, rc;
  while ((c = getopt_long(argc, argv, "hm:", opts, NULL)) != -1) {
    if (c == 'm') {
      char *end;
      long v = strtol(optarg, &end, 8);
      if (end == optarg || *end || v < 0 || v > 07777) return rbadopt("put", "--mode", "an octal mode (0-7777)", optarg);
      mode = (int)v;
    } else if ((rc = common_opt(r, c, "put")) >= 0) {
      return rc;
    }
  }
  char id[128];
  const char *path;
  if (argc - optind != 1 || !split_remote(argv[optind], id, sizeof id, &path) || !*path) return rusage("put");
  sbx_sandbox *s;
  if (rsandbox(r, id, &s)) return EXIT_FAIL;
  sbx_error err;
  rc = sbx_sandbox_write_file_fd(s, path, STDIN_FILENO, mode, &err);
  sbx_sandbox_free(s);
  return rc < 0 ? rfail_err(argv[optind], &err) : 0;
}

/* ---- ls ID:/path and stat ID:/path ---- */

static const char *kind_name(sbx_wire_file_kind k) {
  switch (k) {
  case SBX_FILE_FILE: return "file";
  case SBX_FILE_DIR: return "dir";
  case SBX_FILE_SYMLINK: return "symlink";
  default: return "other";
  }
}

typedef struct {
  bool json;
  json_t *arr;
} ls_out;

static int ls_entry(void *ud, const sbx_wire_dir_entry *e) {
  ls_out *o = ud;
  if (o->json)
    json_array_append_new(o->arr, json_pack("{s:s,s:s,s:I}", "name", e->name, "type", kind_name(e->kind), "size",
                                            (json_int_t)e->size));
  else printf("%-7s %12llu  %s%s\n", kind_name(e->kind), (unsigned long long)e->size, e->name,
              e->kind == SBX_FILE_DIR ? "/" : "");
  return 0;
}

int cmd_ls_path(rctx *r, const char *arg) {
  char id[128];
  const char *path;
  if (!split_remote(arg, id, sizeof id, &path) || !*path) return rusage("ls");
  sbx_sandbox *s;
  if (rsandbox(r, id, &s)) return EXIT_FAIL;
  ls_out o = {r->json, json_array()};
  sbx_error err;
  int rc = sbx_sandbox_list_dir(s, path, ls_entry, &o, &err);
  sbx_sandbox_free(s);
  if (rc == 0 && r->json) {
    json_t *j = json_pack("{s:s,s:O}", "path", path, "entries", o.arr);
    json_dumpf(j, stdout, JSON_COMPACT);
    putchar('\n');
    json_decref(j);
  }
  json_decref(o.arr);
  return rc < 0 ? rfail_err(arg, &err) : 0;
}

int cmd_stat(rctx *r, int argc, char **argv) {
  int rc = simple_opts(r, argc, argv, "stat");
  if (rc >= 0) return rc;
  char id[128];
  const char *path;
  if (argc - optind != 1 || !split_remote(argv[optind], id, sizeof id, &path) || !*path) return rusage("stat");
  sbx_sandbox *s;
  if (rsandbox(r, id, &s)) return EXIT_FAIL;
  sbx_wire_file_info fi;
  sbx_error err;
  rc = sbx_sandbox_stat(s, path, &fi, &err);
  sbx_sandbox_free(s);
  if (rc < 0) return rfail_err(argv[optind], &err);
  if (r->json) {
    char mode[8];
    snprintf(mode, sizeof mode, "%04o", fi.mode & 07777);
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:I}", "path", path, "type", kind_name(fi.kind), "size", (json_int_t)fi.size,
                          "mode", mode, "mtime_epoch_secs", (json_int_t)fi.mtime_epoch_secs);
    json_dumpf(j, stdout, JSON_COMPACT);
    putchar('\n');
    json_decref(j);
  } else {
    printf("path   %s\ntype   %s\nsize   %llu\nmode   %04o\nmtime  %llu\n", path, kind_name(fi.kind),
           (unsigned long long)fi.size, fi.mode & 07777, (unsigned long long)fi.mtime_epoch_secs);
  }
  return 0;
}
