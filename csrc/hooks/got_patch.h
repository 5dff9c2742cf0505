// Reading and rewriting the symbol bindings (GOT slots) of loaded ELF objects: the places where
// a call through the PLT, a -fno-plt call or a taken function address finds its target.
#pragma once
#include <link.h>

namespace dc::hooks {

enum class Binding { Lazy, Eager };  // Lazy: a PLT slot that may still point at its PLT stub

// Calls visit(ctx, symbol, slot, binding) for every relocation of `obj` that binds a symbol's
// address into a pointer-sized slot (JUMP_SLOT, GLOB_DAT, absolute 64-bit with addend 0).
using BindingVisitor = void (*)(void* ctx, const dl_phdr_info* obj, const char* symbol,
                                void** slot, Binding binding);
void for_each_binding(const dl_phdr_info* obj, BindingVisitor visit, void* ctx);

// Whether `addr` lies in one of obj's loaded segments (an unresolved lazy slot points there).
bool in_object(const dl_phdr_info* obj, const void* addr);

// Writes `value` into a slot of `obj`, lifting RELRO protection for the write; false if the
// page cannot be made writable.
bool write_slot(const dl_phdr_info* obj, void** slot, void* value);

// Points every loaded object's binding of `symbol` (a mangled name) at `replacement`, except in
// the object that contains `keep_in` (the caller's own, whose calls must reach the original);
// returns how many slots now point there. Objects loaded later keep the original.
int rebind_everywhere(const char* symbol, void* replacement, const void* keep_in);
// How many of those bindings point at `value` now (nothing is written).
int count_bindings(const char* symbol, const void* value, const void* keep_in);

}  // namespace dc::hooks
