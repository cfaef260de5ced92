"""The Python face of the machine below Python: the native GPU probe and GEMM ceilings
(``gpu``, over ``parallax._native``), the GPUs' interconnect (``topology``), and the Linux death
signal that binds a child to its runner (``lifeline``)."""
