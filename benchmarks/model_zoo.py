"""Third-party models for the overhead benchmark, built from configs (no downloads), trained the
way people train them on a GPU (bf16 autocast, channels_last for convnets, AdamW). Each builder
returns a ``step()`` that runs one training step (or one generation) and the number of steps that
make a block. Libraries are imported lazily: a model whose library is missing is skipped with a
reason (``MissingLibrary``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Step = Callable[[], None]


class MissingLibrary(RuntimeError):
    pass


def _need(module: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        raise MissingLibrary(f"{module} is not installed ({e})") from None


# Whether the training steps run under bf16 autocast (models.py --autocast): people do on a GPU
# and on a CPU with bf16 instructions; on one without them a bf16 matmul takes a slow path (~50x
# fp32's on an AVX2-only EPYC), which nobody would train with and which buries the step's
# operator work under a few slow kernels.
AUTOCAST = True


def _train(model: torch.nn.Module, loss_fn: Callable[[], torch.Tensor], dev: str,
           bf16: bool = True) -> Step:
    bf16 = bf16 and AUTOCAST
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dtype = torch.bfloat16 if bf16 else torch.float32
    kind = "cuda" if dev.startswith("cuda") else "cpu"

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(kind, dtype=dtype, enabled=bf16):
            loss = loss_fn()
        loss.backward()
        opt.step()
    return step


def gpt2_loss(dev: str, small: bool) -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
    """GPT-2 in training mode and its language-model loss on a fixed batch (phases.py times the
    step's phases around it)."""
    transformers = _need("transformers")
    cfg = transformers.GPT2Config(n_layer=2 if small else 12, n_embd=128 if small else 768,
                                  n_head=4 if small else 12, vocab_size=1024 if small else 50257)
    model = transformers.GPT2LMHeadModel(cfg).to(dev).train()
    batch, seq = (2, 64) if small else (8, 512)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
    return model, lambda: model(input_ids=ids, labels=ids).loss


def gpt2_train(dev: str, small: bool) -> Step:
    return _train(*gpt2_loss(dev, small), dev)


def bert_loss(dev: str, small: bool) -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
    """BERT for sequence classification in training mode and its loss on a fixed batch."""
    transformers = _need("transformers")
    cfg = (transformers.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=512, vocab_size=1024) if small
           else transformers.BertConfig())
    model = transformers.BertForSequenceClassification(cfg).to(dev).train()
    batch, seq = (4, 64) if small else (32, 128)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
    labels = torch.randint(0, 2, (batch,), device=dev)
    return model, lambda: model(input_ids=ids, labels=labels).loss


def bert_train(dev: str, small: bool) -> Step:
    return _train(*bert_loss(dev, small), dev)


def vit_train(dev: str, small: bool) -> Step:
    timm = _need("timm")
    name = "vit_tiny_patch16_224" if small else "vit_base_patch16_224"
    model = timm.create_model(name, pretrained=False, img_size=64 if small else 224).to(dev).train()
    x = torch.randn(2 if small else 64, 3, 64 if small else 224, 64 if small else 224, device=dev)
    y = torch.randint(0, 1000, (x.shape[0],), device=dev)
    return _train(model, lambda: F.cross_entropy(model(x), y), dev)


def resnet50_train(dev: str, small: bool) -> Step:
    tv = _need("torchvision")
    model = tv.models.resnet50().to(dev).to(memory_format=torch.channels_last).train()
    batch, image = (2, 64) if small else (64, 224)
    x = torch.randn(batch, 3, image, image, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)
    return _train(model, lambda: F.cross_entropy(model(x), y), dev)


def gcn_train(dev: str, small: bool) -> Step:
    pyg = _need("torch_geometric.nn")
    nodes, edges, dim, classes = (2_000, 20_000, 32, 8) if small else (50_000, 500_000, 128, 16)

    class GCN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.conv2 = pyg.GCNConv(dim, dim), pyg.GCNConv(dim, classes)

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)

    model = GCN().to(dev).train()
    x = torch.randn(nodes, dim, device=dev)
    edge_index = torch.randint(0, nodes, (2, edges), device=dev)
    y = torch.randint(0, classes, (nodes,), device=dev)
    return _train(model, lambda: F.cross_entropy(model(x, edge_index), y), dev, bf16=False)


def gpt2_generate(dev: str, small: bool) -> Step:
    transformers = _need("transformers")
    cfg = transformers.GPT2Config(n_layer=2 if small else 6, n_embd=128 if small else 768,
                                  n_head=4 if small else 12, vocab_size=1024 if small else 50257)
    model = transformers.GPT2LMHeadModel(cfg).to(dev).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, 16), device=dev)
    mask = torch.ones_like(prompt)

    def step() -> None:
        with torch.inference_mode():
            model.generate(prompt, attention_mask=mask, max_new_tokens=32, min_new_tokens=32,
                           do_sample=False, pad_token_id=0)
    return step


def gpt2_train_compiled(dev: str, small: bool) -> Step:
    """GPT-2 training with the model under ``torch.compile`` (inductor): the compiled source's
    contexts; compilation happens in the benchmark's warm-up steps, outside the timed blocks."""
    transformers = _need("transformers")
    cfg = transformers.GPT2Config(n_layer=2 if small else 12, n_embd=128 if small else 768,
                                  n_head=4 if small else 12, vocab_size=1024 if small else 50257)
    model = transformers.GPT2LMHeadModel(cfg).to(dev).train()
    compiled = torch.compile(model)
    batch, seq = (2, 64) if small else (8, 512)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
    return _train(model, lambda: compiled(input_ids=ids, labels=ids).loss, dev)


# name -> (builder, steps per block)
MODELS: dict[str, tuple[Callable[[str, bool], Step], int]] = {
    "gpt2_train": (gpt2_train, 10),
    "bert_train": (bert_train, 10),
    "vit_train": (vit_train, 10),
    "resnet50_train": (resnet50_train, 10),
    "gcn_train": (gcn_train, 10),
    "gpt2_generate": (gpt2_generate, 3),
    "gpt2_train_compiled": (gpt2_train_compiled, 10),
}
