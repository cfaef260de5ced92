"""The torch engine's precision recipes, one file per backend (its recipes' data and their
hooks): ``autocast.py`` (bf16),
``te.py`` (TransformerEngine), ``torchao.py`` (torchao float8); ``base.py`` defines the hooks
the engine calls and ``select.py`` turns a recipe into what a run uses. Importing this package
never imports torch."""
