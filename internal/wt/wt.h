// Declarations of the parts of the wasmtime C API (v39) that glovebox uses.
// The library itself is linked by github.com/bytecodealliance/wasmtime-go,
// which ships it prebuilt; these prototypes follow wasmtime's published C API.
#ifndef GLOVEBOX_WT_H
#define GLOVEBOX_WT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct wasm_config_t wasm_config_t;
typedef struct wasm_engine_t wasm_engine_t;
typedef struct wasmtime_module wasmtime_module_t;
typedef struct wasmtime_store wasmtime_store_t;
typedef struct wasmtime_context wasmtime_context_t;
typedef struct wasmtime_linker wasmtime_linker_t;
typedef struct wasmtime_caller wasmtime_caller_t;
typedef struct wasmtime_error wasmtime_error_t;
typedef struct wasm_trap_t wasm_trap_t;
typedef struct wasi_config_t wasi_config_t;
typedef struct wasm_valtype_t wasm_valtype_t;
typedef struct wasm_functype_t wasm_functype_t;
typedef struct wasmtime_instance_pre wasmtime_instance_pre_t;

typedef struct wasm_byte_vec_t {
  size_t size;
  char *data;
} wasm_byte_vec_t;

typedef struct wasm_valtype_vec_t {
  size_t size;
  wasm_valtype_t **data;
} wasm_valtype_vec_t;

typedef struct wasmtime_func {
  uint64_t store_id;
  void *private_;
} wasmtime_func_t;

typedef struct wasmtime_memory {
  struct {
    uint64_t store_id;
    uint32_t private1;
  };
  uint32_t private2;
} wasmtime_memory_t;

typedef struct wasmtime_global {
  uint64_t store_id;
  uint32_t private1;
  uint32_t private2;
  uint32_t private3;
} wasmtime_global_t;

typedef struct wasmtime_table {
  struct {
    uint64_t store_id;
    uint32_t private1;
  };
  uint32_t private2;
} wasmtime_table_t;

typedef union wasmtime_extern_union {
  wasmtime_func_t func;
  wasmtime_global_t global;
  wasmtime_table_t table;
  wasmtime_memory_t memory;
  void *sharedmemory;
} wasmtime_extern_union_t;

typedef struct wasmtime_extern {
  uint8_t kind;
  wasmtime_extern_union_t of;
} wasmtime_extern_t;

typedef struct wasmtime_instance {
  uint64_t store_id;
  size_t private_;
} wasmtime_instance_t;

typedef union wasmtime_val_raw {
  int32_t i32;
  int64_t i64;
  float f32;
  double f64;
  uint8_t v128[16];
  uint32_t anyref;
  uint32_t externref;
  void *funcref;
} wasmtime_val_raw_t;

typedef struct wasmtime_anyref_ {
  uint64_t store_id;
  uint32_t private1;
  uint32_t private2;
  void *private3;
} wasmtime_anyref_;

typedef union wasmtime_valunion {
  int32_t i32;
  int64_t i64;
  float f32;
  double f64;
  wasmtime_anyref_ anyref;
  wasmtime_anyref_ externref;
  wasmtime_func_t funcref;
  uint8_t v128[16];
} wasmtime_valunion_t;

typedef struct wasmtime_val {
  uint8_t kind;
  wasmtime_valunion_t of;
} wasmtime_val_t;

typedef wasm_trap_t *(*wasmtime_func_unchecked_callback_t)(
    void *env, wasmtime_caller_t *caller, wasmtime_val_raw_t *args_and_results,
    size_t num_args_and_results);

// config and engine
wasm_config_t *wasm_config_new(void);
void wasm_config_delete(wasm_config_t *);
wasm_engine_t *wasm_engine_new_with_config(wasm_config_t *);
void wasm_engine_delete(wasm_engine_t *);
void wasmtime_engine_increment_epoch(wasm_engine_t *);
void wasmtime_config_consume_fuel_set(wasm_config_t *, bool);
void wasmtime_config_epoch_interruption_set(wasm_config_t *, bool);
void wasmtime_config_max_wasm_stack_set(wasm_config_t *, size_t);
void wasmtime_config_parallel_compilation_set(wasm_config_t *, bool);
void wasmtime_config_memory_init_cow_set(wasm_config_t *, bool);
void wasmtime_config_memory_reservation_set(wasm_config_t *, uint64_t);
void wasmtime_config_memory_guard_size_set(wasm_config_t *, uint64_t);
void wasmtime_config_wasm_threads_set(wasm_config_t *, bool);
wasmtime_error_t *wasmtime_config_target_set(wasm_config_t *, const char *);

// errors and traps
wasmtime_error_t *wasmtime_error_new(const char *);
void wasmtime_error_delete(wasmtime_error_t *);
void wasmtime_error_message(const wasmtime_error_t *, wasm_byte_vec_t *);
bool wasmtime_error_exit_status(const wasmtime_error_t *, int *);
wasm_trap_t *wasmtime_trap_new(const char *msg, size_t len);
bool wasmtime_trap_code(const wasm_trap_t *, uint8_t *);
void wasm_trap_message(const wasm_trap_t *, wasm_byte_vec_t *);
void wasm_trap_delete(wasm_trap_t *);
void wasm_byte_vec_delete(wasm_byte_vec_t *);

// types
wasm_valtype_t *wasm_valtype_new(uint8_t);
void wasm_valtype_vec_new(wasm_valtype_vec_t *, size_t, wasm_valtype_t *const[]);
wasm_functype_t *wasm_functype_new(wasm_valtype_vec_t *params, wasm_valtype_vec_t *results);
void wasm_functype_delete(wasm_functype_t *);

// modules
wasmtime_error_t *wasmtime_module_new(wasm_engine_t *, const uint8_t *, size_t, wasmtime_module_t **);
wasmtime_error_t *wasmtime_module_serialize(wasmtime_module_t *, wasm_byte_vec_t *);
wasmtime_error_t *wasmtime_module_deserialize_file(wasm_engine_t *, const char *, wasmtime_module_t **);
void wasmtime_module_delete(wasmtime_module_t *);

// stores
wasmtime_store_t *wasmtime_store_new(wasm_engine_t *, void *data, void (*finalizer)(void *));
wasmtime_context_t *wasmtime_store_context(wasmtime_store_t *);
void wasmtime_store_limiter(wasmtime_store_t *, int64_t memory_size, int64_t table_elements,
                            int64_t instances, int64_t tables, int64_t memories);
void wasmtime_store_delete(wasmtime_store_t *);
void *wasmtime_context_get_data(const wasmtime_context_t *);
wasmtime_error_t *wasmtime_context_set_fuel(wasmtime_context_t *, uint64_t);
wasmtime_error_t *wasmtime_context_get_fuel(const wasmtime_context_t *, uint64_t *);
wasmtime_error_t *wasmtime_context_set_wasi(wasmtime_context_t *, wasi_config_t *);
void wasmtime_context_set_epoch_deadline(wasmtime_context_t *, uint64_t);
void wasmtime_store_epoch_deadline_callback(
    wasmtime_store_t *,
    wasmtime_error_t *(*func)(wasmtime_context_t *, void *, uint64_t *, uint8_t *),
    void *data, void (*finalizer)(void *));

// WASI
wasi_config_t *wasi_config_new(void);
bool wasi_config_set_argv(wasi_config_t *, size_t, const char *argv[]);
bool wasi_config_set_env(wasi_config_t *, size_t, const char *names[], const char *values[]);
void wasi_config_set_stdout_custom(wasi_config_t *, ptrdiff_t (*)(void *, const unsigned char *, size_t), void *, void (*)(void *));
void wasi_config_set_stderr_custom(wasi_config_t *, ptrdiff_t (*)(void *, const unsigned char *, size_t), void *, void (*)(void *));
bool wasi_config_preopen_dir(wasi_config_t *, const char *host, const char *guest, size_t dir_perms, size_t file_perms);
void wasi_config_delete(wasi_config_t *);

// linking and instances
wasmtime_linker_t *wasmtime_linker_new(wasm_engine_t *);
void wasmtime_linker_delete(wasmtime_linker_t *);
void wasmtime_linker_allow_shadowing(wasmtime_linker_t *, bool);
wasmtime_error_t *wasmtime_linker_define_wasi(wasmtime_linker_t *);
wasmtime_error_t *wasmtime_linker_define_func_unchecked(
    wasmtime_linker_t *, const char *module, size_t module_len, const char *name, size_t name_len,
    const wasm_functype_t *ty, wasmtime_func_unchecked_callback_t cb, void *data, void (*finalizer)(void *));
wasmtime_error_t *wasmtime_linker_instantiate_pre(const wasmtime_linker_t *, const wasmtime_module_t *,
                                                  wasmtime_instance_pre_t **);
void wasmtime_instance_pre_delete(wasmtime_instance_pre_t *);
wasmtime_error_t *wasmtime_instance_pre_instantiate(const wasmtime_instance_pre_t *, wasmtime_context_t *,
                                                    wasmtime_instance_t *, wasm_trap_t **);
wasmtime_error_t *wasmtime_instance_new(wasmtime_context_t *store, const wasmtime_module_t *module,
                                        const wasmtime_extern_t *imports, size_t nimports, wasmtime_instance_t *instance,
                                        wasm_trap_t **trap);
bool wasmtime_linker_get(const wasmtime_linker_t *, wasmtime_context_t *, const char *module, size_t module_len,
                         const char *name, size_t name_len, wasmtime_extern_t *item);
bool wasmtime_instance_export_get(wasmtime_context_t *, const wasmtime_instance_t *, const char *, size_t,
                                  wasmtime_extern_t *);
bool wasmtime_caller_export_get(wasmtime_caller_t *, const char *, size_t, wasmtime_extern_t *);
wasmtime_context_t *wasmtime_caller_context(wasmtime_caller_t *);
wasmtime_error_t *wasmtime_func_call_unchecked(wasmtime_context_t *, const wasmtime_func_t *,
                                               wasmtime_val_raw_t *, size_t, wasm_trap_t **);
uint8_t *wasmtime_memory_data(const wasmtime_context_t *, const wasmtime_memory_t *);
size_t wasmtime_memory_data_size(const wasmtime_context_t *, const wasmtime_memory_t *);
void wasmtime_global_get(wasmtime_context_t *, const wasmtime_global_t *, wasmtime_val_t *);

typedef struct wasm_memorytype_t wasm_memorytype_t;
typedef uint8_t *(*wasmtime_memory_get_callback_t)(void *env, size_t *byte_size, size_t *byte_capacity);
typedef wasmtime_error_t *(*wasmtime_memory_grow_callback_t)(void *env, size_t new_size);
typedef struct wasmtime_linear_memory {
  void *env;
  wasmtime_memory_get_callback_t get_memory;
  wasmtime_memory_grow_callback_t grow_memory;
  void (*finalizer)(void *);
} wasmtime_linear_memory_t;
typedef wasmtime_error_t *(*wasmtime_new_memory_callback_t)(void *env, const wasm_memorytype_t *ty, size_t minimum,
                                                             size_t maximum, size_t reserved_size_in_bytes,
                                                             size_t guard_size_in_bytes,
                                                             wasmtime_linear_memory_t *memory_ret);
typedef struct wasmtime_memory_creator {
  void *env;
  wasmtime_new_memory_callback_t new_memory;
  void (*finalizer)(void *);
} wasmtime_memory_creator_t;
void wasmtime_config_host_memory_creator_set(wasm_config_t *, wasmtime_memory_creator_t *);
wasmtime_error_t *wasmtime_global_set(wasmtime_context_t *, const wasmtime_global_t *, const wasmtime_val_t *);

// A memory image: the first len bytes of a new linear memory are mapped
// privately (copy-on-write) from fd; the byte ranges in hot (offset, length
// pairs) are faulted in up front, for writing when the length has
// GB_HOT_WRITE set, for reading otherwise.
#define GB_HOT_WRITE (1ULL << 63)
typedef struct gb_slot gb_slot;
typedef struct gb_ckdata gb_ckdata;
typedef struct gb_image {
  int fd;
  size_t len;
  size_t nhot;
  const uint64_t *hot;
  // Recycling (see memory_linux.c): linear memories made from this image
  // are reset and reused rather than unmapped, up to max_free of them.
  void *mu; // pthread_mutex_t*
  gb_slot *free;
  size_t nfree, max_free;
  size_t live;     // memories made from the image and not yet freed
  int closed;      // gb_image_close was called; freed when live reaches 0
  int pagemap_fd;  // /proc/self/pagemap, or -1: recycling disabled
  void *ro;        // read-only view of the image, the source of resets
  uint64_t reused, made, dropped, restored, rewound;
  uint64_t tracked; // rewinds that restored only the pages write tracking found
} gb_image;

gb_image *gb_image_new(int fd, size_t len, const uint64_t *hot, size_t nhot, size_t max_free);
void gb_image_close(gb_image *img);
void gb_use_host_memory(wasm_config_t *config);
void gb_disable_pagemap_scan(void);
void gb_set_write_tracking(int on);
int gb_write_tracking(void);
unsigned gb_set_track_renewal(unsigned n);
long gb_slot_checkpoint(gb_slot *s, gb_ckdata *like, int *shared);
gb_ckdata *gb_slot_ckdata(gb_slot *s);
void gb_ckdata_release(gb_ckdata *d);
gb_ckdata *gb_ckdata_ref(gb_ckdata *d);
long gb_slot_rewind(gb_slot *s);
uint64_t gb_slot_ck_hash(gb_slot *s);
int gb_slot_has_ck(gb_slot *s);
size_t gb_slot_image_len(gb_slot *s);
long gb_slot_written(gb_slot *s, size_t **runs, size_t *nruns);
size_t gb_slot_diff_xor(gb_slot *s, int use_ck, const size_t *runs, size_t nruns, uint32_t *pages, uint8_t *out);
void gb_populate_write(uint8_t *p, size_t n);
void gb_slot_populate_write(gb_slot *s, size_t first, size_t n);
wasmtime_error_t *wasmtime_memory_grow(wasmtime_context_t *, const wasmtime_memory_t *, uint64_t delta, uint64_t *prev);

// Per-store memory accounting: while a call made with gb_call runs, linear
// memory growth past mem_limit is refused (memory.grow returns -1) and
// noted in grow_refused.
typedef struct gb_limits {
  size_t mem_limit;
  int grow_refused;
} gb_limits;
wasmtime_error_t *gb_call(wasmtime_context_t *ctx, const wasmtime_func_t *f, wasmtime_val_raw_t *vals, size_t n,
                          wasm_trap_t **trap, gb_limits *limits);
wasmtime_error_t *gb_instantiate(const wasmtime_instance_pre_t *pre, wasmtime_context_t *ctx, const gb_image *img,
                                 uint64_t group, wasmtime_instance_t *inst, wasm_trap_t **trap, gb_slot **slot);
#define GB_GROUP_FRESH UINT64_MAX
void gb_slot_range(const gb_slot *s, uintptr_t *base, size_t *len);

// trampolines defined in wt_cgo.c
wasm_functype_t *gb_functype(const uint8_t *params, size_t np, const uint8_t *results, size_t nr);
wasm_trap_t *gb_host_trampoline(void *env, wasmtime_caller_t *caller, wasmtime_val_raw_t *args, size_t n);
wasmtime_error_t *gb_epoch_trampoline(wasmtime_context_t *ctx, void *data, uint64_t *delta, uint8_t *kind);
ptrdiff_t gb_stdout_trampoline(void *data, const unsigned char *buf, size_t len);
ptrdiff_t gb_stderr_trampoline(void *data, const unsigned char *buf, size_t len);
wasmtime_store_t *gb_store_new(wasm_engine_t *engine, uintptr_t handle);
void gb_wasi_output(wasi_config_t *config, uintptr_t handle);
wasmtime_error_t *gb_define_func(wasmtime_linker_t *linker, const char *module, size_t module_len, const char *name,
                                 size_t name_len, const wasm_functype_t *ty, uintptr_t id);
uintptr_t gb_context_data(const wasmtime_context_t *ctx);
// A memory's base and size in one call (Memory.Data is on every host call).
typedef struct {
  uint8_t *p;
  size_t n;
} gb_mem_t;
gb_mem_t gb_memory_data(const wasmtime_context_t *ctx, const wasmtime_memory_t *mem);

#endif
