"""The same training with torch.optim.SGD(momentum=0.9, fused=True): one fused update for all
parameters."""
import torch


def main(steps=150):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layers = [torch.nn.Linear(16, 16) for _ in range(12)]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4,
                          fused=True)
    x = torch.randn(8, 16)
    for _ in range(steps):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()  # STEP
        opt.zero_grad(set_to_none=True)
    print("done")


if __name__ == "__main__":
    main()
