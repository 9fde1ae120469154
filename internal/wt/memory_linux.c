// Linear memories for glovebox's engines: reserved with mmap, and when the
// instantiating thread has named a memory image, backed by a private
// (copy-on-write) mapping of that image file so a new instance starts with a
// booted guest's memory without copying it.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "wt.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

typedef struct gb_mem {
  uint8_t *base;
  size_t size;     // accessible bytes
  size_t capacity; // bytes it may grow to without moving
  size_t total;    // bytes reserved, guard included
} gb_mem;

static __thread const gb_image *gb_next_image;

static wasmtime_error_t *gb_errno(const char *what) {
  char msg[160];
  snprintf(msg, sizeof msg, "glovebox: %s: %s", what, strerror(errno));
  return wasmtime_error_new(msg);
}

static uint8_t *gb_mem_get(void *env, size_t *size, size_t *capacity) {
  gb_mem *m = env;
  *size = m->size;
  *capacity = m->capacity;
  return m->base;
}

static wasmtime_error_t *gb_mem_grow(void *env, size_t new_size) {
  gb_mem *m = env;
  if (new_size <= m->size) return NULL;
  if (new_size > m->capacity) return wasmtime_error_new("glovebox: linear memory cannot grow past its reservation");
  if (mprotect(m->base + m->size, new_size - m->size, PROT_READ | PROT_WRITE) != 0) return gb_errno("mprotect");
  m->size = new_size;
  return NULL;
}

static void gb_mem_free(void *env) {
  gb_mem *m = env;
  munmap(m->base, m->total);
  free(m);
}

static wasmtime_error_t *gb_new_memory(void *env, const wasm_memorytype_t *ty, size_t minimum, size_t maximum,
                                       size_t reserved, size_t guard, wasmtime_linear_memory_t *ret) {
  (void)env;
  (void)ty;
  const gb_image *img = gb_next_image;
  size_t size = minimum;
  if (img != NULL && img->len > size) size = img->len;
  size_t capacity = reserved;
  if (capacity == 0) capacity = maximum;
  if (capacity < size) return wasmtime_error_new("glovebox: memory reservation smaller than the memory image");
  size_t total = capacity + guard;
  uint8_t *base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return gb_errno("reserve linear memory");
  size_t mapped = 0;
  if (img != NULL && img->len > 0) {
    if (mmap(base, img->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, img->fd, 0) == MAP_FAILED) {
      wasmtime_error_t *e = gb_errno("map memory image");
      munmap(base, total);
      return e;
    }
    mapped = img->len;
    for (size_t i = 0; i < img->nhot; i++) {
      uint64_t off = img->hot[2 * i], len = img->hot[2 * i + 1] & ~GB_HOT_WRITE;
      int advice = (img->hot[2 * i + 1] & GB_HOT_WRITE) ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
      if (off + len <= img->len) madvise(base + off, len, advice); // best effort: older kernels lack it
    }
  }
  if (size > mapped && mprotect(base + mapped, size - mapped, PROT_READ | PROT_WRITE) != 0) {
    wasmtime_error_t *e = gb_errno("mprotect");
    munmap(base, total);
    return e;
  }
  gb_mem *m = malloc(sizeof *m);
  if (m == NULL) {
    munmap(base, total);
    return wasmtime_error_new("glovebox: out of memory");
  }
  m->base = base;
  m->size = size;
  m->capacity = capacity;
  m->total = total;
  ret->env = m;
  ret->get_memory = gb_mem_get;
  ret->grow_memory = gb_mem_grow;
  ret->finalizer = gb_mem_free;
  return NULL;
}

void gb_use_host_memory(wasm_config_t *config) {
  wasmtime_memory_creator_t c = {.env = NULL, .new_memory = gb_new_memory, .finalizer = NULL};
  wasmtime_config_host_memory_creator_set(config, &c);
}

wasmtime_error_t *gb_instantiate(const wasmtime_instance_pre_t *pre, wasmtime_context_t *ctx, const gb_image *img,
                                 wasmtime_instance_t *inst, wasm_trap_t **trap) {
  gb_next_image = img;
  wasmtime_error_t *err = wasmtime_instance_pre_instantiate(pre, ctx, inst, trap);
  gb_next_image = NULL;
  return err;
}
