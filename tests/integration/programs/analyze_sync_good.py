"""The same loop accumulating the loss on the device and reading it once."""
import torch


def main(steps=400):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Linear(32, 1)
    x, target = torch.randn(64, 32), torch.randn(64, 1)
    total = torch.zeros(())
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        total += loss.detach()  # SYNC
    print(f"mean loss {total.item() / steps:.3f}")


if __name__ == "__main__":
    main()
