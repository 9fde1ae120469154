// Linear memories for glovebox's engines, allocated by glovebox instead of
// wasmtime so that an instance can start from a booted guest's memory.
//
// A memory made while the instantiating thread names an image (see
// gb_instantiate) maps the image file privately: pages are shared with the
// image until written, when the kernel copies them. When such a memory is
// freed it is not unmapped but reset — every page the guest wrote is
// copied back from the image, found through /proc/self/pagemap, and any
// growth is released — and kept for the next instance. On a host where a
// page fault or an unmap is expensive (about 11–16 µs per written page
// here, under a paravirtualized MMU that also serialises page-table
// changes across CPUs), reuse keeps making a VM off that path.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wt.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

// PAGEMAP_SCAN (Linux 6.7) finds the written pages of a range in one call;
// older kernels fall back to reading /proc/self/pagemap entry by entry.
#ifndef PAGEMAP_SCAN
struct pm_scan_arg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
  uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct page_region {
  uint64_t start, end, categories;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PAGE_IS_FILE (1 << 2)
#define PAGE_IS_PRESENT (1 << 3)
#define PAGE_IS_SWAPPED (1 << 4)
#endif

#define PAGE 4096
// A reset slot that kept more than this many written pages is unmapped
// instead of reused, so an idle slot never pins much memory.
#define MAX_KEPT_PAGES 4096 /* 16 MiB */

struct gb_slot {
  uint8_t *base;
  size_t size;     // accessible bytes
  size_t capacity; // bytes it may grow to without moving
  size_t total;    // bytes reserved, guard included
  gb_image *img;   // the image it maps, or NULL
  gb_slot *next;
};

static __thread const gb_image *gb_next_image;
// The limits of the store whose wasm this thread is running, set by gb_call.
static __thread gb_limits *gb_cur_limits;

static wasmtime_error_t *gb_errno(const char *what) {
  char msg[160];
  snprintf(msg, sizeof msg, "glovebox: %s: %s", what, strerror(errno));
  return wasmtime_error_new(msg);
}

gb_image *gb_image_new(int fd, size_t len, const uint64_t *hot, size_t nhot, size_t max_free) {
  gb_image *img = calloc(1, sizeof *img);
  pthread_mutex_t *mu = malloc(sizeof *mu);
  if (img == NULL || mu == NULL) {
    free(img);
    free(mu);
    return NULL;
  }
  pthread_mutex_init(mu, NULL);
  img->fd = fd;
  img->len = len;
  img->hot = hot;
  img->nhot = nhot;
  img->mu = mu;
  img->max_free = max_free;
  img->pagemap_fd = -1;
  img->ro = MAP_FAILED;
  if (max_free > 0 && len > 0) {
    // Resets copy from a read-only view of the image.
    img->ro = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (img->ro != MAP_FAILED) img->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  }
  return img;
}

static void gb_image_free(gb_image *img) {
  if (img->pagemap_fd >= 0) close(img->pagemap_fd);
  if (img->ro != MAP_FAILED) munmap(img->ro, img->len);
  close(img->fd);
  pthread_mutex_destroy(img->mu);
  free(img->mu);
  free((void *)img->hot);
  free(img);
}

// gb_image_close unmaps the image's idle slots; the image itself is freed
// when the last memory made from it is.
void gb_image_close(gb_image *img) {
  pthread_mutex_lock(img->mu);
  img->closed = 1;
  gb_slot *s = img->free;
  img->free = NULL;
  img->nfree = 0;
  int last = img->live == 0;
  pthread_mutex_unlock(img->mu);
  while (s != NULL) {
    gb_slot *next = s->next;
    munmap(s->base, s->total);
    free(s);
    s = next;
  }
  if (last) gb_image_free(img);
}

static int scan_works = 1; // cleared if the kernel lacks PAGEMAP_SCAN

void gb_disable_pagemap_scan(void) { __atomic_store_n(&scan_works, 0, __ATOMIC_RELAXED); }

// gb_restore copies pages [first, first+n) of the image back into the slot.
static void gb_restore(gb_slot *s, size_t first, size_t n) {
  memcpy(s->base + first * PAGE, (const uint8_t *)s->img->ro + first * PAGE, n * PAGE);
}

// gb_reset_scan finds written pages with PAGEMAP_SCAN: pages present but
// not the image file's own (copied on write), or swapped out. It returns
// the number restored, or -1 if the scan is unavailable or failed.
static long gb_reset_scan(gb_slot *s) {
  gb_image *img = s->img;
  struct page_region regions[256];
  uint64_t start = (uint64_t)(uintptr_t)s->base, end = start + img->len;
  long restored = 0;
  while (start < end) {
    struct pm_scan_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.size = sizeof arg;
    arg.start = start;
    arg.end = end;
    arg.vec = (uint64_t)(uintptr_t)regions;
    arg.vec_len = 256;
    arg.category_inverted = PAGE_IS_FILE;
    arg.category_mask = PAGE_IS_FILE;
    arg.category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED;
    arg.return_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED | PAGE_IS_FILE;
    long n = ioctl(img->pagemap_fd, PAGEMAP_SCAN, &arg);
    if (n < 0) return -1;
    for (long i = 0; i < n; i++) {
      size_t first = (regions[i].start - (uintptr_t)s->base) / PAGE;
      size_t pages = (regions[i].end - regions[i].start) / PAGE;
      gb_restore(s, first, pages);
      restored += (long)pages;
    }
    if (arg.walk_end <= start) return -1; // no progress: do not trust it
    start = arg.walk_end;
  }
  return restored;
}

// gb_reset_pagemap is the portable scan: one pagemap entry per page.
static long gb_reset_pagemap(gb_slot *s) {
  gb_image *img = s->img;
  size_t pages = img->len / PAGE;
  uint64_t buf[4096];
  long restored = 0;
  for (size_t first = 0; first < pages; first += 4096) {
    size_t n = pages - first < 4096 ? pages - first : 4096;
    off_t at = (off_t)(((uintptr_t)s->base / PAGE + first) * 8);
    if (pread(img->pagemap_fd, buf, n * 8, at) != (ssize_t)(n * 8)) return -1;
    size_t run = 0;
    for (size_t i = 0; i <= n; i++) {
      if (i < n) {
        uint64_t e = buf[i];
        int present = (e >> 63) & 1, swapped = (e >> 62) & 1, file = (e >> 61) & 1;
        if (swapped || (present && !file)) {
          run++;
          continue;
        }
      }
      if (run > 0) {
        gb_restore(s, first + i - run, run);
        restored += (long)run;
        run = 0;
      }
    }
  }
  return restored;
}

// gb_reset restores a slot to the image: every page of the image range
// that is not the image file's own page — written, hence copied, or
// swapped out — gets the image's bytes back, and growth past the image is
// released. It returns 0 on success and -1 if the slot cannot be trusted
// to be clean (it must then be unmapped).
static int gb_reset(gb_slot *s, size_t *kept) {
  gb_image *img = s->img;
  if (s->size > img->len) {
    if (madvise(s->base + img->len, s->size - img->len, MADV_DONTNEED) != 0) return -1;
    if (mprotect(s->base + img->len, s->size - img->len, PROT_NONE) != 0) return -1;
    s->size = img->len;
  }
  long n = -1;
  if (__atomic_load_n(&scan_works, __ATOMIC_RELAXED)) {
    n = gb_reset_scan(s);
    if (n < 0) __atomic_store_n(&scan_works, 0, __ATOMIC_RELAXED);
  }
  if (n < 0) n = gb_reset_pagemap(s);
  if (n < 0) return -1;
  *kept = (size_t)n;
  return 0;
}

static uint8_t *gb_mem_get(void *env, size_t *size, size_t *capacity) {
  gb_slot *s = env;
  *size = s->size;
  *capacity = s->capacity;
  return s->base;
}

static wasmtime_error_t *gb_mem_grow(void *env, size_t new_size) {
  gb_slot *s = env;
  if (new_size <= s->size) return NULL;
  gb_limits *l = gb_cur_limits;
  if (l != NULL && new_size > l->mem_limit) {
    l->grow_refused = 1;
    return wasmtime_error_new("glovebox: linear memory limit reached");
  }
  if (new_size > s->capacity) return wasmtime_error_new("glovebox: linear memory cannot grow past its reservation");
  if (mprotect(s->base + s->size, new_size - s->size, PROT_READ | PROT_WRITE) != 0) return gb_errno("mprotect");
  s->size = new_size;
  return NULL;
}

// gb_mem_free keeps a freed memory for reuse, unreset: the next
// instance to take it resets it first, so the cost lands on whoever makes
// VMs (the pool's background filler, when there is one) rather than on
// a single freeing thread that could fall behind.
static void gb_mem_free(void *env) {
  gb_slot *s = env;
  gb_image *img = s->img;
  if (img == NULL) {
    munmap(s->base, s->total);
    free(s);
    return;
  }
  pthread_mutex_lock(img->mu);
  img->live--;
  // A memory that grew past the image may hold a great deal: give it back
  // now rather than keep it until some later VM resets it.
  int keep = img->pagemap_fd >= 0 && !img->closed && img->nfree < img->max_free && s->size <= img->len;
  if (keep) {
    s->next = img->free;
    img->free = s;
    img->nfree++;
  } else {
    img->dropped++;
  }
  int last = img->closed && img->live == 0;
  pthread_mutex_unlock(img->mu);
  if (!keep) {
    munmap(s->base, s->total);
    free(s);
  }
  if (last) gb_image_free(img);
}

static wasmtime_error_t *gb_new_memory(void *env, const wasm_memorytype_t *ty, size_t minimum, size_t maximum,
                                       size_t reserved, size_t guard, wasmtime_linear_memory_t *ret) {
  (void)env;
  (void)ty;
  gb_image *img = (gb_image *)gb_next_image;
  size_t size = minimum;
  if (img != NULL && img->len > size) size = img->len;
  size_t capacity = reserved;
  if (capacity == 0) capacity = maximum;
  if (capacity < size) return wasmtime_error_new("glovebox: memory reservation smaller than the memory image");
  size_t total = capacity + guard;

  gb_slot *s = NULL;
  if (img != NULL) {
    pthread_mutex_lock(img->mu);
    if (img->free != NULL && img->free->total == total && minimum <= img->len) {
      s = img->free;
      img->free = s->next;
      img->nfree--;
    }
    img->live++;
    pthread_mutex_unlock(img->mu);
    size_t kept = 0;
    if (s != NULL && (gb_reset(s, &kept) != 0 || kept > MAX_KEPT_PAGES)) {
      // Not provably clean, or pinning too much memory: start afresh.
      munmap(s->base, s->total);
      free(s);
      s = NULL;
      pthread_mutex_lock(img->mu);
      img->dropped++;
      pthread_mutex_unlock(img->mu);
    } else if (s != NULL) {
      pthread_mutex_lock(img->mu);
      img->reused++;
      img->restored += kept;
      pthread_mutex_unlock(img->mu);
    }
  }
  if (s == NULL) {
    s = calloc(1, sizeof *s);
    uint8_t *base = s == NULL ? MAP_FAILED : mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    wasmtime_error_t *err = NULL;
    if (base == MAP_FAILED) {
      err = s == NULL ? wasmtime_error_new("glovebox: out of memory") : gb_errno("reserve linear memory");
    } else {
      s->base = base;
      s->total = total;
      s->capacity = capacity;
      s->img = img;
      size_t mapped = 0;
      if (img != NULL && img->len > 0) {
        if (mmap(base, img->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, img->fd, 0) == MAP_FAILED) {
          err = gb_errno("map memory image");
        } else {
          mapped = img->len;
          for (size_t i = 0; i < img->nhot; i++) {
            uint64_t off = img->hot[2 * i], len = img->hot[2 * i + 1] & ~GB_HOT_WRITE;
            int advice = (img->hot[2 * i + 1] & GB_HOT_WRITE) ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
            if (off + len <= img->len) madvise(base + off, len, advice); // best effort: older kernels lack it
          }
        }
      }
      if (err == NULL && size > mapped && mprotect(base + mapped, size - mapped, PROT_READ | PROT_WRITE) != 0)
        err = gb_errno("mprotect");
      s->size = size;
    }
    if (err != NULL) {
      if (base != MAP_FAILED) munmap(base, total);
      free(s);
      if (img != NULL) {
        pthread_mutex_lock(img->mu);
        img->live--;
        pthread_mutex_unlock(img->mu);
      }
      return err;
    }
    if (img != NULL) {
      pthread_mutex_lock(img->mu);
      img->made++;
      pthread_mutex_unlock(img->mu);
    }
  }
  ret->env = s;
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

wasmtime_error_t *gb_call(wasmtime_context_t *ctx, const wasmtime_func_t *f, wasmtime_val_raw_t *vals, size_t n,
                          wasm_trap_t **trap, gb_limits *limits) {
  gb_limits *prev = gb_cur_limits;
  gb_cur_limits = limits;
  wasmtime_error_t *err = wasmtime_func_call_unchecked(ctx, f, vals, n, trap);
  gb_cur_limits = prev;
  return err;
}
