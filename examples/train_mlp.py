"""A small training loop to try DeepContext on: `deepcontext record -- python examples/train_mlp.py`."""

import torch
from torch import nn


def make_batch(n: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 64)
    y = (x[:, :8].sum(dim=1) > 0).long()
    return x, y


def gelu_by_hand(x: torch.Tensor) -> torch.Tensor:
    # Deliberately unfused: five elementwise operators where nn.GELU is one.
    return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x * x * x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 256)
        self.fc2 = nn.Linear(256, 256)
        self.out = nn.Linear(256, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = gelu_by_hand(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.out(x)


def main() -> None:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(200):
        x, y = make_batch()
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
