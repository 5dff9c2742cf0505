"""Hugging Face GPT-2 (built from a config, no download) trained with fused AdamW. GPT-2's
default activation, gelu_new, is tanh-GELU written as Python math in transformers; the fix
selects the same function as one operator: activation_function='gelu_pytorch_tanh'."""
import torch
from _harness import run, variant
from transformers import GPT2Config, GPT2LMHeadModel


def main(fixed: bool) -> None:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=256, n_head=4, n_positions=128, vocab_size=1000,
                        activation_function="gelu_pytorch_tanh" if fixed else "gelu_new",
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)  # SETUP
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, 1000, (8, 128))

    def step():
        loss = model(ids, labels=ids).loss  # FORWARD
        loss.backward()
        opt.step()
        opt.zero_grad()

    run(step, steps=12)
    print("done")


if __name__ == "__main__":
    main(variant() == "after")
