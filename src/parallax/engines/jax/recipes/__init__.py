"""The JAX engine's precision recipes, one file per backend (its recipes' data and their hooks): ``flax_bf16.py``, ``flax_fp8.py``
(Flax's fp8 dot_generals, MaxText's numerics), ``te.py`` (TransformerEngine JAX); ``base.py``
defines the hooks the engine calls and ``select.py`` turns a recipe into what a run uses.
Importing this package never imports JAX."""
