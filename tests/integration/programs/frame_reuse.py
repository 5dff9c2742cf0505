"""Operators called from Python paths whose frames share addresses: two callers of one size
calling one leaf (its frame at one address under each), recursion to changing depths, a
generator resumed from its caller, one frame's line moving, and code objects freed and compiled
again at the same address (exec in a loop). Each path's operator count is known exactly."""

import sys

import torch

x = torch.ones(2)  # ONES
ns = {"torch": torch}


def leaf(v):
    return torch.add(v, 1)  # LEAF


def g1(v):
    a = 1
    return leaf(v) if a else None  # G1


def g2(v):
    b = 2
    return leaf(v) if b else None  # G2


def deep(k, v):
    return deep(k - 1, v) if k else leaf(v)  # DEEP


def gen(v):
    for _ in range(2):
        yield torch.mul(v, 2)  # GEN


def main(n):
    for i in range(n):
        g1(x)  # CALL_G1
        g2(x)  # CALL_G2
        g1(x)  # CALL_G1_AGAIN
        deep(5 if i % 2 else 3, x)  # CALL_DEEP
        for _ in gen(x):  # CALL_GEN
            torch.neg(x)  # NEG1
        torch.neg(x)  # NEG2
        for j in range(3):
            ns.pop("step", None)  # the last step's code dies first: the next can take its place
            exec(compile(f"def step(v):\n    return torch.sub(v, {j})\n", f"<generated {j}>",
                         "exec"), ns)
            ns["step"](x)  # CALL_STEP
    print("ran", n)


if __name__ == "__main__":
    main(int(sys.argv[1]))  # MAIN
