"""The JAX layer of the monitor (``--context ...,jax``, on by default): XLA thunks and kernels
under the JAX operators and source lines they came from, under the Python line that called the
jitted function. See docs/jax.md; ``layer.JaxLayer`` is the entry point."""

from .layer import JaxLayer

__all__ = ["JaxLayer"]
