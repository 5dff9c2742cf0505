"""A small residual CNN (conv, batch norm, ReLU) trained with SGD on random images: a
well-written program, nothing to fix."""
import torch
from _harness import run
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), Block(32), Block(32),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))  # SETUP
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, fused=True)
    images, labels = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))

    def step():
        loss = nn.functional.cross_entropy(model(images), labels)  # STEP
        loss.backward()
        opt.step()
        opt.zero_grad()

    run(step, steps=12)
    print("done")


if __name__ == "__main__":
    main()
