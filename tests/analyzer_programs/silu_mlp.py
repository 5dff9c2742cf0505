"""An MLP whose activation is a hand-written SiLU, x / (1 + exp(-x)): four elementwise
operators per call (and their backward). The fix is torch.nn.functional.silu."""
import torch
import torch.nn.functional as F
from _harness import run, variant


def act(x, fused):
    if fused:
        return F.silu(x)
    return x / (1.0 + torch.exp(-x))  # ACT


def main(fixed: bool) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layers = torch.nn.ModuleList(torch.nn.Linear(256, 256) for _ in range(4))
    opt = torch.optim.AdamW(layers.parameters(), lr=1e-3, fused=True)
    x = torch.randn(256, 256)

    def step():
        h = x
        for layer in layers:
            h = act(layer(h), fixed)  # LAYER
        h.square().mean().backward()
        opt.step()
        opt.zero_grad()

    run(step, steps=20)
    print("done")


if __name__ == "__main__":
    main(variant() == "after")
