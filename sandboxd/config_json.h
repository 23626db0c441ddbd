/* config_json.h - typed JSON field readers shared by config.c and
 * config_pools.c. Each returns 0, or SBX_E_INVAL with err saying which field. */
#ifndef SANDBOXD_CONFIG_JSON_H
#define SANDBOXD_CONFIG_JSON_H

#include <stddef.h>

#include <jansson.h>

#include <sandbox/error.h>

/* An integer >= min that fits an int; what names the field in the message. */
int config_get_int(const json_t *v, const char *what, int min, int *out, sbx_error *err);

#endif
