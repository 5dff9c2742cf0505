// One generic entry for every declared function, whatever its signature: stub i saves the
// argument registers, asks hook_enter where to go, restores them and jumps to the real function
// with the caller's stack untouched (stack arguments included). To see the call end, hook_enter
// may swap the return address for hook_return's, keeping the real one on a per-thread shadow
// stack; hook_exit gives it back.
#pragma once
#include <cstdint>

namespace dc::hooks {

constexpr int kMaxStubs = 256;

// The entry of stub `i` (nullptr where there are no trampolines: only x86-64 has them).
void* stub_address(int i);
// Whether `p` is one of the stubs; its index in *i.
bool is_stub(const void* p, int* i);
// Why trampolines cannot run here ("" when they can).
const char* trampolines_unavailable();

// Saved argument registers, in the order the stub stores them.
struct SavedRegs {
  uint64_t gp[8];  // rdi rsi rdx rcx r8 r9 rax r10
  uint64_t xmm[16];
};

}  // namespace dc::hooks

// Called by the stubs (hooks.cpp). `ret_slot` is the caller's return address on the stack;
// stack arguments follow it. Returns the function to jump to.
extern "C" __attribute__((visibility("hidden"))) void* dc_hook_enter(uint32_t i, void** ret_slot, const dc::hooks::SavedRegs* regs);
// Called on return from a call whose return address was swapped; `sp` is the stack pointer after
// the real function's return. Returns the caller's real return address.
extern "C" __attribute__((visibility("hidden"))) void* dc_hook_exit(void** sp);
// Where swapped calls return to.
extern "C" __attribute__((visibility("hidden"))) char dc_hook_return[];
