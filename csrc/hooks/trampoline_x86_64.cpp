// The x86-64 stubs (System V ABI). Only registers that carry arguments in some signature are
// saved: rdi, rsi, rdx, rcx, r8, r9, xmm0-7, rax (vector-register count of a variadic call) and
// r10 (static chain). The stack is never copied: the real function runs on the caller's frame,
// so any number of stack arguments passes through. Returns keep rax, rdx, xmm0 and xmm1.
// Not preserved: the upper halves of ymm/zmm argument registers (no runtime API takes
// __m256 by value) and an x87 return value beyond st0 (hook_exit does no x87 arithmetic).
#include <sys/syscall.h>
#include <unistd.h>

#include "trampoline.h"

#if defined(__x86_64__)

// Stub i: endbr64 (a no-op without CET), slot index in r11 (scratch in every signature), jump.
// 16 bytes each, so stub i is at dc_hook_stubs + 16 * i.
asm(R"(
    .text
    .p2align 4
    .globl dc_hook_stubs
    .hidden dc_hook_stubs
dc_hook_stubs:
    .set dc_stub_index, 0
    .rept 256
    .p2align 4
    endbr64
    movl $dc_stub_index, %r11d
    jmp dc_hook_common
    .set dc_stub_index, dc_stub_index + 1
    .endr
    .p2align 4
dc_hook_stubs_end:
    .globl dc_hook_stubs_end
    .hidden dc_hook_stubs_end

    .p2align 4
    .type dc_hook_common, @function
dc_hook_common:
    .cfi_startproc
    subq $200, %rsp
    .cfi_adjust_cfa_offset 200
    movq %rdi, 0(%rsp)
    movq %rsi, 8(%rsp)
    movq %rdx, 16(%rsp)
    movq %rcx, 24(%rsp)
    movq %r8, 32(%rsp)
    movq %r9, 40(%rsp)
    movq %rax, 48(%rsp)
    movq %r10, 56(%rsp)
    movdqu %xmm0, 64(%rsp)
    movdqu %xmm1, 80(%rsp)
    movdqu %xmm2, 96(%rsp)
    movdqu %xmm3, 112(%rsp)
    movdqu %xmm4, 128(%rsp)
    movdqu %xmm5, 144(%rsp)
    movdqu %xmm6, 160(%rsp)
    movdqu %xmm7, 176(%rsp)
    movl %r11d, %edi
    leaq 200(%rsp), %rsi
    movq %rsp, %rdx
    call dc_hook_enter
    movq %rax, %r11
    movq 0(%rsp), %rdi
    movq 8(%rsp), %rsi
    movq 16(%rsp), %rdx
    movq 24(%rsp), %rcx
    movq 32(%rsp), %r8
    movq 40(%rsp), %r9
    movq 48(%rsp), %rax
    movq 56(%rsp), %r10
    movdqu 64(%rsp), %xmm0
    movdqu 80(%rsp), %xmm1
    movdqu 96(%rsp), %xmm2
    movdqu 112(%rsp), %xmm3
    movdqu 128(%rsp), %xmm4
    movdqu 144(%rsp), %xmm5
    movdqu 160(%rsp), %xmm6
    movdqu 176(%rsp), %xmm7
    addq $200, %rsp
    .cfi_adjust_cfa_offset -200
    jmp *%r11
    .cfi_endproc
    .size dc_hook_common, .-dc_hook_common

    .p2align 4
    .globl dc_hook_return
    .hidden dc_hook_return
    .type dc_hook_return, @function
dc_hook_return:
    subq $56, %rsp
    movq %rax, 0(%rsp)
    movq %rdx, 8(%rsp)
    movdqu %xmm0, 16(%rsp)
    movdqu %xmm1, 32(%rsp)
    leaq 56(%rsp), %rdi
    andq $-16, %rsp
    pushq %rdi
    pushq %rdi
    call dc_hook_exit
    movq %rax, %r11
    popq %rdi
    popq %rdi
    leaq -56(%rdi), %rsp
    movq 0(%rsp), %rax
    movq 8(%rsp), %rdx
    movdqu 16(%rsp), %xmm0
    movdqu 32(%rsp), %xmm1
    addq $56, %rsp
    jmp *%r11
    .size dc_hook_return, .-dc_hook_return
)");

extern "C" char dc_hook_stubs[];
extern "C" char dc_hook_stubs_end[];

namespace dc::hooks {

void* stub_address(int i) {
  return (i >= 0 && i < kMaxStubs) ? dc_hook_stubs + 16 * i : nullptr;
}

bool is_stub(const void* p, int* i) {
  auto* c = static_cast<const char*>(p);
  if (c < dc_hook_stubs || c >= dc_hook_stubs_end || (c - dc_hook_stubs) % 16 != 0) return false;
  *i = static_cast<int>((c - dc_hook_stubs) / 16);
  return true;
}

const char* trampolines_unavailable() {
  // A CET shadow stack would fault at the swapped return address (ARCH_SHSTK_STATUS).
  unsigned long features = 0;
  if (syscall(SYS_arch_prctl, 0x5005, &features) == 0 && (features & 1))
    return "declared hooks cannot run with a CET shadow stack enabled";
  return "";
}

}  // namespace dc::hooks

#else  // no trampolines: hooks are refused with a clear message

extern "C" char dc_hook_return[1] = {0};

namespace dc::hooks {
void* stub_address(int) { return nullptr; }
bool is_stub(const void*, int*) { return false; }
const char* trampolines_unavailable() { return "declared hooks need an x86-64 machine"; }
}  // namespace dc::hooks

#endif
