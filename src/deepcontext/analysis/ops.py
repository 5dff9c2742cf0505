"""Operator families the rules reason about, by ATen name (``aten::`` prefix dropped)."""

from __future__ import annotations

# Elementwise math: memory-bound, one read and one write per element; fusable into one kernel.
POINTWISE = frozenset("""
abs add addcdiv addcmul atan bitwise_and bitwise_not bitwise_or ceil clamp clamp_min clamp_max
cos cosh div elu eq erf erfc exp exp2 expm1 floor fmod ge gelu gt hardsigmoid hardswish hardtanh
le leaky_relu lerp log log10 log1p log2 logical_and logical_not logical_or logit lt masked_fill
maximum minimum mish mul ne neg pow reciprocal relu remainder round rsqrt rsub sigmoid sign silu
sin sinh softplus sqrt square sub tan tanh true_divide trunc where xlogy
""".split())

# In-place pointwise updates, the shape of an optimizer step written per parameter.
INPLACE_UPDATE = frozenset(f"{name}_" for name in (
    "add", "sub", "mul", "div", "addcmul", "addcdiv", "lerp", "sqrt", "clamp", "maximum", "neg",
    "copy", "zero", "fill"))

# Ops a Python loop over elements issues: indexing, scalar reads and writes, tiny tensor
# creation. Views (view, unsqueeze, transpose, detach...) are not among them: a forward pass
# issues thousands of those without any loop.
ELEMENT_ACCESS = frozenset("""
select index item _local_scalar_dense copy_ fill_ lift_fresh scalar_tensor tensor zeros ones full
setitem index_put_ _index_put_impl_
""".split())

# Picking one element or row of a tensor: what a loop over a dimension does every iteration.
INDEXING = frozenset({"select", "index", "slice", "unbind", "index_select"})

# Ops that force the host to wait for the device (on CUDA) before returning.
HOST_SYNC = frozenset({"item", "_local_scalar_dense", "nonzero", "masked_select",
                       "unique", "_unique2", "repeat_interleave", "equal", "is_nonzero"})

# Layout conversions that copy when the input is not already in the target layout.
LAYOUT_COPY = frozenset({"contiguous", "reshape", "clone", "_to_copy", "to"})
# Views that change strides (free themselves; a later contiguous copy pays for them).
LAYOUT_VIEW = frozenset({"transpose", "permute", "t", "movedim", "swapaxes", "mT", "numpy_T"})

# Scatter-style ops that deterministic mode (or their own implementation) serializes by sorting.
SCATTER = frozenset({"index_put_", "_index_put_impl_", "index_add_", "index_add", "scatter_add_",
                     "scatter_add", "scatter_reduce_", "scatter_reduce", "embedding_dense_backward",
                     "index_reduce_", "put_"})
SORT_BASED = frozenset({"sort", "argsort", "unique", "_unique2", "unique_dim", "unique_consecutive",
                        "_unique", "msort"})

# Matrix engines: matmul/conv ops whose fp32 form can use TF32 or bf16 tensor cores.
MATMUL_CONV = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "conv1d", "conv2d",
                         "conv3d", "convolution", "_convolution", "cudnn_convolution",
                         "addmv", "mv", "_scaled_dot_product_efficient_attention",
                         "_scaled_dot_product_flash_attention", "einsum"})


# Operators that are their own kernels between elementwise work: a matmul, convolution, norm,
# embedding or attention ends one chain and starts the next (reductions do not: a fused
# softmax or norm reduces inside its one kernel).
CHAIN_BREAKERS = MATMUL_CONV | frozenset({
    "batch_norm", "native_batch_norm", "_batch_norm_impl_index", "_native_batch_norm_legit",
    "layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "instance_norm",
    "embedding", "softmax", "_softmax", "log_softmax", "_log_softmax", "cross_entropy_loss",
    "nll_loss", "nll_loss_nd", "scaled_dot_product_attention", "max_pool2d",
    "adaptive_avg_pool2d", "avg_pool2d", "rms_norm", "_fused_rms_norm", "cat", "gather",
    "index_select", "scatter_add", "index_add"})


def backward_of(op_name: str) -> str:
    """The forward operator an autograd node's name belongs to, snake_case:
    ``autograd::engine::evaluate_function: MulBackward0`` -> ``mul``
    (``ClampMinBackward0`` -> ``clamp_min``); '' for other names."""
    tail = op_name.rsplit(" ", 1)[-1].rsplit("::", 1)[-1]
    if "Backward" not in tail:
        return ""
    camel = tail.split("Backward", 1)[0]
    out = "".join("_" + c.lower() if c.isupper() else c for c in camel).lstrip("_")
    return {"relu": "relu", "threshold": "relu", "rsub": "rsub"}.get(out, out)


def base_name(op_name: str) -> str:
    """``aten::add_`` -> ``add_``; other namespaces keep their full name."""
    return op_name.removeprefix("aten::")


def is_pointwise(op_name: str) -> bool:
    """An out-of-place or in-place elementwise ATen op."""
    if not op_name.startswith("aten::"):
        return False
    name = base_name(op_name)
    return name in POINTWISE or (name.endswith("_") and name[:-1] in POINTWISE)
