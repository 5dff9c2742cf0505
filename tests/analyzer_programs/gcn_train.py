"""A two-layer torch-geometric GCN trained on a random graph (node classification). PyG renders
its message-passing code from a template into the temp directory: generated, not the user's."""
import torch
import torch.nn.functional as F
from _harness import run
from torch_geometric.nn import GCNConv


class GCN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(64, 64), GCNConv(64, 8)

    def forward(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(2000, 64)
    edge_index = torch.randint(0, 2000, (2, 20000))
    y = torch.randint(0, 8, (2000,))
    model = GCN()  # SETUP
    opt = torch.optim.Adam(model.parameters(), lr=0.01, fused=True)

    def step():
        loss = F.cross_entropy(model(x, edge_index), y)  # STEP
        loss.backward()
        opt.step()
        opt.zero_grad()

    run(step, steps=15)
    print("done")


if __name__ == "__main__":
    main()
