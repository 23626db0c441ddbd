/* Growable option structs: the one copy-in rule (see opts.h). */
#include <string.h>

#include "opts.h"

/* Larger than any option struct will grow to; a bigger struct_size is
 * garbage, not a newer caller. */
#define OPTS_SIZE_MAX 4096

static size_t size_of(const void *src) {
  size_t n;
  memcpy(&n, src, sizeof n);
  return n;
}

int sbxi_opts_load(void *dst, size_t dst_size, const void *src, size_t min_size, const char *what,
                   sbx_error *err) {
  memset(dst, 0, dst_size);
  memcpy(dst, &dst_size, sizeof dst_size);
  if (!src) return 0;
  size_t n = size_of(src);
  if (n < min_size || n > OPTS_SIZE_MAX)
    return sbx_err(err, SBX_E_INVAL, "%s: struct_size %zu is not a size this struct has had (%zu..%zu); "
                   "initialise it with its SBX_..._INIT macro", what, n, min_size, dst_size);
  for (size_t i = dst_size; i < n; i++)
    if (((const unsigned char *)src)[i])
      return sbx_err(err, SBX_E_UNSUPPORTED, "%s: a field this libsandbox (%s) does not know is set (byte %zu)",
                     what, SBX_VERSION, i);
  memcpy((char *)dst + sizeof n, (const char *)src + sizeof n, (n < dst_size ? n : dst_size) - sizeof n);
  return 0;
}

int sbxi_opts_load_at(void *dst, size_t dst_size, const void *array, size_t i, size_t min_size, const char *what,
                      sbx_error *err) {
  size_t stride = size_of(array);
  if (stride < min_size || stride > OPTS_SIZE_MAX) return sbxi_opts_load(dst, dst_size, array, min_size, what, err);
  const void *el = (const char *)array + i * stride;
  if (size_of(el) != stride)
    return sbx_err(err, SBX_E_INVAL, "%s[%zu]: struct_size %zu differs from the array's first (%zu)", what, i,
                   size_of(el), stride);
  return sbxi_opts_load(dst, dst_size, el, min_size, what, err);
}
