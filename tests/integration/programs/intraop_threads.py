import torch

torch.set_num_threads(2)
a = torch.randn(1024, 1024)
for _ in range(30):
    b = a @ a  # MATMUL
print("ok")
