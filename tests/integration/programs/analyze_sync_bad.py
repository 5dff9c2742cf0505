"""A training loop that reads the loss back to Python every step with .item()."""
import torch


def main(steps=400):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Linear(32, 1)
    x, target = torch.randn(64, 32), torch.randn(64, 1)
    total = 0.0
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        total += loss.item()  # SYNC
    print(f"mean loss {total / steps:.3f}")


if __name__ == "__main__":
    main()
