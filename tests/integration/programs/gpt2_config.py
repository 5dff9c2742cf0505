"""A Hugging Face GPT-2 built from a config (no download): two forward+backward steps."""

import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=16,
                    bos_token_id=0, eos_token_id=0, loss_type="ForCausalLM")
model = GPT2LMHeadModel(config)
ids = torch.randint(0, 64, (1, 8))
steps = int(sys.argv[1])
for _ in range(steps):
    out = model(input_ids=ids, labels=ids)  # FORWARD
    out.loss.backward()  # BACKWARD
print(f"done {steps}")
