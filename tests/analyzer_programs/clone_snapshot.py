"""A training loop that keeps an exponential moving average of its weights (one multi-tensor
update), cloning the parameters each step (an intentional copy of contiguous tensors), and zeroes
gradients in place (zero_grad(set_to_none=False)): well-written, nothing to fix."""
import torch
from _harness import run


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 512))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, fused=True)
    ema = [p.detach().clone() for p in model.parameters()]
    x = torch.randn(128, 512)

    def step():
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=False)  # ZERO
        with torch.no_grad():
            previous = [p.clone() for p in model.parameters()]  # CLONE
            torch._foreach_lerp_(ema, previous, 0.1)

    run(step, steps=20)
    print("done")


if __name__ == "__main__":
    main()
