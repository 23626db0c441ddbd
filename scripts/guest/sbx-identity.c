/* sbx-identity: give a freshly restored guest its own identity, in one
 * exec (under TCG every process costs milliseconds).
 *
 *   sbx-identity HOSTNAME MACHINE_ID UNIX_NS   < random bytes
 *
 * Clones of one golden start with the same kernel RNG state; writing to
 * /dev/urandom only mixes the input pool, so the bytes from stdin are
 * credited (RNDADDENTROPY) and the CRNG is reseeded at once
 * (RNDRESEEDCRNG): the very next read already differs between clones. */
#include <fcntl.h>
#include <linux/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static int write_file(const char *path, const char *s) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
  if (fd < 0) return -1;
  size_t n = strlen(s);
  int rc = write(fd, s, n) == (ssize_t)n && write(fd, "\n", 1) == 1 ? 0 : -1;
  close(fd);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: sbx-identity HOSTNAME MACHINE_ID UNIX_NS < random\n");
    return 2;
  }
  int rc = 0;
  struct {
    struct rand_pool_info info;
    unsigned char buf[256];
  } rp;
  ssize_t n = read(0, rp.buf, sizeof rp.buf);
  if (n > 0) {
    rp.info.entropy_count = (int)n * 8;
    rp.info.buf_size = (int)n;
    int fd = open("/dev/urandom", O_RDWR | O_CLOEXEC);
    if (fd < 0 || ioctl(fd, RNDADDENTROPY, &rp.info) < 0 || ioctl(fd, RNDRESEEDCRNG) < 0) {
      perror("sbx-identity: reseed");
      rc = 1;
    }
    if (fd >= 0) close(fd);
  }
  if (sethostname(argv[1], strlen(argv[1])) < 0) {
    perror("sbx-identity: sethostname");
    rc = 1;
  }
  write_file("/etc/hostname", argv[1]);
  if (write_file("/etc/machine-id", argv[2]) < 0) {
    perror("sbx-identity: machine-id");
    rc = 1;
  }
  unsigned long long ns = strtoull(argv[3], NULL, 10);
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  if (ns && clock_settime(CLOCK_REALTIME, &ts) < 0) {
    perror("sbx-identity: clock_settime");
    rc = 1;
  }
  return rc;
}
