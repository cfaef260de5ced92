"""The small TinyStories sample shipped inside the package, so that tests and a first run have
real text without a download.

``TRAIN`` holds the first 400 stories of the TinyStoriesV2-GPT4 train text, ``VALID`` 100 other
stories; in both, stories are separated by a line ``<|endoftext|>``. TinyStories (Eldan and Li,
arXiv:2305.07759) is licensed under **CDLA-Sharing-1.0** (https://cdla.dev/sharing-1-0/): whoever
shares these files, or data derived from them, keeps them under that licence with the attribution
in ``SOURCE.md`` beside them, which also gives each file's origin, bytes, story count and sha256.
"""

from __future__ import annotations

from pathlib import Path

SAMPLE_DIR = Path(__file__).resolve().parent / "tinystories"
TRAIN = SAMPLE_DIR / "train.txt"
VALID = SAMPLE_DIR / "valid.txt"
SOURCE = SAMPLE_DIR / "SOURCE.md"
