"""`train --data tinystories-sample` and the summary's data row (issue 29, item 1)."""

from parallax.data.sample import NAME, UNLIMITED_EPOCHS, allowed_epochs
from parallax.run.progress import SYNTHETIC_NOTE, data_line


def test_sample_allows_repeats_only_when_epochs_left_out():
    assert allowed_epochs(NAME, None) == UNLIMITED_EPOCHS
    assert allowed_epochs(NAME, 2.0) == 2.0
    assert allowed_epochs("corpus.txt", None) is None


def test_synthetic_runs_are_named_in_the_summary():
    assert data_line({"synthetic": True}, {"synthetic": True}) == SYNTHETIC_NOTE


def test_real_data_row_gives_tokens_and_passes():
    cfg = {"synthetic": False, "data": NAME, "steps": 100, "batch_size": 8, "seq_len": 127}
    assert data_line({"synthetic": False, "train_tokens": 51_200}, cfg) == f"{NAME}: 51,200 tokens, 2.0 passes"
