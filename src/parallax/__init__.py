"""Parallax: benchmark low-precision LLM pre-training stacks (PyTorch and JAX) on NVIDIA GPUs."""

import time as _time

__version__ = "0.1.0"
# When the package was first imported (about when its process started): `train` records how long
# the setup before the first step took (imports, checks, data, environment) from here.
IMPORTED_AT = _time.monotonic()
