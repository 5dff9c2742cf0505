"""A small Hugging Face Llama (built from a config) trained with fused AdamW. transformers'
LlamaRMSNorm is written as Python math (pow, mean, rsqrt, mul); the fix swaps each norm for
torch.nn.RMSNorm with the same weight and eps."""
import torch
from _harness import run, variant
from transformers import LlamaConfig, LlamaForCausalLM


def fuse_norms(model):
    """Replace every LlamaRMSNorm with torch.nn.RMSNorm (the same math, one operator)."""
    for name, module in list(model.named_modules()):
        if type(module).__name__ == "LlamaRMSNorm":
            fused = torch.nn.RMSNorm(module.weight.shape, eps=module.variance_epsilon)
            fused.weight = module.weight
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            setattr(parent, name.rsplit(".", 1)[-1], fused)


def main(fixed: bool) -> None:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=128)
    model = LlamaForCausalLM(config)  # SETUP
    if fixed:
        fuse_norms(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, 1000, (8, 128))

    def step():
        loss = model(input_ids=ids, labels=ids).loss  # FORWARD
        loss.backward()
        opt.step()
        opt.zero_grad()

    run(step, steps=12)
    print("done")


if __name__ == "__main__":
    main(variant() == "after")
