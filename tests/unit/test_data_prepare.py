"""`prepare`: token files, EOS placement, metadata, determinism, no-op re-runs, damaged or
mismatched files named, and every bad input as a clear error."""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fixtures.samples import TRAIN, VALID, stories, unseparated

pytest.importorskip("tokenizers")

from parallax.spec.config import DataConfig  # noqa: E402
from parallax.data.prepare import PreparedData, prepare  # noqa: E402
from parallax.data.tokenfile import file_sha256  # noqa: E402
from parallax.data.tokenizer import EOT  # noqa: E402
from parallax.errors import ParallaxError  # noqa: E402


def tokens_of(data: PreparedData, split: str) -> np.ndarray:
    return np.fromfile(data.path(split), dtype="<u2", offset=64)


@pytest.fixture
def copy_of(prepared, tmp_path) -> PreparedData:
    out = tmp_path / "copy"
    shutil.copytree(prepared.directory, out)
    return PreparedData(out, json.loads((out / "meta.json").read_text()))


@pytest.fixture(scope="module")
def given(prepared) -> DataConfig:
    """Options that reuse the trained tokenizer, so tests need not train another."""
    return DataConfig(tokenizer=str(prepared.tokenizer_path))


def test_documents_are_split_every_100th_to_validation_each_followed_by_eos(prepared):
    from tokenizers import Tokenizer

    meta = prepared.meta
    train, valid = meta["splits"]["train"], meta["splits"]["validation"]
    assert train["documents"] + valid["documents"] == 400 + 100
    assert valid["documents"] == 500 // 100
    # The tokenizers library alone (its BPE trained on the 495 training stories, each encoded
    # and followed by one token) gives these counts.
    assert (train["tokens"], valid["tokens"]) == (98_709, 1_055)
    train_tokens, valid_tokens = tokens_of(prepared, "train"), tokens_of(prepared, "validation")
    assert train_tokens.size == train["tokens"] and valid_tokens.size == valid["tokens"]
    assert int((train_tokens == 0).sum()) == train["documents"]  # one <|endoftext|> per story
    assert int((valid_tokens == 0).sum()) == valid["documents"]
    assert train_tokens[-1] == 0 and valid_tokens[-1] == 0
    tokenizer = Tokenizer.from_file(str(prepared.tokenizer_path))
    docs = stories(TRAIN) + stories(VALID)
    first_end = int(np.argmax(train_tokens == 0))
    assert tokenizer.decode(train_tokens[:first_end].tolist()) == docs[0]
    valid_end = int(np.argmax(valid_tokens == 0))
    assert tokenizer.decode(valid_tokens[:valid_end].tolist()) == docs[99]  # document 100 is held out
    assert tokenizer.decode(valid_tokens[valid_end + 1:-1].tolist()).startswith(docs[199][:50])


def test_header_and_metadata_describe_the_files(prepared):
    raw = prepared.path("train").read_bytes()
    magic, version, width, count, vocab, eos = struct.unpack("<8sIIQII", raw[:32])
    assert (magic, version, width, vocab, eos) == (b"PLXTOKNS", 1, 2, 10_000, 0)
    assert count == prepared.tokens("train") and len(raw) == 64 + 2 * count
    meta = prepared.meta
    assert meta["splits"]["train"]["sha256"] == file_sha256(prepared.path("train"))
    assert meta["tokenizer"]["sha256"] == file_sha256(prepared.tokenizer_path)
    assert meta["tokenizer"]["vocab_size"] == 10_000 and meta["tokenizer"]["origin"] == "trained"
    assert [f["sha256"] for f in meta["source"]["files"]] == [file_sha256(TRAIN), file_sha256(VALID)]
    assert meta["tokenization"]["input_bytes"] == TRAIN.stat().st_size + VALID.stat().st_size
    assert meta["tokenization"]["mb_per_s"] > 0
    # The tokenizers library alone, trained on the 495 training stories, makes 5,371 tokens.
    assert meta["warnings"] == [
        "the training text yields only 5,371 distinct BPE tokens; the vocabulary is filled up to 10,000 with "
        "4,629 reserved tokens that never occur (more text, e.g. several files or a directory, gives a full "
        "vocabulary)"]
    assert meta["tokenizer"]["reserved_tokens"] == 4_629


def test_rerun_is_a_no_op(prepared):
    before = {p.name: p.stat().st_mtime_ns for p in prepared.directory.iterdir()}
    result = prepare([str(TRAIN), str(VALID)], prepared.directory)
    assert result.up_to_date
    assert {p.name: p.stat().st_mtime_ns for p in prepared.directory.iterdir()} == before


def test_a_fresh_preparation_gives_identical_files(prepared, tmp_path):
    again = prepare([str(TRAIN), str(VALID)], tmp_path / "again").data
    for key in ("train", "validation"):
        assert again.meta["splits"][key]["sha256"] == prepared.meta["splits"][key]["sha256"]
    assert again.meta["tokenizer"]["sha256"] == prepared.meta["tokenizer"]["sha256"]
    assert again.meta["fingerprint"] == prepared.meta["fingerprint"]


def test_a_given_tokenizer_is_used_as_is(prepared, given, tmp_path):
    data = prepare([str(TRAIN), str(VALID)], tmp_path / "given", given).data
    assert data.meta["tokenizer"]["sha256"] == prepared.meta["tokenizer"]["sha256"]
    assert data.meta["splits"]["train"]["sha256"] == prepared.meta["splits"]["train"]["sha256"]
    with pytest.raises(ParallaxError, match=r"has 10,000 tokens but the model's vocabulary is 12,000"):
        prepare([str(TRAIN)], tmp_path / "wrong", replace(given, vocab_size=12_000))


def test_a_corrupt_byte_is_named(copy_of):
    path = copy_of.path("train")
    with open(path, "r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(ParallaxError, match=rf"token file {path}: corrupt .*re-run with --force"):
        prepare([str(TRAIN), str(VALID)], copy_of.directory)
    with pytest.raises(ParallaxError, match=rf"token file {path}: corrupt"):
        PreparedData.load(copy_of.directory)


def test_a_truncated_file_is_named(copy_of):
    path = copy_of.path("validation")
    os.truncate(path, path.stat().st_size - 2)
    with pytest.raises(ParallaxError, match=rf"token file {path}: truncated: the header promises"):
        PreparedData.load(copy_of.directory)
    path.unlink()
    with pytest.raises(ParallaxError, match=rf"token file {path}: missing"):
        PreparedData.load(copy_of.directory)


def test_a_swapped_tokenizer_or_broken_meta_is_named(copy_of):
    tokenizer = copy_of.tokenizer_path
    tokenizer.write_text(tokenizer.read_text().replace('"Once"', '"Twice"', 1))
    with pytest.raises(ParallaxError, match=rf"{tokenizer} does not match meta.json"):
        prepare([str(TRAIN), str(VALID)], copy_of.directory)
    (copy_of.directory / "meta.json").write_text("{ truncated")
    with pytest.raises(ParallaxError, match=r"meta.json: corrupt JSON"):
        PreparedData.load(copy_of.directory)


def test_other_inputs_into_a_prepared_directory_are_refused_unless_forced(copy_of, given):
    with pytest.raises(ParallaxError, match=r"holds tokens prepared from other inputs or settings \(corpus.train"):
        prepare([str(VALID), str(TRAIN)], copy_of.directory)
    forced = prepare([str(VALID), str(TRAIN)], copy_of.directory, given, force=True)
    assert not forced.up_to_date
    assert forced.data.meta["splits"]["train"]["documents"] + forced.data.meta["splits"]["validation"]["documents"] == 500


def test_a_validation_file_without_separators_is_split_at_blank_lines(given, tmp_path):
    v1_valid = unseparated(tmp_path / "v1_valid.txt", stories(VALID))  # TinyStoriesV1's layout
    data_result = prepare([str(TRAIN)], tmp_path / "out", replace(given, valid=(str(v1_valid),)))
    meta = data_result.data.meta
    assert meta["splits"]["train"]["documents"] == 400  # nothing held out
    assert meta["splits"]["validation"]["documents"] == 100  # one per blank-line-separated story
    assert len(data_result.warnings) == 1 and "v1_valid.txt has no <|endoftext|>" in data_result.warnings[0]


def test_a_training_file_without_separators_is_held_out_by_paragraph(given, tmp_path):
    """The issue's case: raw text without <|endoftext|> used to be one document, and the hold-out
    failed after the tokenizer had been trained. Paragraphs are now the documents."""
    raw = unseparated(tmp_path / "raw.txt", stories(TRAIN))
    meta = prepare([str(raw)], tmp_path / "out", given).data.meta
    assert (meta["splits"]["train"]["documents"], meta["splits"]["validation"]["documents"]) == (396, 4)
    # Stories whose lines are paragraphs apart (a whitespace-only line between them, as in
    # TinyStoriesV1): every non-empty line of the 400 stories is a document.
    lines = tmp_path / "lines.txt"
    lines.write_text("\n\n".join(s.replace("\n", "\n \t\n") for s in stories(TRAIN)), encoding="utf-8")
    meta = prepare([str(lines)], tmp_path / "lines", given).data.meta
    assert meta["splits"]["train"]["documents"] + meta["splits"]["validation"]["documents"] == 1_788
    assert meta["splits"]["validation"]["documents"] == 17


def test_too_few_documents_for_the_hold_out_fail_before_the_tokenizer(tmp_path, monkeypatch):
    import parallax.data.prepare as module

    def no_training(*args, **kwargs):
        raise AssertionError("the tokenizer was trained before the validation split was checked")

    monkeypatch.setattr(module, "train_tokenizer", no_training)
    one = tmp_path / "one.txt"
    one.write_text("Only one story here.\nIt has two lines but no blank one.\n")
    with pytest.raises(ParallaxError) as caught:
        prepare([str(one)], tmp_path / "a")
    assert str(caught.value) == (f"corpus {one}: 1 document, nothing to hold out for validation; pass --valid FILE, "
                                 "or separate documents by blank lines or <|endoftext|>")
    few = unseparated(tmp_path / "few.txt", stories(VALID)[:7])
    with pytest.raises(ParallaxError) as caught:
        prepare([str(few)], tmp_path / "b")
    assert str(caught.value) == (f"corpus {few}: 7 documents, too few to hold out every 100-th for validation; "
                                 "pass --valid FILE, or --valid-fraction 0.14 (every 7-th)")
    blank_valid = tmp_path / "blank_valid.txt"
    blank_valid.write_text(f" \n{EOT}\n")
    with pytest.raises(ParallaxError, match=r"blank_valid.txt: no text found; pass --valid files that hold text$"):
        prepare([str(TRAIN)], tmp_path / "c", DataConfig(valid=(str(blank_valid),)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blank_valid.txt", "few.txt", "one.txt"]  # no --out made


@pytest.mark.parametrize("stage", ["tokenize_corpus", "_split_entries"])
def test_a_failure_leaves_no_staging_folder_and_no_new_directory(given, stage, tmp_path, monkeypatch):
    import parallax.data.prepare as module

    def planted(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module, stage, planted)
    with pytest.raises(ParallaxError, match="the disk is full; free space there"):  # one line, not a traceback
        prepare([str(TRAIN)], tmp_path / "new", given)
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    with pytest.raises(ParallaxError, match="the disk is full"):
        prepare([str(TRAIN)], tmp_path / "kept", given)
    assert (tmp_path / "kept").is_dir() and list((tmp_path / "kept").iterdir()) == []


@pytest.mark.parametrize("code, need", [(28, "the disk is full; free space there or choose another folder"),
                                        (30, "the file system is read-only; choose a writable folder")])
@pytest.mark.parametrize("trained", [False, True], ids=["given", "trained"])
def test_a_tokenizer_the_disk_refuses_is_one_line(given, tmp_path, monkeypatch, code, need, trained):
    """The tokenizer, copied or trained, is written through store/files.py into the staging folder."""
    from parallax.store import files

    real = files._sync

    def sync(fd, path):
        if Path(path).name.startswith(".tokenizer.json."):
            raise OSError(code, os.strerror(code), path)
        real(fd, path)

    monkeypatch.setattr(files, "_sync", sync)
    options = DataConfig(vocab_size=300, tokenizer_sample_mb=0.05) if trained else given
    with pytest.raises(ParallaxError) as refused:
        prepare([str(TRAIN)], tmp_path / "new", options)
    assert str(refused.value) == f"cannot write {tmp_path / 'new' / '.staging' / 'tokenizer.json'} (from --out): {need}"
    assert list(tmp_path.iterdir()) == []


def test_empty_missing_or_unsplittable_corpora_are_clear_errors(given, tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_text(f"  \n{EOT}\n\n")
    with pytest.raises(ParallaxError, match=r"no text found \(empty corpus\)"):
        prepare([str(blank)], tmp_path / "a", given)
    with pytest.raises(ParallaxError, match=r"no text found \(empty corpus\)"):
        prepare([str(blank)], tmp_path / "b")  # while training a tokenizer
    with pytest.raises(ParallaxError, match=r"no such file or directory"):
        prepare([str(tmp_path / "nope.txt")], tmp_path / "c", given)
    one = tmp_path / "one.txt"
    one.write_text("Only one story here.")
    with pytest.raises(ParallaxError, match=r"1 document, nothing to hold out for validation; pass --valid FILE"):
        prepare([str(one)], tmp_path / "d", given)
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "notes.md").write_text("mine")
    with pytest.raises(ParallaxError, match=r"holds other files \(notes.md\); choose an empty directory"):
        prepare([str(TRAIN)], tmp_path / "e", given)
    with pytest.raises(ParallaxError, match=r"--valid-fraction must be in \(0, 0.5\]"):
        prepare([str(TRAIN)], tmp_path / "f", replace(given, valid_fraction=0.9))


def test_hf_streaming_of_a_local_dataset_equals_the_same_files(given, tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    docs = stories(TRAIN) + stories(VALID)
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    for name, rows in (("train", docs[:400]), ("validation", docs[400:450])):
        with open(dataset / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(rows))
    streamed = prepare([str(dataset)], tmp_path / "hf", replace(given, hf=True)).data
    local = prepare([str(dataset / "train.jsonl")], tmp_path / "local",
                    replace(given, valid=(str(dataset / "validation.jsonl"),))).data
    assert streamed.meta["source"]["kind"] == "hf"
    for split, documents in (("train", 400), ("validation", 50)):
        assert streamed.meta["splits"][split]["documents"] == documents
        assert streamed.meta["splits"][split]["sha256"] == local.meta["splits"][split]["sha256"]
    assert prepare([str(dataset)], tmp_path / "hf", replace(given, hf=True)).up_to_date
    with pytest.raises(ParallaxError, match=r"Hugging Face dataset .*dataset: .*test"):
        prepare([str(dataset)], tmp_path / "hf2", replace(given, hf=True, hf_valid_split="test"))
    (dataset / "validation.jsonl").write_text(json.dumps({"text": " "}) + "\n")  # a split without text
    with pytest.raises(ParallaxError) as caught:
        prepare([str(dataset)], tmp_path / "hf3", replace(given, hf=True))
    assert str(caught.value) == (f"no validation text: {dataset} [validation] holds none; prepare another split with "
                                 f"`parallax data prepare --hf {dataset} --hf-valid-split SPLIT`")
    assert not (tmp_path / "hf3").exists()
