"""Greedy generation with Hugging Face GPT-2 (built from a config): generate() already runs
under no_grad and reuses its key/value cache; nothing to fix."""
import torch
from _harness import run
from transformers import GPT2Config, GPT2LMHeadModel


def main() -> None:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=128, vocab_size=1000,
                        activation_function="gelu_pytorch_tanh", bos_token_id=0, eos_token_id=0,
                        pad_token_id=0)
    model = GPT2LMHeadModel(config).eval()  # SETUP
    prompt = torch.randint(1, 1000, (4, 16))

    def step():
        model.generate(prompt, max_new_tokens=24, do_sample=False, min_new_tokens=24)  # GEN

    run(step, steps=10)
    print("done")


if __name__ == "__main__":
    main()
