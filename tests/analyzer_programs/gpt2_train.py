"""Hugging Face GPT-2 (built from a config, no download) trained with fused AdamW. GPT-2's
default activation, gelu_new, is tanh-GELU written as Python math in transformers; the fix
selects the same function as one operator: activation_function='gelu_pytorch_tanh'."""
import torch
from _harness import device, run, variant
from transformers import GPT2Config, GPT2LMHeadModel


def main(fixed: bool) -> None:
    torch.manual_seed(0)
    gpu = device() == "cuda"  # GPU suite: a size that keeps the H200 busy
    if gpu:  # TF32 matmuls, as GPT-2 is trained on an H200: the GELU chain's share is then
        torch.set_float32_matmul_precision("high")  # well above the warning's 5%, not at it
    config = GPT2Config(n_layer=4 if gpu else 2, n_embd=1024 if gpu else 256, n_head=8,
                        n_positions=512, vocab_size=1000,
                        activation_function="gelu_pytorch_tanh" if fixed else "gelu_new",
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).to(device())  # SETUP
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, 1000, (16, 512) if gpu else (8, 128), device=device())

    def step():
        loss = model(ids, labels=ids).loss  # FORWARD
        loss.backward()
        opt.step()
        opt.zero_grad()

    run(step, steps=12)
    print("done")


if __name__ == "__main__":
    main(variant() == "after")
