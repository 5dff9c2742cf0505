"""Manual SGD with weight decay: in-place updates per parameter per step, from a Python loop."""
import torch


def sgd_step(params, lr, weight_decay=1e-4):
    with torch.no_grad():
        for p in params:
            p.mul_(1 - lr * weight_decay).add_(p.grad, alpha=-lr)  # UPDATE
            p.grad = None


def main(steps=150):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layers = [torch.nn.Linear(16, 16) for _ in range(12)]
    model = torch.nn.Sequential(*layers)
    params = list(model.parameters())
    x = torch.randn(8, 16)
    for _ in range(steps):
        loss = model(x).square().mean()
        loss.backward()
        sgd_step(params, 0.01)  # STEP
    print("done")


if __name__ == "__main__":
    main()
