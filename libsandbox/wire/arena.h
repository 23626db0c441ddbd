/* arena.h - the message arena (arena.c), shared by the full decoder and
 * the bulk fast path. */
#ifndef SBX_WIRE_ARENA_H
#define SBX_WIRE_ARENA_H

#include <sandbox/wire.h>

sbx_wire_arena *sbxi_arena_new(size_t first_block);
void *sbxi_arena_alloc(sbx_wire_arena *a, size_t n);
void sbxi_arena_free(sbx_wire_arena *a);

#endif
