import torch

torch.set_num_threads(2)
torch.manual_seed(0)
# CPU flash attention's backward calls aten::empty on each worker of the intra-op pool
q, k, v = (torch.randn(8, 8, 256, 64, requires_grad=True) for _ in range(3))
for _ in range(20):
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # SDPA
    out.sum().backward()  # BACKWARD
print("ok")
