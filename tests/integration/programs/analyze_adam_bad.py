"""Adam on the per-parameter (single-tensor) path, which is also the default on CPU."""
import torch


def main(steps=60):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(8)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(4, 16)
    for _ in range(steps):
        model(x).sum().backward()
        opt.step()  # STEP
        opt.zero_grad()
    print("done")


if __name__ == "__main__":
    main()
