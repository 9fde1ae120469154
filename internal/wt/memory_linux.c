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
//
// A reset leaves the pages an earlier instance wrote resident and private
// (their bytes copied back), so a guest that times its first writes can
// tell how much memory earlier instances wrote. So a slot is reset only
// for an instance of the group (gb_instantiate's group) that last used
// it: for any other, its image range is mapped over again, dropping every
// page it held, and it faults as a new one. Group GB_GROUP_FRESH is never
// the same as another: its instances always get slots mapped anew, and
// leave theirs to be mapped anew for whoever takes them next.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/userfaultfd.h>

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
#define PAGE_IS_WRITTEN (1 << 1)
#define PAGE_IS_FILE (1 << 2)
#define PAGE_IS_PRESENT (1 << 3)
#define PAGE_IS_SWAPPED (1 << 4)
#define PM_SCAN_WP_MATCHING (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15) // Linux 6.7
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
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
  // A checkpoint (gb_slot_checkpoint): the pages that differed from the
  // image when it was taken, ascending, and their bytes then. A rewind
  // restores those pages from here and every other written page from the
  // image. ck_at is the rewind's cursor into ck_pages.
  // Once taken, they belong to ck_share, which slots whose checkpoints
  // are byte for byte the same share (see gb_slot_checkpoint).
  size_t *ck_pages;
  uint8_t *ck_data;
  size_t ck_n, ck_cap, ck_at;
  int ck_taken;
  gb_ckdata *ck_share;
  // The written pages the last rewind's scan found, as runs, and the
  // process's page-fault count read just before that scan (see
  // gb_slot_rewind). seen_ok is cleared when the list is incomplete.
  // With write tracking (tracked), they are the pages left
  // unprotected: the only ones a write reaches without a page fault.
  size_t *seen; // pairs: first page, pages
  size_t seen_len, seen_cap;
  long seen_faults;
  int seen_ok;
  // Write tracking (see "Write tracking" below). wp: the image range is
  // registered with gb_uffd for write-protection. prot: some of its pages
  // may be write-protected. tracked: the checkpoint's tracking is armed —
  // every page that is not the image file's own is write-protected,
  // except the runs in seen. observing: the protection was renewed in
  // full at the last rewind, so the next scan finds exactly what was
  // written since; observed is what the last such scan found, and
  // since_observed counts rewinds since the protection was renewed.
  // first: a checkpoint was taken and not yet rewound to (the first
  // rewind arms tracking, see gb_slot_rewind).
  int wp, prot, tracked, observing, first;
  // fresh: the image range was mapped anew for this slot's instance, not
  // reset from an earlier one's (see gb_slot_drop_equal).
  int fresh;
  size_t observed;
  unsigned since_observed;
  // The runs of copied pages that held the image's bytes when the
  // checkpoint was taken (see gb_slot_checkpoint), as pairs of first page
  // and pages; eq_cap is SIZE_MAX once the list is incomplete.
  size_t *eq;
  size_t eq_len, eq_cap;
  // The group of the instance it was last made for: one of another
  // group, or of GB_GROUP_FRESH, maps it anew (gb_remap) instead of
  // resetting it.
  uint64_t group;
};

// A taken checkpoint's pages and bytes, shared by every slot whose
// checkpoint is the same (prepared VMs with the same tools are, byte for
// byte), and freed with the last reference.
struct gb_ckdata {
  long refs;
  size_t n;
  size_t *pages;
  uint8_t *data;
};

void gb_ckdata_release(gb_ckdata *d) {
  if (d == NULL || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  free(d->pages);
  free(d->data);
  free(d);
}

gb_ckdata *gb_ckdata_ref(gb_ckdata *d) {
  __atomic_add_fetch(&d->refs, 1, __ATOMIC_ACQ_REL);
  return d;
}

// gb_slot_ckdata returns a new reference to the slot's taken checkpoint,
// or NULL if it has none.
gb_ckdata *gb_slot_ckdata(gb_slot *s) {
  if (!s->ck_taken || s->ck_share == NULL) return NULL;
  __atomic_add_fetch(&s->ck_share->refs, 1, __ATOMIC_ACQ_REL);
  return s->ck_share;
}

static void gb_slot_drop_checkpoint(gb_slot *s) {
  if (s->ck_share != NULL) {
    gb_ckdata_release(s->ck_share); // it owns ck_pages and ck_data
    s->ck_share = NULL;
  } else {
    free(s->ck_pages);
    free(s->ck_data);
  }
  free(s->seen);
  free(s->eq);
  s->eq = NULL;
  s->eq_len = s->eq_cap = 0;
  s->ck_pages = NULL;
  s->ck_data = NULL;
  s->seen = NULL;
  s->ck_n = s->ck_cap = s->ck_at = 0;
  s->seen_len = s->seen_cap = 0;
  s->ck_taken = s->seen_ok = 0;
  s->tracked = s->observing = s->first = 0; // pages may stay protected: see prot
}

// The slot the last memory made on this thread went to (see
// gb_instantiate_slot).
static __thread gb_slot *gb_last_slot;

static __thread const gb_image *gb_next_image;
// The group of the memory made next on this thread (see gb_instantiate).
static __thread uint64_t gb_next_group;
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

// A visit is called for each run of written pages [first, first+n) a
// scan finds, in ascending order.
typedef void (*gb_visit)(gb_slot *s, size_t first, size_t n);

// gb_restore copies pages [first, first+n) of the image back into the slot.
static void gb_restore(gb_slot *s, size_t first, size_t n) {
  memcpy(s->base + first * PAGE, (const uint8_t *)s->img->ro + first * PAGE, n * PAGE);
}

// gb_rewind_run restores pages [first, first+n) to the slot's checkpoint:
// from the checkpoint's copy for a page it holds, else from the image.
static void gb_rewind_run(gb_slot *s, size_t first, size_t n) {
  size_t end = first + n;
  while (first < end) {
    while (s->ck_at < s->ck_n && s->ck_pages[s->ck_at] < first) s->ck_at++;
    if (s->ck_at < s->ck_n && s->ck_pages[s->ck_at] == first) {
      memcpy(s->base + first * PAGE, s->ck_data + s->ck_at * PAGE, PAGE);
      first++;
      continue;
    }
    size_t stop = end;
    if (s->ck_at < s->ck_n && s->ck_pages[s->ck_at] < stop) stop = s->ck_pages[s->ck_at];
    gb_restore(s, first, stop - first);
    first = stop;
  }
}

static void gb_note_page(gb_slot *s, size_t first);

// gb_rewind_seen rewinds a run, as gb_rewind_run, and records it in the
// slot's list of written pages.
static void gb_rewind_seen(gb_slot *s, size_t first, size_t n) {
  gb_rewind_run(s, first, n);
  if (!s->seen_ok) return;
  if (s->seen_len + 2 > s->seen_cap) {
    size_t cap = s->seen_cap < 64 ? 64 : s->seen_cap * 2;
    size_t *seen = realloc(s->seen, cap * sizeof *seen);
    if (seen == NULL) {
      s->seen_ok = 0;
      return;
    }
    s->seen = seen;
    s->seen_cap = cap;
  }
  s->seen[s->seen_len++] = first;
  s->seen[s->seen_len++] = n;
}

// gb_process_faults is the process's page faults so far, all threads, or
// -1 if it cannot be read.
static long gb_process_faults(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return ru.ru_minflt + ru.ru_majflt;
}

// gb_note_equal adds page p, a copy that holds the image's bytes, to the
// slot's list of such runs (eq).
static void gb_note_equal(gb_slot *s, size_t p) {
  if (s->eq_cap == SIZE_MAX) return;
  if (s->eq_len >= 2 && s->eq[s->eq_len - 2] + s->eq[s->eq_len - 1] == p) {
    s->eq[s->eq_len - 1]++;
    return;
  }
  if (s->eq_len + 2 > s->eq_cap) {
    size_t cap = s->eq_cap < 64 ? 64 : s->eq_cap * 2;
    size_t *eq = realloc(s->eq, cap * sizeof *eq);
    if (eq == NULL) {
      s->eq_cap = SIZE_MAX;
      return;
    }
    s->eq = eq;
    s->eq_cap = cap;
  }
  s->eq[s->eq_len++] = p;
  s->eq[s->eq_len++] = 1;
}

// gb_note_run adds the pages of [first, first+n) that differ from the
// image to the checkpoint being taken (a page equal to the image's is
// rewound from the image, and noted in eq); on allocation failure it
// marks the checkpoint failed (ck_cap = SIZE_MAX).
static void gb_note_run(gb_slot *s, size_t first, size_t n) {
  for (size_t p = first; p < first + n; p++) {
    if (memcmp(s->base + p * PAGE, (const uint8_t *)s->img->ro + p * PAGE, PAGE) != 0)
      gb_note_page(s, p);
    else
      gb_note_equal(s, p);
  }
}

// While a checkpoint is compared with another slot's (gb_slot_checkpoint's
// like), gb_note_page checks each page against it instead of copying.
static __thread const gb_ckdata *gb_verify;
static __thread int gb_verify_failed;

static void gb_note_page(gb_slot *s, size_t first) {
  size_t n = 1;
  if (gb_verify != NULL) {
    const gb_ckdata *d = gb_verify;
    if (!gb_verify_failed && s->ck_n < d->n && d->pages[s->ck_n] == first &&
        memcmp(d->data + s->ck_n * PAGE, s->base + first * PAGE, PAGE) == 0)
      s->ck_n++;
    else
      gb_verify_failed = 1;
    return;
  }
  if (s->ck_cap == SIZE_MAX) return;
  if (s->ck_n + n > s->ck_cap) {
    size_t cap = s->ck_cap * 2;
    if (cap < s->ck_n + n) cap = s->ck_n + n + 64;
    size_t *pages = realloc(s->ck_pages, cap * sizeof *pages);
    if (pages != NULL) s->ck_pages = pages;
    uint8_t *data = pages == NULL ? NULL : realloc(s->ck_data, cap * PAGE);
    if (data == NULL) {
      s->ck_cap = SIZE_MAX;
      return;
    }
    s->ck_data = data;
    s->ck_cap = cap;
  }
  for (size_t i = 0; i < n; i++) s->ck_pages[s->ck_n + i] = first + i;
  memcpy(s->ck_data + s->ck_n * PAGE, s->base + first * PAGE, n * PAGE);
  s->ck_n += n;
}

// A set of pages PAGEMAP_SCAN selects: those whose categories, with the
// inverted ones flipped, have every bit of mask and one of anyof (see
// struct pm_scan_arg); ret is what it reports of them.
typedef struct {
  uint64_t inverted, mask, anyof, ret;
} gb_pmcat;

// gb_copied are the pages of a slot that are not the image file's own:
// written, hence copied on write, or swapped out.
static const gb_pmcat gb_copied = {PAGE_IS_FILE, PAGE_IS_FILE, PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
                                   PAGE_IS_PRESENT | PAGE_IS_SWAPPED | PAGE_IS_FILE};

// gb_unprotected are those of gb_copied that are not write-protected:
// written since they were last protected (see "Write tracking"). The
// masks keep the kernel off its fast path for PAGE_IS_WRITTEN alone,
// which counts an empty entry of a page table as written.
static const gb_pmcat gb_unprotected = {PAGE_IS_FILE, PAGE_IS_FILE | PAGE_IS_WRITTEN, PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
                                        PAGE_IS_PRESENT | PAGE_IS_SWAPPED | PAGE_IS_FILE | PAGE_IS_WRITTEN};

// gb_scan_range calls visit (if not NULL) for each run of pages of cat in
// pages [first, end) of the mapping at base, in ascending order, with one
// PAGEMAP_SCAN ioctl per 256 runs on pagemap_fd; flags are the ioctl's
// (PM_SCAN_*). It returns the number of pages found, or -1 if the scan is
// unavailable or failed.
static long gb_scan_range(int pagemap_fd, uint8_t *base, size_t first, size_t end, const gb_pmcat *cat, uint64_t flags,
                          gb_slot *s, gb_visit visit) {
  struct page_region regions[256];
  uint64_t start = (uint64_t)(uintptr_t)(base + first * PAGE), stop = (uint64_t)(uintptr_t)(base + end * PAGE);
  long found = 0;
  while (start < stop) {
    struct pm_scan_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.size = sizeof arg;
    arg.flags = flags;
    arg.start = start;
    arg.end = stop;
    arg.vec = (uint64_t)(uintptr_t)regions;
    arg.vec_len = 256;
    arg.category_inverted = cat->inverted;
    arg.category_mask = cat->mask;
    arg.category_anyof_mask = cat->anyof;
    arg.return_mask = cat->ret;
    long n = ioctl(pagemap_fd, PAGEMAP_SCAN, &arg);
    if (n < 0) return -1;
    for (long i = 0; i < n; i++) {
      size_t p = (regions[i].start - (uintptr_t)base) / PAGE;
      size_t pages = (regions[i].end - regions[i].start) / PAGE;
      if (visit != NULL) visit(s, p, pages);
      found += (long)pages;
    }
    if (arg.walk_end <= start) return -1; // no progress: do not trust it
    start = arg.walk_end;
  }
  return found;
}

// gb_scan_ioctl finds a slot's written pages (gb_copied) with
// PAGEMAP_SCAN. It returns the number found, or -1 if the scan is
// unavailable or failed.
static long gb_scan_ioctl(gb_slot *s, gb_visit visit) {
  return gb_scan_range(s->img->pagemap_fd, s->base, 0, s->img->len / PAGE, &gb_copied, 0, s, visit);
}

// gb_scan_pagemap is the portable scan: one pagemap entry per page.
static long gb_scan_pagemap(gb_slot *s, gb_visit visit) {
  gb_image *img = s->img;
  size_t pages = img->len / PAGE;
  uint64_t buf[4096];
  long found = 0;
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
        visit(s, first + i - run, run);
        found += (long)run;
        run = 0;
      }
    }
  }
  return found;
}

// gb_scan calls visit for every page of the image range that is not the
// image file's own — written, hence copied, or swapped out — and returns
// how many there were, or -1 if neither scan works.
static long gb_scan(gb_slot *s, gb_visit visit) {
  long n = -1;
  if (__atomic_load_n(&scan_works, __ATOMIC_RELAXED)) {
    n = gb_scan_ioctl(s, visit);
    if (n < 0) __atomic_store_n(&scan_works, 0, __ATOMIC_RELAXED);
  }
  if (n < 0) n = gb_scan_pagemap(s, visit);
  return n;
}

// Write tracking (Linux 6.7+). A rewind must restore every page written
// since the checkpoint. gb_copied finds every page written since the
// slot was mapped, this eval's or not (about 700 pages for 1+1 in a slot
// that has run larger evals before, or was populated for writing ahead),
// so a rewind copied all of those each time. Instead, at the first
// rewind after a checkpoint (which restores every copied page; a VM that
// runs a single eval never pays for tracking), the slot's image range is
// registered with a userfaultfd for write-protection in async mode
// (UFFD_FEATURE_WP_ASYNC) and every copied page is write-protected
// (PAGEMAP_SCAN with PM_SCAN_WP_MATCHING). In
// async mode nothing waits on the userfaultfd: the kernel resolves a
// write to a protected page itself, in its fault handler, by clearing
// the page's protection, whoever writes it — wasm code, the host, or the
// kernel on the guest's behalf (a read() into linear memory faults the
// same way, and get_user_pages for writing resolves the same fault). A
// page of the image file that was never copied is not protected: a
// write to it copies it, and the copy is unprotected. So the pages of
// gb_unprotected are a superset of those written since they were
// protected, and a rewind restores those alone, and every other page
// still holds its checkpoint bytes: protected pages are untouched
// since, and the image file's own pages hold the image's bytes, which is
// what the checkpoint holds for every page it did not copy (a copied page
// becomes the file's again only by an unmap or MADV_DONTNEED, which only
// this file does, and never to a tracked slot). A page swapped out keeps
// its protection in its swap entry, and one written then swapped out is
// reported unprotected (PAGE_IS_SWAPPED); a page migrated or reclaimed
// and faulted back in the same.
//
// Protecting a page again after each rewind would make the next eval
// take a page fault on every page it writes (the same few dozen each
// time for a small eval, 1.5-2 µs each here under load) and the rewind scan for
// them. So the pages the last scan found unprotected are left so, in
// seen, and restored at every rewind whether written or not: the hot set
// of this slot's evals. A write to any other page still takes a fault,
// and a rewind skips its scan only while the process has taken none
// (gb_slot_rewind), so it finds every page written outside the hot set.
// The hot set is relearnt: every GB_TRACK_RENEW rewinds, or when it has
// grown past twice what the last eval observed wrote plus GB_TRACK_SLACK
// pages, its pages are protected again, and the next scan observes what
// the evals since wrote (observing).
//
// Any failure — no userfaultfd (an old kernel, vm.unprivileged_userfaultfd
// with user-mode-only refused, seccomp), a self-test that does not see
// what this relies on, a failed ioctl, gb_set_write_tracking(0) or
// GLOVEBOX_WRITE_TRACKING=off — leaves the slot untracked, and its rewinds
// restore every copied page (gb_copied), as without tracking.
#define GB_TRACK_RENEW 64
#define GB_TRACK_SLACK 64

static unsigned gb_track_renew = GB_TRACK_RENEW; // gb_set_track_renewal
static int gb_uffd = -1;       // the process's userfaultfd, once gb_track_state is 1
static int gb_track_state;     // 0: not tried, 1: works, -1: unavailable
static int gb_track_off;       // set by gb_set_write_tracking(0)
static pthread_mutex_t gb_track_mu = PTHREAD_MUTEX_INITIALIZER;

// The runs a self-test scan found (pairs of first page and pages), or
// gb_st_n past the end if more than fit.
static __thread size_t gb_st_runs[8], gb_st_n;

static void gb_st_note(gb_slot *s, size_t first, size_t n) {
  (void)s;
  if (gb_st_n + 2 > 8) {
    gb_st_n = 9;
    return;
  }
  gb_st_runs[gb_st_n++] = first;
  gb_st_runs[gb_st_n++] = n;
}

// gb_st_scan scans the self-test's 8 pages at m for gb_unprotected with
// flags, and reports whether it found exactly the runs want (nwant
// numbers, pairs of first page and pages).
static int gb_st_scan(int pm, uint8_t *m, uint64_t flags, const size_t *want, size_t nwant) {
  gb_st_n = 0;
  long n = gb_scan_range(pm, m, 0, 8, &gb_unprotected, flags | PM_SCAN_CHECK_WPASYNC, NULL, gb_st_note);
  return n >= 0 && gb_st_n == nwant && memcmp(gb_st_runs, want, nwant * sizeof *want) == 0;
}

// gb_track_selftest checks, on 8 pages of a memfd mapped privately as a
// slot maps its image, that the kernel does what write tracking relies
// on: copied pages are protected and then not reported; a write to a
// protected page by user code, and one by the kernel (a read() into it),
// and a write that copies a page of the file are each reported; the bytes
// are what was written; and the protection can be removed. It returns 0
// if all of it holds.
static int gb_track_selftest(int uffd) {
  int ok = 0, pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  int fd = (int)syscall(SYS_memfd_create, "glovebox-write-tracking", 1 /* MFD_CLOEXEC */);
  int pipefd[2] = {-1, -1};
  uint8_t *m = MAP_FAILED;
  if (pm < 0 || fd < 0 || syscall(SYS_pipe2, pipefd, O_CLOEXEC) != 0 || ftruncate(fd, 8 * PAGE) != 0) goto out;
  for (int i = 0; i < 8; i++) {
    uint8_t b[PAGE];
    memset(b, i + 1, PAGE);
    if (pwrite(fd, b, PAGE, (off_t)i * PAGE) != PAGE) goto out;
  }
  m = mmap(NULL, 8 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) goto out;
  struct uffdio_register r = {.range = {(uintptr_t)m, 8 * PAGE}, .mode = UFFDIO_REGISTER_MODE_WP};
  if (ioctl(uffd, UFFDIO_REGISTER, &r) != 0 || !(r.ioctls & (1ULL << _UFFDIO_WRITEPROTECT))) goto out;
  volatile uint8_t *v = m;
  v[1 * PAGE] = 0xa1; // copies pages 1 and 2
  v[2 * PAGE] = 0xa2;
  (void)v[3 * PAGE]; // maps page 3 of the file
  static const size_t copied[] = {1, 2}, none[] = {0}, written[] = {1, 2, 5, 1};
  if (!gb_st_scan(pm, m, PM_SCAN_WP_MATCHING, copied, 2) || !gb_st_scan(pm, m, 0, none, 0)) goto out;
  v[2 * PAGE + 5] = 0xb2; // a protected page, from user code
  v[5 * PAGE] = 0xb5;     // a page of the file
  if (write(pipefd[1], "k", 1) != 1 || read(pipefd[0], m + PAGE + 7, 1) != 1) goto out; // a protected page, from the kernel
  if (!gb_st_scan(pm, m, 0, written, 4)) goto out;
  if (v[PAGE] != 0xa1 || v[PAGE + 7] != 'k' || v[2 * PAGE] != 0xa2 || v[2 * PAGE + 5] != 0xb2 || v[3 * PAGE] != 4 ||
      v[5 * PAGE] != 0xb5 || v[6 * PAGE] != 7)
    goto out;
  struct uffdio_writeprotect w = {.range = {(uintptr_t)m, 8 * PAGE}, .mode = 0};
  if (!gb_st_scan(pm, m, PM_SCAN_WP_MATCHING, written, 4) || !gb_st_scan(pm, m, 0, none, 0) ||
      ioctl(uffd, UFFDIO_WRITEPROTECT, &w) != 0 || !gb_st_scan(pm, m, 0, written, 4))
    goto out;
  ok = 1;
out:
  if (m != MAP_FAILED) munmap(m, 8 * PAGE);
  if (pipefd[0] >= 0) close(pipefd[0]);
  if (pipefd[1] >= 0) close(pipefd[1]);
  if (fd >= 0) close(fd);
  if (pm >= 0) close(pm);
  return ok ? 0 : -1;
}

// gb_track_init opens the process's userfaultfd for write tracking and
// tests it: 1 if tracking works, -1 if not.
static int gb_track_init(void) {
  const char *env = getenv("GLOVEBOX_WRITE_TRACKING");
  if (env != NULL && strcmp(env, "off") == 0) return -1;
  if (!__atomic_load_n(&scan_works, __ATOMIC_RELAXED)) return -1;
  // User-mode faults only: in async mode no fault is ever delivered, and
  // it is what an unprivileged process may open.
  int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
  if (fd < 0) return -1;
  struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_WP_ASYNC};
  if (ioctl(fd, UFFDIO_API, &api) != 0 || !(api.features & UFFD_FEATURE_WP_ASYNC) || gb_track_selftest(fd) != 0) {
    close(fd);
    return -1;
  }
  gb_uffd = fd;
  return 1;
}

// gb_track_on reports whether slots checkpointed now are tracked.
static int gb_track_on(void) {
  if (__atomic_load_n(&gb_track_off, __ATOMIC_RELAXED)) return 0;
  int st = __atomic_load_n(&gb_track_state, __ATOMIC_ACQUIRE);
  if (st == 0) {
    pthread_mutex_lock(&gb_track_mu);
    if (gb_track_state == 0) __atomic_store_n(&gb_track_state, gb_track_init(), __ATOMIC_RELEASE);
    st = gb_track_state;
    pthread_mutex_unlock(&gb_track_mu);
  }
  return st > 0;
}

void gb_set_write_tracking(int on) { __atomic_store_n(&gb_track_off, !on, __ATOMIC_RELAXED); }

unsigned gb_set_track_renewal(unsigned n) {
  return __atomic_exchange_n(&gb_track_renew, n > 0 ? n : GB_TRACK_RENEW, __ATOMIC_RELAXED);
}

int gb_write_tracking(void) { return gb_track_on(); }

// gb_slot_protect write-protects the slot's unprotected copied pages in
// pages [first, end). It returns 0, or -1 if it failed.
static int gb_slot_protect(gb_slot *s, size_t first, size_t end) {
  s->prot = 1;
  long n = gb_scan_range(s->img->pagemap_fd, s->base, first, end, &gb_unprotected, PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                         s, NULL);
  return n < 0 ? -1 : 0;
}

// gb_slot_unprotect removes the write-protection of every page of the
// slot's image range. It returns 0, or -1 if it failed (pages may stay
// protected: a write to one still takes a fault, resolved by the kernel).
static int gb_slot_unprotect(gb_slot *s) {
  if (!s->prot) return 0;
  struct uffdio_writeprotect w = {.range = {(uintptr_t)s->base, s->img->len}, .mode = 0};
  if (ioctl(gb_uffd, UFFDIO_WRITEPROTECT, &w) != 0) return -1;
  s->prot = 0;
  return 0;
}

// gb_slot_untrack stops tracking the slot's writes: its next rewind
// scans for every copied page.
static void gb_slot_untrack(gb_slot *s) {
  s->tracked = s->observing = 0;
  s->seen_ok = 0;
  gb_slot_unprotect(s);
}

// gb_slot_arm starts tracking the writes to a slot whose checkpoint was
// just taken: every copied page is write-protected, none is hot. On any
// failure the slot stays untracked.
static void gb_slot_arm(gb_slot *s) {
  if (!gb_track_on()) return;
  if (!s->wp) {
    struct uffdio_register r = {.range = {(uintptr_t)s->base, s->img->len}, .mode = UFFDIO_REGISTER_MODE_WP};
    if (ioctl(gb_uffd, UFFDIO_REGISTER, &r) != 0) return;
    s->wp = 1;
  }
  long faults = gb_process_faults();
  if (faults < 0 || gb_slot_protect(s, 0, s->img->len / PAGE) != 0) {
    gb_slot_untrack(s);
    return;
  }
  s->tracked = s->observing = 1;
  s->since_observed = 0;
  s->seen_len = 0;
  s->seen_ok = 1;
  s->seen_faults = faults;
}

// gb_slot_track_next updates the hot set after a tracked rewind that
// restored n pages (the runs in seen), scanned or not: a scan while
// observing learns what the evals since wrote; a hot set due for renewal,
// or grown past what the last observation found, is protected again.
static void gb_slot_track_next(gb_slot *s, long n, int scanned) {
  if (scanned && s->observing) {
    s->observed = (size_t)n;
    s->observing = 0;
  }
  // A large hot set costs a copy of each of its pages at every rewind,
  // and may be one large eval's: relearn it sooner.
  unsigned every = __atomic_load_n(&gb_track_renew, __ATOMIC_RELAXED);
  if (s->observed > 2 * GB_TRACK_SLACK) {
    size_t sooner = (size_t)every * 2 * GB_TRACK_SLACK / s->observed;
    every = sooner < 4 ? 4 : (unsigned)sooner;
  }
  if (++s->since_observed < every && (size_t)n <= 2 * s->observed + GB_TRACK_SLACK) return;
  if (s->seen_len > 0 && gb_slot_protect(s, s->seen[0], s->seen[s->seen_len - 2] + s->seen[s->seen_len - 1]) != 0) {
    gb_slot_untrack(s);
    return;
  }
  // No page is unprotected now, so while the process takes no fault,
  // none is written: the skip in gb_slot_rewind still holds.
  s->seen_len = 0;
  s->observing = 1;
  s->since_observed = 0;
}

// gb_map_image maps the image privately over [base, base+len) and
// faults in its hot ranges, as a memory made afresh starts. It returns 0,
// or -1 with errno set.
static int gb_map_image(uint8_t *base, gb_image *img) {
  if (mmap(base, img->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, img->fd, 0) == MAP_FAILED) return -1;
  for (size_t i = 0; i < img->nhot; i++) {
    uint64_t off = img->hot[2 * i], len = img->hot[2 * i + 1] & ~GB_HOT_WRITE;
    int advice = (img->hot[2 * i + 1] & GB_HOT_WRITE) ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
    if (off + len <= img->len) madvise(base + off, len, advice); // best effort: older kernels lack it
  }
  return 0;
}

// gb_remap returns a slot to the state of one just made: the image
// mapped anew over its range (every page an earlier instance wrote, or
// read, is dropped, so the next instance's first touches fault as in a
// new memory) and growth past it released. It returns 0, or -1 if the
// slot must be unmapped.
static int gb_remap(gb_slot *s) {
  gb_image *img = s->img;
  if (s->size > img->len) {
    if (madvise(s->base + img->len, s->size - img->len, MADV_DONTNEED) != 0) return -1;
    if (mprotect(s->base + img->len, s->size - img->len, PROT_NONE) != 0) return -1;
    s->size = img->len;
  }
  gb_slot_drop_checkpoint(s);
  s->wp = s->prot = 0; // a new mapping: not registered, nothing protected
  s->fresh = 1;
  return gb_map_image(s->base, img);
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
  gb_slot_drop_checkpoint(s);
  s->fresh = 0;
  // Restoring a write-protected page would take a fault for each.
  if (gb_slot_unprotect(s) != 0) return -1;
  long n = gb_scan(s, gb_restore);
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
  gb_slot_drop_checkpoint(s);
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
    int remap = s != NULL && (gb_next_group == GB_GROUP_FRESH || s->group != gb_next_group);
    if (s != NULL && (remap ? gb_remap(s) != 0 : gb_reset(s, &kept) != 0 || kept > MAX_KEPT_PAGES)) {
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
      s->fresh = 1;
      s->total = total;
      s->capacity = capacity;
      s->img = img;
      size_t mapped = 0;
      if (img != NULL && img->len > 0) {
        if (gb_map_image(base, img) != 0) {
          err = gb_errno("map memory image");
        } else {
          mapped = img->len;
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
  s->group = gb_next_group;
  gb_last_slot = s;
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

// gb_instantiate instantiates pre with its memory made from img. A slot
// last used by another group than group, or any slot if group is
// GB_GROUP_FRESH, is mapped anew rather than reset (see the top of this
// file).
wasmtime_error_t *gb_instantiate(const wasmtime_instance_pre_t *pre, wasmtime_context_t *ctx, const gb_image *img,
                                 uint64_t group, wasmtime_instance_t *inst, wasm_trap_t **trap, gb_slot **slot) {
  gb_next_image = img;
  gb_next_group = group;
  gb_last_slot = NULL;
  wasmtime_error_t *err = wasmtime_instance_pre_instantiate(pre, ctx, inst, trap);
  gb_next_image = NULL;
  gb_next_group = 0;
  *slot = err == NULL && *trap == NULL && gb_last_slot != NULL && gb_last_slot->img == img ? gb_last_slot : NULL;
  gb_last_slot = NULL;
  return err;
}

// gb_slot_range reports the slot's image range, for tests that look at
// which of its pages are resident.
void gb_slot_range(const gb_slot *s, uintptr_t *base, size_t *len) {
  *base = (uintptr_t)s->base;
  *len = s->img == NULL ? s->size : s->img->len;
}

// gb_slot_drop_equal gives back, in a slot mapped anew for its instance
// (fresh), the copies of the pages that held the image's bytes when the
// checkpoint was taken (eq), while every page holds its checkpoint bytes:
// right after the checkpoint, and again (then forgetting the list) at
// the first rewind after it, before tracking protects any page, for the
// pages the first eval copied again. Each becomes the image
// file's page again, holding the same bytes, so that an idle VM keeps
// private only the pages that differ from the image. A VM made in fresh
// memory copies about 200 pages (the hot ranges its evals are expected to
// write, populated up front, and what preparing writes), and preparing
// leaves about 125 of them holding the image's bytes; a page dropped here
// that an eval writes later is copied again then, by a page fault. A
// reset slot keeps its pages: they are what a reset is for (the next
// VM's writes to them take no fault). One process_madvise call drops
// every run (Linux 6.13+ takes any advice for the calling process), else
// one madvise per run.
static void gb_slot_drop_equal(gb_slot *s, int forget) {
  size_t runs = s->fresh ? s->eq_len / 2 : 0, done = 0;
#if defined(SYS_process_madvise) && defined(SYS_pidfd_open)
  int pidfd = runs > 1 ? (int)syscall(SYS_pidfd_open, getpid(), 0) : -1;
  while (pidfd >= 0 && done < runs) {
    struct iovec iov[256];
    size_t k = runs - done < 256 ? runs - done : 256, bytes = 0;
    for (size_t i = 0; i < k; i++) {
      iov[i].iov_base = s->base + s->eq[2 * (done + i)] * PAGE;
      iov[i].iov_len = s->eq[2 * (done + i) + 1] * PAGE;
      bytes += iov[i].iov_len;
    }
    if (syscall(SYS_process_madvise, pidfd, iov, k, MADV_DONTNEED, 0) != (long)bytes) break;
    done += k;
  }
  if (pidfd >= 0) close(pidfd);
#endif
  for (; done < runs; done++) madvise(s->base + s->eq[2 * done] * PAGE, s->eq[2 * done + 1] * PAGE, MADV_DONTNEED);
  if (!forget) return;
  free(s->eq);
  s->eq = NULL;
  s->eq_len = s->eq_cap = 0;
}

// gb_slot_checkpoint records the slot's current contents as the state
// gb_slot_rewind returns it to: a copy of every written page that differs
// from the image. If like (another slot's, from gb_slot_ckdata; may be
// NULL) holds exactly the same pages with the same bytes, the slot shares
// it instead of keeping its own copy, and *shared is set. It returns the
// number of pages the checkpoint holds, or -1 (no checkpoint: the slot
// has no image, grew past it, or the scan or a copy failed).
long gb_slot_checkpoint(gb_slot *s, gb_ckdata *like, int *shared) {
  *shared = 0;
  gb_slot_drop_checkpoint(s);
  if (s->img == NULL || s->img->pagemap_fd < 0 || s->size != s->img->len) return -1;
  // Compare with like first, copying nothing: VMs prepared alike
  // differ from the image in the same pages by the same bytes. Only if
  // they do not, scan again and copy.
  long n = -1;
  int same = 0;
  if (like != NULL && like->n > 0) {
    gb_verify = like;
    gb_verify_failed = 0;
    n = gb_scan(s, gb_note_run);
    same = n >= 0 && !gb_verify_failed && s->ck_n == like->n;
    gb_verify = NULL;
    if (!same) {
      s->ck_n = s->eq_len = 0;
      if (s->eq_cap == SIZE_MAX) s->eq_cap = 0;
    }
  }
  if (!same) n = gb_scan(s, gb_note_run);
  if (n < 0 || s->ck_cap == SIZE_MAX) {
    gb_slot_drop_checkpoint(s);
    return -1;
  }
  if (same) {
    __atomic_add_fetch(&like->refs, 1, __ATOMIC_ACQ_REL);
    s->ck_share = like;
    *shared = 1;
  } else {
    gb_ckdata *d = malloc(sizeof *d);
    if (d == NULL) {
      gb_slot_drop_checkpoint(s);
      return -1;
    }
    // Give back the capacity the copy grew by doubling.
    if (s->ck_n > 0 && s->ck_n < s->ck_cap) {
      uint8_t *data = realloc(s->ck_data, s->ck_n * PAGE);
      if (data != NULL) s->ck_data = data;
    }
    *d = (gb_ckdata){.refs = 1, .n = s->ck_n, .pages = s->ck_pages, .data = s->ck_data};
    s->ck_share = d;
  }
  s->ck_pages = s->ck_share->pages;
  s->ck_data = s->ck_share->data;
  s->ck_n = s->ck_share->n;
  s->ck_cap = s->ck_n;
  s->ck_taken = 1;
  s->first = 1;
  gb_slot_drop_equal(s, 0);
  return (long)s->ck_n;
}

// gb_slot_rewind returns the slot to its checkpoint: every page written
// since the checkpoint — with write tracking, the pages left unprotected
// (see "Write tracking"); without, every page written since the image was
// mapped — gets the checkpoint's bytes if the checkpoint holds the page,
// else the image's. Memory is never shrunk here (the instance's view of
// its size would go stale), so a slot that grew past the image cannot be
// rewound. It returns the number of pages restored, or -1 if the slot
// cannot be trusted to match its checkpoint.
//
// A page of the image mapping stops being the file's own only by a write
// fault (copy on write), a protected page loses its protection only by a
// write fault, and the kernel counts every fault, from user code, from a
// system call copying into the page, or from get_user_pages, in the
// faulting thread's counters, which RUSAGE_SELF sums. So when the process
// has taken no fault at all since the last scan began, the pages to
// restore are exactly those that scan found, and the rewind copies them
// again without scanning (the scan is about half a rewind's cost). Any
// fault anywhere in the process, however unrelated, means a new scan.
long gb_slot_rewind(gb_slot *s) {
  if (!s->ck_taken || s->size != s->img->len) return -1;
  s->ck_at = 0;
  if (s->tracked && !gb_track_on()) gb_slot_untrack(s); // turned off since it was armed
  int tracked = s->tracked, scanned = 0;
  long faults = gb_process_faults(), n = 0;
  if (s->seen_ok && faults >= 0 && faults == s->seen_faults) {
    for (size_t i = 0; i < s->seen_len; i += 2) {
      gb_rewind_run(s, s->seen[i], s->seen[i + 1]);
      n += (long)s->seen[i + 1];
    }
  } else {
    s->seen_len = 0;
    s->seen_ok = faults >= 0;
    s->seen_faults = faults;
    scanned = 1;
    n = -1;
    if (tracked) {
      n = gb_scan_range(s->img->pagemap_fd, s->base, 0, s->img->len / PAGE, &gb_unprotected, PM_SCAN_CHECK_WPASYNC, s,
                        gb_rewind_seen);
      if (n < 0) { // not to be trusted: restore every copied page
        gb_slot_untrack(s);
        tracked = 0;
        s->seen_len = s->ck_at = 0;
        s->seen_ok = faults >= 0;
      }
    }
    if (n < 0) n = gb_scan(s, gb_rewind_seen);
    if (n < 0) {
      s->seen_ok = 0;
      return -1;
    }
  }
  if (tracked) gb_slot_track_next(s, n, scanned);
  if (s->first) {
    // The first rewind after the checkpoint restores every copied page
    // (nothing is tracked yet), then gives back the copies that hold the
    // image's bytes and arms tracking: a VM that runs one eval and is
    // freed (a process that evaluates once) does not pay for tracking.
    s->first = 0;
    if (s->fresh && s->eq_len > 0) s->seen_ok = 0; // the copies seen lists are gone
    gb_slot_drop_equal(s, 1);
    gb_slot_arm(s);
  }
  pthread_mutex_lock(s->img->mu);
  s->img->restored += (uint64_t)n;
  s->img->rewound++;
  if (tracked) s->img->tracked++;
  pthread_mutex_unlock(s->img->mu);
  return n;
}

wasmtime_error_t *gb_call(wasmtime_context_t *ctx, const wasmtime_func_t *f, wasmtime_val_raw_t *vals, size_t n,
                          wasm_trap_t **trap, gb_limits *limits) {
  gb_limits *prev = gb_cur_limits;
  gb_cur_limits = limits;
  wasmtime_error_t *err = wasmtime_func_call_unchecked(ctx, f, vals, n, trap);
  gb_cur_limits = prev;
  return err;
}

// Suspension (see internal/engine/suspend.go): the pages of a slot that
// differ from its checkpoint (or, with none, from the image), found by the
// same scan as a reset (gb_slot_written) and compared word for word
// (gb_slot_diff_xor).

// gb_ck_page returns the checkpoint's copy of page p, or NULL.
static const uint8_t *gb_ck_page(gb_slot *s, size_t p) {
  size_t lo = 0, hi = s->ck_taken ? s->ck_n : 0;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->ck_pages[mid] < p)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < (s->ck_taken ? s->ck_n : 0) && s->ck_pages[lo] == p) return s->ck_data + lo * PAGE;
  return NULL;
}

// gb_slot_ck_hash is an FNV-1a hash of the slot's checkpoint (its page
// numbers and bytes), or 0 without one.
uint64_t gb_slot_ck_hash(gb_slot *s) {
  if (!s->ck_taken) return 0;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < s->ck_n; i++) {
    uint64_t p = s->ck_pages[i];
    for (int b = 0; b < 8; b++) h = (h ^ ((p >> (8 * b)) & 0xff)) * 1099511628211ULL;
    const uint64_t *w = (const uint64_t *)(s->ck_data + i * PAGE);
    for (size_t j = 0; j < PAGE / 8; j++) h = (h ^ w[j]) * 1099511628211ULL;
  }
  return h;
}

int gb_slot_has_ck(gb_slot *s) { return s->ck_taken; }

// The written pages' runs a gb_slot_written scan collects.
static __thread size_t *gb_runs_out;
static __thread size_t gb_runs_len, gb_runs_cap;
static __thread int gb_runs_failed;

static void gb_runs_note(gb_slot *s, size_t first, size_t n) {
  (void)s;
  if (gb_runs_len + 2 > gb_runs_cap) {
    size_t cap = gb_runs_cap < 64 ? 64 : gb_runs_cap * 2;
    size_t *out = realloc(gb_runs_out, cap * sizeof *out);
    if (out == NULL) {
      gb_runs_failed = 1;
      return;
    }
    gb_runs_out = out;
    gb_runs_cap = cap;
  }
  gb_runs_out[gb_runs_len++] = first;
  gb_runs_out[gb_runs_len++] = n;
}

// gb_slot_written stores in *runs (malloc'd, the caller frees) the runs
// of pages below the image's end written since it was mapped (the same
// scan as a reset's), as pairs of first page and pages, ascending, and in
// *nruns the number of pairs; it returns the number of pages, or -1 if
// the slot has no image or the scan failed.
long gb_slot_written(gb_slot *s, size_t **runs, size_t *nruns) {
  *runs = NULL;
  *nruns = 0;
  if (s->img == NULL || s->img->pagemap_fd < 0) return -1;
  gb_runs_out = NULL;
  gb_runs_len = gb_runs_cap = 0;
  gb_runs_failed = 0;
  long n = gb_scan(s, gb_runs_note);
  if (n < 0 || gb_runs_failed) {
    free(gb_runs_out);
    gb_runs_out = NULL;
    return -1;
  }
  *runs = gb_runs_out;
  *nruns = gb_runs_len / 2;
  gb_runs_out = NULL;
  return n;
}

// gb_slot_diff_xor compares each page of the runs given (pairs of first
// page and pages, below the image's end) with its base — the checkpoint's
// copy (use_ck, when there is one) or else the image's — and for each
// that differs appends its number to pages and its bytes XORed with the
// base's to out (a page long each): what a memory at that base needs
// XORed in to hold the slot's bytes. It returns how many pages differ.
// pages and out must have room for every page of the runs.
size_t gb_slot_diff_xor(gb_slot *s, int use_ck, const size_t *runs, size_t nruns, uint32_t *pages, uint8_t *out) {
  size_t k = 0;
  for (size_t r = 0; r < nruns; r++) {
    for (size_t p = runs[2 * r]; p < runs[2 * r] + runs[2 * r + 1]; p++) {
      const uint8_t *base = use_ck && s->ck_taken ? gb_ck_page(s, p) : NULL;
      if (base == NULL) base = (const uint8_t *)s->img->ro + p * PAGE;
      const uint64_t *m = (const uint64_t *)(s->base + p * PAGE), *b = (const uint64_t *)base;
      uint64_t *o = (uint64_t *)(out + k * PAGE), any = 0;
      for (size_t j = 0; j < PAGE / 8; j++) {
        uint64_t x = m[j] ^ b[j];
        o[j] = x;
        any |= x;
      }
      if (any != 0) pages[k++] = (uint32_t)p;
    }
  }
  return k;
}


size_t gb_slot_image_len(gb_slot *s) { return s->img == NULL ? 0 : s->img->len; }

// gb_populate_write faults in [p, p+n) for writing in one call (best
// effort: older kernels lack MADV_POPULATE_WRITE).
void gb_populate_write(uint8_t *p, size_t n) { madvise(p, n, MADV_POPULATE_WRITE); }

// gb_slot_populate_write faults in pages [first, first+n) of the slot for
// writing, as gb_populate_write, except those its last rewind found
// written: a written page stays the slot's own, resident copy (a rewind
// or reset copies bytes back into it; only a remap, which forgets the
// list, drops it), and populating a resident page still walks its page
// tables (about 0.3 µs a page here, a sixth of a resume's time for a
// state of 480 pages). Best effort, as gb_populate_write: a page it skips
// that is not resident after all faults when written. Threads may call
// it at once on one slot between rewinds.
void gb_slot_populate_write(gb_slot *s, size_t first, size_t n) {
  size_t end = first + n, i = 0;
  if (s->seen_ok) {
    // Skip the seen runs that end before the range.
    while (i < s->seen_len && s->seen[i] + s->seen[i + 1] <= first) i += 2;
  }
  while (first < end) {
    size_t stop = end;
    if (s->seen_ok && i < s->seen_len) {
      size_t rf = s->seen[i], rn = s->seen[i + 1];
      if (rf <= first) { // inside a written run: skip to its end
        first = rf + rn < end ? rf + rn : end;
        i += 2;
        continue;
      }
      if (rf < stop) stop = rf;
    }
    madvise(s->base + first * PAGE, (stop - first) * PAGE, MADV_POPULATE_WRITE);
    first = stop;
  }
}
