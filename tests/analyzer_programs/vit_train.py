"""A Hugging Face ViT image classifier (built from a config) fine-tuned with fused AdamW: a
well-written program, nothing to fix."""
import torch
from _harness import run
from transformers import ViTConfig, ViTForImageClassification


def main() -> None:
    torch.manual_seed(0)
    config = ViTConfig(image_size=64, patch_size=8, num_channels=3, hidden_size=128,
                       num_hidden_layers=3, num_attention_heads=4, intermediate_size=256,
                       num_labels=10)
    model = ViTForImageClassification(config)  # SETUP
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    images, labels = torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,))

    def step():
        loss = model(pixel_values=images, labels=labels).loss  # STEP
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    run(step, steps=12)
    print("done")


if __name__ == "__main__":
    main()
