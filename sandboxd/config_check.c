/* config_check.c - what --check-config looks at beyond the file itself:
 * the templates its pools name. A pool whose template is missing would
 * otherwise load, then fail every golden build and every claim. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <sandbox/core.h>

#include "config.h"
#include "core/path.h"

/* Both drivers take "host" as built in and any other name as
 * <templates_dir>/<name>/rootfs (a directory, or a link to one, as
 * a registered template leaves it); the qemu driver images that root. */
static bool template_present(const char *templates_dir, const char *name) {
  if (strcmp(name, "host") == 0) return true;
  char root[PATH_MAX];
  struct stat st;
  return sbxi_path_fmt(root, sizeof root, NULL, "%s/%s/rootfs", templates_dir, name) == 0 && stat(root, &st) == 0 &&
         S_ISDIR(st.st_mode);
}

int config_check_templates(const struct config *c, sbx_error *err) {
  for (size_t i = 0; i < c->npools; i++) {
    const sbx_pool_key *k = &c->pools[i].pc.key;
    if (template_present(c->templates_dir, k->tmpl)) continue;
    return sbx_err(err, SBX_E_NOTFOUND, "pools[%zu] (%s|%s|%s): template \"%s\" does not exist under %s", i, k->tmpl,
                   k->net, k->size, k->tmpl, c->templates_dir);
  }
  return 0;
}
