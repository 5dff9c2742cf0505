"""Manual SGD with momentum and weight decay: in-place updates per parameter per step, from a
Python loop."""
import torch


def sgd_step(params, bufs, lr, momentum=0.9, weight_decay=1e-4):
    with torch.no_grad():
        for p, buf in zip(params, bufs):
            p.sub_(buf.mul_(momentum).add_(p.grad).add_(p, alpha=weight_decay), alpha=lr)  # UPDATE
            p.grad = None


def main(steps=150):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layers = [torch.nn.Linear(16, 16) for _ in range(12)]
    model = torch.nn.Sequential(*layers)
    params = list(model.parameters())
    bufs = [torch.zeros_like(p) for p in params]
    x = torch.randn(8, 16)
    for _ in range(steps):
        loss = model(x).square().mean()
        loss.backward()
        sgd_step(params, bufs, 0.01)  # STEP
    print("done")


if __name__ == "__main__":
    main()
