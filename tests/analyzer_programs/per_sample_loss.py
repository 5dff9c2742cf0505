"""A classifier whose loss is computed one sample at a time: a Python loop over the batch's 256
rows, a few tiny operators on one row each. The fix vectorizes over the batch dimension."""
import torch
from _harness import run, variant


def margin_loss(scores, labels):
    total = torch.zeros(())
    for i in range(scores.shape[0]):
        row = scores[i]
        correct = row[labels[i]]
        total = total + torch.clamp(1.0 - correct + row, min=0.0).sum() - 1.0  # LOOP
    return total / scores.shape[0]


def margin_loss_vectorized(scores, labels):
    correct = scores.gather(1, labels[:, None])
    return (torch.clamp(1.0 - correct + scores, min=0.0).sum(1) - 1.0).mean()


def main(fixed: bool) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, fused=True)
    x, y = torch.randn(256, 32), torch.randint(0, 10, (256,))
    loss_fn = margin_loss_vectorized if fixed else margin_loss

    def step():
        loss = loss_fn(model(x), y)  # STEP
        loss.backward()
        opt.step()
        opt.zero_grad()

    # 48 steps: the vectorized variant's steady state (~1 ms a step) must span a few of the
    # sampler's 10 ms ticks, or a run whose ticks all miss it reads as op time alone
    run(step, steps=48)
    print("done")


if __name__ == "__main__":
    main(variant() == "after")
