"""Allocations made by Python code that runs inside an operator, none through an operator of
their own (torch.UntypedStorage allocates directly): the memory layer's exact-bytes test for
contexts the open operator alone does not give."""

import sys

import torch


@torch.library.custom_op("dc_test::python_kernel", mutates_args=())
def python_kernel(x: torch.Tensor) -> torch.Tensor:
    keep = torch.UntypedStorage(500)  # KERNEL: 500 bytes per call, inside [op] dc_test::python_kernel
    del keep
    return x.clone()


def scoped():
    # record_function's scope opens in its __enter__, a frame that has returned by the time the
    # body runs: allocations in the body go below the scope's operator, at the body's line.
    with torch.autograd.profiler.record_function("dc_test_scope"):  # WITH
        keep = torch.UntypedStorage(300)  # SCOPE: 300 bytes per call
        del keep


if __name__ == "__main__":
    x = torch.ones(4)
    for _ in range(3):
        python_kernel(x)  # CALL
        scoped()
    print("done")
