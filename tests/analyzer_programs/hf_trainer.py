"""A tiny BERT fine-tuned with Hugging Face's Trainer on a text dataset that tokenizes each
example when it is fetched (a word-level vocabulary, the way a quick experiment does it). The
Trainer builds the DataLoader, with the main process loading by default; the fix sets
TrainingArguments(dataloader_num_workers=...)."""
import random
import tempfile

import torch
from _harness import device, run, variant
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

WORDS = [f"w{i}" for i in range(2000)]
VOCAB = {w: i + 2 for i, w in enumerate(WORDS)}  # 0: padding, 1: unknown


class Reviews(torch.utils.data.Dataset):
    """Generated reviews: the text is built and tokenized on every fetch."""

    def __len__(self):
        return 768

    def __getitem__(self, i):
        rng = random.Random(i)
        text = " ".join(rng.choice(WORDS) for _ in range(3000)).lower()
        ids = [VOCAB.get(w, 1) for w in text.split()][:64]
        return {"input_ids": torch.tensor(ids), "labels": torch.tensor(i % 2)}


def main(fixed: bool) -> None:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB) + 2, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128, num_labels=2)
    model = BertForSequenceClassification(config)  # SETUP
    args = TrainingArguments(  # SETUP
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=16, num_train_epochs=1,
        save_strategy="no", logging_strategy="no", report_to=[], disable_tqdm=True,
        use_cpu=device() == "cpu", dataloader_num_workers=2 if fixed else 0,
        dataloader_persistent_workers=fixed)
    trainer = Trainer(model=model, args=args, train_dataset=Reviews())  # SETUP

    def step():
        trainer.train()  # TRAIN

    run(step, steps=2)
    print("done")


if __name__ == "__main__":
    main(variant() == "after")
