"""The MaxText engine: Google's MaxText itself, run in a subprocess on a config Parallax writes.

Modules, one concept each: ``config`` (RunConfig -> MaxText keys and YAML, the key check
against an installed ``base.yml``), ``modes`` (the hooks of the ``maxtext`` recipes: the keys
of each quantization mode), ``data`` (our prepared tokens as files MaxText's Grain ``mmap_npy``
pipeline reads, in our batch order), ``metrics`` (MaxText's metrics file and log lines into our
step records), ``engine`` (``MaxTextEngine``: check, then the subprocess). Importing any of them
imports neither JAX nor MaxText.
"""
