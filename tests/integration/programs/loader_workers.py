import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([float(i * i)])


if __name__ == "__main__":
    total = 0.0
    for batch in DataLoader(Squares(), batch_size=8, num_workers=2):
        total += float(batch.sum())
    print("total", total)
