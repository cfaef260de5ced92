"""What a run is, as pure data: presets and the run configuration (``config``), what a precision
recipe is (``recipe``) and the registry of them all (``registry``), the labels a result records
(``precision``), FLOPs per token (``flops``). No I/O, no GPU probing: ``parallax.plan`` is where a
spec meets the machine."""
