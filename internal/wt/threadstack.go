package wt

// #include <pthread.h>
// static size_t gb_default_thread_stack(void) {
//     pthread_attr_t a;
//     size_t s = 0;
//     if (pthread_attr_init(&a) != 0) return 0;
//     if (pthread_attr_getstacksize(&a, &s) != 0) s = 0;
//     pthread_attr_destroy(&a);
//     return s;
// }
import "C"

// DefaultThreadStack returns the stack size, in bytes, of threads the C
// library creates with default attributes (glibc: the RLIMIT_STACK soft
// limit, or an architecture default when it is unlimited). Go's runtime
// creates the threads that run cgo calls, and so run wasm, this way. It
// returns 0 when the C library does not say.
func DefaultThreadStack() int {
	return int(C.gb_default_thread_stack())
}
