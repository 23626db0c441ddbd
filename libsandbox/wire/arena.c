/* The arena decoded messages live in: a few blocks freed together, so
 * freeing a message is a walk over its blocks. Both decoders (decode.c and
 * the bulk fast path in bulk.c) allocate from it. */
#include <stddef.h>

#include <sandbox/core.h>

#include "arena.h"

typedef struct arena_block {
  struct arena_block *next;
  size_t size, used;
  max_align_t data[];
} arena_block;

struct sbx_wire_arena {
  arena_block *head;
};

sbx_wire_arena *sbxi_arena_new(size_t first_block) {
  if (first_block < 256) first_block = 256;
  /* The arena header and its first block share one allocation. */
  struct {
    sbx_wire_arena a;
    arena_block b;
  } *both = sbx_malloc(sizeof *both + first_block);
  both->b.next = NULL;
  both->b.size = first_block;
  both->b.used = 0;
  both->a.head = &both->b;
  return &both->a;
}

void *sbxi_arena_alloc(sbx_wire_arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  arena_block *b = a->head;
  if (b->size - b->used < n) {
    size_t size = n > 4096 ? n : 4096;
    if (size < b->size) size = b->size; /* grow geometrically-ish */
    arena_block *nb = sbx_malloc(sizeof *nb + size);
    nb->size = size;
    nb->used = 0;
    nb->next = b;
    a->head = nb;
    b = nb;
  }
  void *p = (char *)b->data + b->used;
  b->used += n;
  return p;
}

void sbxi_arena_free(sbx_wire_arena *a) {
  if (!a) return;
  arena_block *b = a->head;
  while (b) {
    arena_block *next = b->next;
    if (next)
      sbx_free(b);
    else
      sbx_free(a); /* the first block lives inside the arena's allocation */
    b = next;
  }
}
