/* config_json.h - typed JSON field readers shared by config.c and
 * config_pools.c. Each returns 0, or -1 with a message in errbuf. */
#ifndef SANDBOXD_CONFIG_JSON_H
#define SANDBOXD_CONFIG_JSON_H

#include <stddef.h>

#include <jansson.h>

int config_fail(char *errbuf, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An integer >= min that fits an int; what names the field in the message. */
int config_get_int(const json_t *v, const char *what, int min, int *out, char *errbuf, size_t errlen);

#endif
