"""Parallax: benchmark low-precision LLM pre-training stacks (PyTorch and JAX) on NVIDIA GPUs."""

__version__ = "0.1.0"
