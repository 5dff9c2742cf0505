"""Scaling a tensor one element at a time from a Python loop."""
import torch


def scale(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2.0 + 1.0  # LOOP
    return out


def main(rounds=6):
    torch.set_num_threads(1)
    x = torch.randn(1000)
    for _ in range(rounds):
        y = scale(x)
    print(f"{float(y.sum()):.1f}")


if __name__ == "__main__":
    main()
