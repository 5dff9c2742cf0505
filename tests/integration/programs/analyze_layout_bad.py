"""Attention-like scores computed from an explicitly transposed, copied key every step."""
import torch


def scores(q, k):
    kt = k.transpose(1, 2).contiguous()  # LAYOUT
    return torch.bmm(q, kt)


def main(steps=600):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    q, k = torch.randn(8, 64, 32), torch.randn(8, 64, 32)
    acc = torch.zeros(8, 64, 64)
    for _ in range(steps):
        acc += scores(q, k)
    print("done")


if __name__ == "__main__":
    main()
