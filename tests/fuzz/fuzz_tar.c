/* tests/fuzz/fuzz_tar.c - libFuzzer target for silkd's fs_push extraction:
 * the input is the uploaded tar stream.
 *
 * As silkd's fs_push does, the bytes go into the upload queue (tarq_put,
 * tarq_end) and tar_extract_worker extracts them into a staging directory;
 * here the worker runs on the harness's thread, since the whole upload is
 * queued before it starts. The staging directory sits beside a "fence"
 * directory inside the harness's temp dir. Checked: the worker reports its
 * verdict on the notify pipe, a failure carries a message, and nothing is
 * ever written outside the staging directory (the fence stays empty and the
 * temp dir holds only the two). The staging tree is removed after each
 * input. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <string.h>
#include <sys/stat.h>

#include "core/path.h"
#include "fuzz_util.h"
#include "silkd.h"
#include "tar.h"

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  if (flag == FTW_DP) {
    if (rmdir(path) < 0) FUZZ_CHECK(errno == ENOENT, "rmdir %s: %s", path, strerror(errno));
  } else if (unlink(path) < 0) {
    FUZZ_CHECK(errno == ENOENT, "unlink %s: %s", path, strerror(errno));
  }
  return 0;
}

/* Entries in dir (not counting . and ..). */
static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  FUZZ_CHECK(d != NULL, "opendir %s: %s", dir, strerror(errno));
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char stage[4096], fence[4096];
  FUZZ_CHECK(sbxi_path_fmt(stage, sizeof stage, NULL, "%s/stage", fuzz_tmpdir()) == 0, "stage path too long");
  FUZZ_CHECK(sbxi_path_fmt(fence, sizeof fence, NULL, "%s/fence", fuzz_tmpdir()) == 0, "fence path too long");
  if (mkdir(fence, 0755) < 0) FUZZ_CHECK(errno == EEXIST, "mkdir %s: %s", fence, strerror(errno));
  FUZZ_CHECK(mkdir(stage, 0755) == 0, "mkdir %s: %s", stage, strerror(errno));

  int notify[2];
  FUZZ_CHECK(pipe2(notify, O_CLOEXEC | O_NONBLOCK) == 0, "pipe: %s", strerror(errno));
  struct tar_job j = {.root_fd = open(stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC), .pipe_fd = -1,
                      .notify_fd = notify[1]};
  FUZZ_CHECK(j.root_fd >= 0, "open %s: %s", stage, strerror(errno));
  j.q = tarq_new(notify[1]);
  tarq_put(j.q, data, size); /* the harness's inputs stay below the queue's 8 MiB */
  tarq_end(j.q);
  tar_extract_worker(&j);

  char verdict = 0;
  FUZZ_CHECK(read(notify[0], &verdict, 1) == 1 && verdict == TARQ_NOTIFY_RESULT, "no verdict on the notify pipe");
  FUZZ_CHECK(j.rc == 0 || j.rc == -1, "rc %d", j.rc);
  FUZZ_CHECK(j.rc == 0 || j.msg[0] != '\0', "a failed extraction without a message");
  FUZZ_CHECK(!j.bad_request || j.rc == -1, "an unsafe member reported with success");
  FUZZ_CHECK(count_entries(fence) == 0, "extraction wrote outside the staging directory (into %s)", fence);
  FUZZ_CHECK(count_entries(fuzz_tmpdir()) == 2, "extraction wrote beside the staging directory");

  tarq_free(j.q);
  close(j.root_fd);
  close(notify[0]);
  close(notify[1]);
  /* modes from the archive may deny access to the owner: make the tree
   * removable first (as root this is moot, but the harness may run as a user) */
  FUZZ_CHECK(nftw(stage, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0, "removing %s: %s", stage, strerror(errno));
  return 0;
}
