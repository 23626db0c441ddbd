/* id.c - the sandbox id format of the utility layer (see util.h): the
 * lease table makes ids, sandboxd checks the ones clients send. */
#include <string.h>

#include <sandbox/pool.h>

#include "util.h"

bool sbxi_lease_id_valid(const char *s) {
  const size_t pl = sizeof SBXI_LEASE_ID_PREFIX - 1;
  if (strncmp(s, SBXI_LEASE_ID_PREFIX, pl) != 0 || strlen(s) != SBX_LEASE_ID_LEN) return false;
  for (size_t i = pl; i < SBX_LEASE_ID_LEN; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}
