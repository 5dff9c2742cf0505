"""Training whose batches are built in the main process (num_workers=0) with Python-heavy items."""
import math

import torch
from torch.utils.data import DataLoader, Dataset


class Signals(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        return torch.tensor([math.sin(i * j * 0.01) for j in range(256)])


def main(workers=0):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Linear(256, 1)
    loader = DataLoader(Signals(), batch_size=16, num_workers=workers)
    for batch in loader:  # LOADER
        model(batch).sum().backward()
    print("done")


if __name__ == "__main__":
    main()
