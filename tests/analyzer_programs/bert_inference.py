"""Hugging Face BERT (built from a config) classifying batches without torch.inference_mode:
every forward records an autograd graph that no backward uses. The fix wraps the loop in
torch.inference_mode()."""
import contextlib

import torch
from _harness import run, variant
from transformers import BertConfig, BertForSequenceClassification


def main(fixed: bool) -> None:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=4,
                        num_attention_heads=4, intermediate_size=512, num_labels=3)
    model = BertForSequenceClassification(config).eval()  # SETUP
    ids = torch.randint(0, 1000, (32, 64))
    mode = torch.inference_mode() if fixed else contextlib.nullcontext()

    def step():
        with mode:
            logits = model(input_ids=ids).logits  # FORWARD
        return logits.argmax(-1)

    run(step, steps=20)
    print("done")


if __name__ == "__main__":
    main(variant() == "after")
