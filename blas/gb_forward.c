/*
 * gb_forward.c - the forwarding stubs' slow path (gen_forward.py makes the stubs): the
 * first call of a routine this library does not serve itself looks it up in the CPU BLAS
 * and keeps the address in the stub's table entry, where later calls jump straight.
 */
#include <stdatomic.h>
#include <stddef.h>

#include "gb_internal.h"

extern const size_t gb_fwd_count;
extern const char *const gb_fwd_names[];
extern void *gb_fwd_table[];

__attribute__((visibility("hidden"))) void *gb_fwd_resolve(unsigned index);

void *gb_fwd_resolve(unsigned index) {
  void *p = gb_cpu_sym(gb_fwd_names[index]); /* aborts when no CPU BLAS has it */
  atomic_store((_Atomic(void *) *)&gb_fwd_table[index], p);
  return p;
}
