/* tests/fuzz/fuzz_config.c - libFuzzer target for sandboxd's configuration
 * file parser: the input is the file's text, given to config_parse (the
 * entry point config_load_file uses after reading the file).
 *
 * A config that parses must have what sandboxd relies on after loading:
 * a listen port in range, a driver, a data dir, and pools whose warm counts
 * are not negative. Everything is freed: LeakSanitizer sees what is not. */
#include <string.h>

#include "config.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct config *c = NULL;
  sbx_error err;
  sbx_err_clear(&err);
  int rc = config_parse((const char *)data, size, &c, &err);
  FUZZ_CHECK(memchr(err.msg, '\0', sizeof err.msg) != NULL, "error text not terminated");
  if (rc == 0) {
    FUZZ_CHECK(c != NULL, "config_parse succeeded without a config");
    FUZZ_CHECK(c->listen_port >= 0 && c->listen_port <= 65535, "listen port %d", c->listen_port);
    FUZZ_CHECK(c->listen_host && c->driver && c->data_dir, "a required setting is missing");
    for (size_t i = 0; i < c->npools; i++)
      FUZZ_CHECK(c->pools[i].pc.warm >= 0, "pool %zu warm %d", i, (int)c->pools[i].pc.warm);
    config_free(c);
  } else {
    FUZZ_CHECK(err.msg[0] != '\0', "config_parse failed (%d) without a message", rc);
    FUZZ_CHECK(err.code == rc, "config_parse returned %d but err says %d", rc, err.code);
  }
  return 0;
}
