import torch

torch.backends.cudnn.benchmark = False
conv = torch.nn.Conv2d(32, 64, 3, padding=1).cuda()
x = torch.randn(16, 32, 64, 64, device="cuda")
with torch.no_grad():
    for _ in range(5):
        y = conv(x)  # CONV
torch.cuda.synchronize()
print("ok")
