// C halves of the callbacks wasmtime makes into Go. Each forwards to an
// exported Go function; see wt_cgo.go.
#include "wt.h"
#include "_cgo_export.h"

wasm_functype_t *gb_functype(const uint8_t *params, size_t np, const uint8_t *results, size_t nr) {
  wasm_valtype_t *p[16], *r[16];
  if (np > 16 || nr > 16) return NULL;
  for (size_t i = 0; i < np; i++) p[i] = wasm_valtype_new(params[i]);
  for (size_t i = 0; i < nr; i++) r[i] = wasm_valtype_new(results[i]);
  wasm_valtype_vec_t pv, rv;
  wasm_valtype_vec_new(&pv, np, p);
  wasm_valtype_vec_new(&rv, nr, r);
  return wasm_functype_new(&pv, &rv);
}

wasm_trap_t *gb_host_trampoline(void *env, wasmtime_caller_t *caller, wasmtime_val_raw_t *args, size_t n) {
  // The context and its data are looked up here, in C, so the Go side
  // needs no cgo call to find them.
  wasmtime_context_t *ctx = wasmtime_caller_context(caller);
  return (wasm_trap_t *)gbHostCall((uintptr_t)env, caller, ctx, (uintptr_t)wasmtime_context_get_data(ctx), args, n);
}

wasmtime_error_t *gb_epoch_trampoline(wasmtime_context_t *ctx, void *data, uint64_t *delta, uint8_t *kind) {
  *kind = 0; // WASMTIME_UPDATE_DEADLINE_CONTINUE
  return (wasmtime_error_t *)gbEpoch((uintptr_t)data, delta);
}

ptrdiff_t gb_stdout_trampoline(void *data, const unsigned char *buf, size_t len) {
  return gbWrite((uintptr_t)data, 1, (unsigned char *)buf, len);
}

ptrdiff_t gb_stderr_trampoline(void *data, const unsigned char *buf, size_t len) {
  return gbWrite((uintptr_t)data, 2, (unsigned char *)buf, len);
}

wasmtime_store_t *gb_store_new(wasm_engine_t *engine, uintptr_t handle) {
  wasmtime_store_t *s = wasmtime_store_new(engine, (void *)handle, NULL);
  wasmtime_store_epoch_deadline_callback(s, gb_epoch_trampoline, (void *)handle, NULL);
  return s;
}

void gb_wasi_output(wasi_config_t *config, uintptr_t handle) {
  wasi_config_set_stdout_custom(config, gb_stdout_trampoline, (void *)handle, NULL);
  wasi_config_set_stderr_custom(config, gb_stderr_trampoline, (void *)handle, NULL);
}

wasmtime_error_t *gb_define_func(wasmtime_linker_t *linker, const char *module, size_t module_len, const char *name,
                                 size_t name_len, const wasm_functype_t *ty, uintptr_t id) {
  return wasmtime_linker_define_func_unchecked(linker, module, module_len, name, name_len, ty, gb_host_trampoline,
                                               (void *)id, NULL);
}

uintptr_t gb_context_data(const wasmtime_context_t *ctx) { return (uintptr_t)wasmtime_context_get_data(ctx); }

gb_mem_t gb_memory_data(const wasmtime_context_t *ctx, const wasmtime_memory_t *mem) {
  gb_mem_t m = {wasmtime_memory_data(ctx, mem), wasmtime_memory_data_size(ctx, mem)};
  return m;
}
