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

# ``train --data tinystories-sample`` (what ``make run`` trains on): TRAIN tokenized once into the
# cache with VALID as its validation split. 400 stories are ~79,000 tokens, so a run longer than
# one pass repeats them: for this name alone ``--epochs`` left out allows as many passes as the
# run needs (the summary says how many).
NAME = "tinystories-sample"
UNLIMITED_EPOCHS = 1e9


def is_sample(data: str | None) -> bool:
    return data == NAME


def allowed_epochs(data: str | None, epochs: float | None) -> float | None:
    """The passes over the training tokens a run may make: ``epochs`` as given, or for the
    shipped sample with none given, as many as it needs."""
    if epochs is None and is_sample(data):
        return UNLIMITED_EPOCHS
    return epochs
