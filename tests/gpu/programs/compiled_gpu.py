"""torch.compile on the GPU: Triton kernels from Inductor (training, default mode), then a
mode="reduce-overhead" copy replayed from CUDA graphs (inference)."""

import torch

STEPS = 6
REPLAYS = 5


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(1024, 1024, device="cuda") / 32)

    def forward(self, x):
        y = torch.relu(x @ self.w)  # RELU_MM
        z = y * 2 + 1  # MUL_ADD
        return z.sum()  # SUM


def main() -> None:
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(512, 1024, device="cuda")
    compiled = torch.compile(model)
    for _ in range(STEPS):
        loss = compiled(x)  # CALL
        loss.backward()  # BACKWARD
    graphed = torch.compile(Block(), mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3):  # warm-up and recording
            graphed(x)  # WARMUP
        for _ in range(REPLAYS):
            out = graphed(x)  # REPLAY
    torch.cuda.synchronize()
    print(f"loss {loss.item():.3f} out {out.item():.3f}")


if __name__ == "__main__":
    main()
