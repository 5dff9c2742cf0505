"""GPU: a residual CNN built on the CPU, moved to the GPU once (pageable copies of every
parameter), compiled, then trained for 20 GPU-bound steps. Building, moving and compiling are
set-up: no host-time or pinned-memory finding belongs on those lines."""
import torch
from _harness import run
from torch import nn


def block(c):
    return nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 128, 3, padding=1), *[block(128) for _ in range(8)],
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))  # SETUP
    model = model.to("cuda", memory_format=torch.channels_last)  # SETUP
    compiled = torch.compile(model)  # SETUP
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, fused=True)
    images = torch.randn(128, 3, 64, 64, device="cuda").to(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (128,), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(compiled(images), labels)  # STEP
        loss.backward()
        opt.step()
        opt.zero_grad()

    run(step, steps=20)
    print("done")


if __name__ == "__main__":
    main()
