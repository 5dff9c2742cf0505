"""The real-program suite of the analyzer (tests/integration/test_analyze_programs.py,
benchmarks/fix_gains.py --programs): third-party models built from configs and programs
written the way people write them. Each entry: program -> (rule expected at warning or above on
the program as written, the marker of its line, the finding's origin file or None), or None for
a well-written program, which must get nothing at warning or above. Programs with a fix take
``before``/``after``; ``after`` applies the finding's suggestion."""

SUITE = {
    # third-party models
    "gpt2_train": ("kernel-fusion", "FORWARD", "transformers/activations.py"),
    # LlamaRMSNorm's chain is a note (3% estimated); swapping in torch.nn.RMSNorm measured 0.97x
    "llama_train": None,
    # grad-mode inference: autograd-unused notes it (2 us per graph node: ~0.2% of this step on
    # the CPU, no warning); inference_mode made no measurable difference here
    "bert_inference": None,
    "vit_train": None,
    "gpt2_generate": None,
    "gcn_train": None,
    # the Trainer builds the DataLoader: the fix is TrainingArguments(dataloader_num_workers=2)
    # (fix_gains.py --programs hf_trainer --rounds 3: 1.13x-1.28x an epoch, on the
    # 2-core CPU VM; each train() starts its workers again, which the 768-example epoch amortizes)
    "hf_trainer": ("dataloader-main-process", "TRAIN", None),
    # programs of the user's own
    "per_sample_loss": ("cpu-latency", "LOOP", None),
    "silu_mlp": ("kernel-fusion", "ACT", None),
    "tensor_item_loop": ("cpu-latency", "ITEM", None),
    "cnn_train": None,
    "clone_snapshot": None,
}
