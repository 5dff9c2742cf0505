"""The memory layer on a GPU: a training step whose peak torch also measures, and the caching
allocator's segments, retries, OOM and churn at known lines.
    python memory_train.py train OUT.json | allocator OUT.json"""

import json
import sys

import torch

MiB = 1 << 20
IN, HIDDEN, BATCH, STEPS = 1024, 4096, 512, 5
PARAM_BYTES = 4 * (IN * HIDDEN + HIDDEN + HIDDEN * IN + IN)  # every size a multiple of 512
CHURN = 60


def train():
    torch.manual_seed(0)
    layers = [torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, IN)]
    model = torch.nn.Sequential(*layers).cuda()  # PARAMS
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(BATCH, IN, device="cuda")
    for _ in range(STEPS):
        loss = model(x).square().mean()  # FORWARD
        loss.backward()  # BACKWARD
        opt.step()  # STEP
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return {"max_allocated": torch.cuda.max_memory_allocated()}


def allocator():
    torch.cuda.init()
    for _ in range(CHURN):
        t = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")  # CHURN
        del t
        torch.cuda.empty_cache()  # EMPTY
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + 300 * MiB) / total)
    a = torch.empty(200 * MiB, dtype=torch.uint8, device="cuda")  # FILL
    del a  # its 200 MiB segment stays cached
    b = torch.empty(250 * MiB, dtype=torch.uint8, device="cuda")  # RETRY: frees the cache first
    del b
    try:
        torch.empty(400 * MiB, dtype=torch.uint8, device="cuda")  # OOM
    except torch.cuda.OutOfMemoryError:
        pass
    torch.cuda.set_per_process_memory_fraction(1.0)
    return {}


if __name__ == "__main__":
    result = {"train": train, "allocator": allocator}[sys.argv[1]]()
    s = torch.cuda.memory_stats()
    result.update({k: s[k] for k in ("num_device_alloc", "num_device_free", "num_alloc_retries",
                                     "num_ooms", "reserved_bytes.all.allocated",
                                     "reserved_bytes.all.freed")})
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)
    print("memory_train done")
