"""A Triton kernel with one hot line (a scattered load in a loop): the PC sampling GPU test's
Triton program; its samples must land on this file's lines."""
import torch
import triton
import triton.language as tl


@triton.jit
def gather_sum(x_ptr, out_ptr, n, iters, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(iters):
        acc += tl.load(x_ptr + ((offs * 33 + k * 4099) & (n - 1)))  # HOT
    tl.store(out_ptr + offs, acc)


n = 1 << 24
x = torch.ones(n, device="cuda")
out = torch.empty(n, device="cuda")
for _ in range(5):
    gather_sum[(n // 1024,)](x, out, n, 256, BLOCK=1024)  # CALL
torch.cuda.synchronize()
assert out[0].item() == 256.0
print("pc_triton done")
