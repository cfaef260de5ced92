"""The PyTorch engine: the LLaMA module (``model.py``), the canonical-weight converter
(``convert.py``) and the training loop (``engine.py``).

Importing this package does not import torch; ``engine.TorchEngine.check`` names the missing
extra when torch is absent.
"""
