"""Benchmark workloads: each builds its model in code (no downloads) and returns a ``step()``
that runs one training step. Same code on every device; only the sizes differ (``SIZES``)."""

from __future__ import annotations

import random
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

Step = Callable[[], None]

# Sizes per device: CPU sizes give ~5-50 ms steps on 2 cores, CUDA sizes are the H200 targets.
SIZES = {
    "mlp":         {"cpu": {"batch": 64, "width": 512, "depth": 4}, "cuda": {"batch": 512, "width": 4096, "depth": 4}},
    "cnn":         {"cpu": {"batch": 16, "image": 32}, "cuda": {"batch": 256, "image": 64}},
    "transformer": {"cpu": {"batch": 8, "seq": 64, "d": 128, "layers": 1}, "cuda": {"batch": 32, "seq": 256, "d": 512, "layers": 1}},
    "preprocess":  {"cpu": {"items": 800, "dim": 32}, "cuda": {"items": 800, "dim": 32}},
    "resnet50":    {"cpu": {"batch": 2, "image": 64}, "cuda": {"batch": 64, "image": 224}},
    "gpt":         {"cpu": {"batch": 2, "seq": 64, "d": 128, "layers": 2, "vocab": 1024},
                    "cuda": {"batch": 16, "seq": 256, "d": 512, "layers": 6, "vocab": 8192}},
    "tiny_mlp":    {"cpu": {"batch": 32, "width": 64, "depth": 24}, "cuda": {"batch": 32, "width": 64, "depth": 24}},
    "unet":        {"cpu": {"batch": 2, "image": 64, "base": 16}, "cuda": {"batch": 16, "image": 256, "base": 32}},
    "gpt_compiled": {"cpu": {"batch": 2, "seq": 64, "d": 128, "layers": 2, "vocab": 1024},
                     "cuda": {"batch": 16, "seq": 256, "d": 512, "layers": 6, "vocab": 8192}},
    "gnn":         {"cpu": {"nodes": 2000, "edges": 20000, "dim": 32, "layers": 3},
                    "cuda": {"nodes": 100_000, "edges": 1_000_000, "dim": 128, "layers": 3}},
}
DEFAULTS = {"cpu": ["mlp", "cnn", "transformer", "preprocess"],
            "cuda": ["resnet50", "gpt", "tiny_mlp", "unet", "gnn"]}


def train_step(model: nn.Module, loss_fn: Callable[[], torch.Tensor]) -> Step:
    """One forward/backward/SGD step of ``model`` with the loss ``loss_fn`` computes."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn().backward()
        opt.step()
    return step


def mlp(dev: str, batch: int, width: int, depth: int) -> Step:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10)).to(dev)
    x, y = torch.randn(batch, width, device=dev), torch.randint(0, 10, (batch,), device=dev)
    return train_step(model, lambda: F.cross_entropy(model(x), y))


tiny_mlp = mlp  # the launch-bound case: many layers of tiny matmuls


def cnn(dev: str, batch: int, image: int) -> Step:
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * (image // 4) ** 2, 10)).to(dev)
    x = torch.randn(batch, 3, image, image, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    return train_step(model, lambda: F.cross_entropy(model(x), y))


def transformer(dev: str, batch: int, seq: int, d: int, layers: int) -> Step:
    layer = nn.TransformerEncoderLayer(d, nhead=max(1, d // 64), dim_feedforward=4 * d,
                                       batch_first=True, dropout=0.0)
    model = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).to(dev)
    x = torch.randn(batch, seq, d, device=dev)
    return train_step(model, lambda: model(x).pow(2).mean())


def preprocess(dev: str, items: int, dim: int) -> Step:
    """Pure-Python record parsing and normalization mixed with small tensor ops."""
    rng = random.Random(0)
    records = [" ".join(f"{rng.random():.4f}" for _ in range(dim)) for _ in range(items)]
    weight = torch.randn(dim, dim, device=dev)

    def step() -> None:
        rows = []
        for line in records:
            values = [float(v) for v in line.split()]
            mean = sum(values) / len(values)
            rows.append([v - mean for v in values])
        batch = torch.tensor(rows, device=dev)
        for chunk in batch.split(20):  # small ops, one per chunk
            torch.tanh(chunk @ weight).sum()
    return step


class GPTBlock(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


def gpt(dev: str, batch: int, seq: int, d: int, layers: int, vocab: int) -> Step:
    model = nn.Sequential(nn.Embedding(vocab, d), *[GPTBlock(d, d // 64) for _ in range(layers)],
                          nn.LayerNorm(d), nn.Linear(d, vocab)).to(dev)
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=dev)
    inp, target = tokens[:, :-1], tokens[:, 1:]
    return train_step(model, lambda: F.cross_entropy(model(inp).flatten(0, 1), target.flatten()))


def gpt_compiled(dev: str, batch: int, seq: int, d: int, layers: int, vocab: int) -> Step:
    """``gpt`` under torch.compile (Inductor: C++ kernels on the CPU, Triton on the GPU); the
    warm-up steps pay the compile (docs/torch-compile.md)."""
    model = nn.Sequential(nn.Embedding(vocab, d), *[GPTBlock(d, d // 64) for _ in range(layers)],
                          nn.LayerNorm(d), nn.Linear(d, vocab)).to(dev)
    compiled = torch.compile(model)
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=dev)
    inp, target = tokens[:, :-1], tokens[:, 1:]
    return train_step(model, lambda: F.cross_entropy(compiled(inp).flatten(0, 1),
                                                     target.flatten()))


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.skip(x))


def resnet50_model(classes: int = 1000) -> nn.Module:
    """ResNet-50 (bottleneck blocks 3-4-6-3), written out so torchvision is not needed."""
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                               nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for i, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for j in range(blocks):
            layers.append(Bottleneck(cin, width, 2 if j == 0 and i > 0 else 1))
            cin = 4 * width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


def resnet50(dev: str, batch: int, image: int) -> Step:
    model = resnet50_model().to(dev)
    x = torch.randn(batch, 3, image, image, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    return train_step(model, lambda: F.cross_entropy(model(x), y))


def conv_block(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


class UNet(nn.Module):
    """A three-level U-Net: down with max-pool, up with transposed convs and skip concats."""

    def __init__(self, base: int) -> None:
        super().__init__()
        c = [base, 2 * base, 4 * base]
        self.down = nn.ModuleList([conv_block(3, c[0]), conv_block(c[0], c[1])])
        self.mid = conv_block(c[1], c[2])
        self.up = nn.ModuleList([nn.ConvTranspose2d(c[2], c[1], 2, 2), nn.ConvTranspose2d(c[1], c[0], 2, 2)])
        self.dec = nn.ModuleList([conv_block(2 * c[1], c[1]), conv_block(2 * c[0], c[0])])
        self.head = nn.Conv2d(c[0], 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.mid(x)
        for up, dec in zip(self.up, self.dec):
            x = dec(torch.cat([up(x), skips.pop()], dim=1))
        return self.head(x)


def unet(dev: str, batch: int, image: int, base: int) -> Step:
    model = UNet(base).to(dev)
    x = torch.randn(batch, 3, image, image, device=dev)
    mask = (torch.rand(batch, 1, image, image, device=dev) > 0.5).float()
    return train_step(model, lambda: F.binary_cross_entropy_with_logits(model(x), mask))


class GraphConv(nn.Module):
    """Mean-aggregation message passing with gather (index_select) and scatter (index_add_)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.msg, self.upd = nn.Linear(d, d), nn.Linear(2 * d, d)

    def forward(self, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, deg: torch.Tensor) -> torch.Tensor:
        messages = self.msg(h).index_select(0, src)
        agg = torch.zeros_like(h).index_add_(0, dst, messages) / deg
        return F.relu(self.upd(torch.cat([h, agg], dim=1)))


def gnn(dev: str, nodes: int, edges: int, dim: int, layers: int) -> Step:
    convs = nn.ModuleList([GraphConv(dim) for _ in range(layers)]).to(dev)
    head = nn.Linear(dim, 8).to(dev)
    model = nn.ModuleList([convs, head])
    src = torch.randint(0, nodes, (edges,), device=dev)
    dst = torch.randint(0, nodes, (edges,), device=dev)
    deg = torch.bincount(dst, minlength=nodes).clamp(min=1).unsqueeze(1).float()
    feats = torch.randn(nodes, dim, device=dev)
    labels = torch.randint(0, 8, (nodes,), device=dev)

    def loss() -> torch.Tensor:
        h = feats
        for conv in convs:
            h = conv(h, src, dst, deg)
        return F.cross_entropy(head(h), labels)
    return train_step(model, loss)


WORKLOADS: dict[str, Callable[..., Step]] = {
    "mlp": mlp, "cnn": cnn, "transformer": transformer, "preprocess": preprocess,
    "resnet50": resnet50, "gpt": gpt, "tiny_mlp": tiny_mlp, "unet": unet, "gnn": gnn,
    "gpt_compiled": gpt_compiled,
}


def build(name: str, device: str) -> Step:
    """The step function of workload ``name`` sized for ``device`` (``cpu`` or ``cuda``)."""
    torch.manual_seed(0)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return WORKLOADS[name](device, **SIZES[name][kind])
