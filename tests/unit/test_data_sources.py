"""Corpus readers: separators, streaming across read blocks, long documents cut without
changing tokens, JSON Lines and Parquet fields, and every bad input as a clear error."""

from __future__ import annotations

import json

import pytest

from fixtures.samples import TRAIN, VALID, stories, unseparated

pytest.importorskip("tokenizers")

from parallax.data import sources  # noqa: E402
from parallax.data.sources import (  # noqa: E402
    JsonLinesFile, ParquetFile, Piece, TextFile, corpus_files, cut_safely, document_pieces,
)
from parallax.data.tokenizer import EOT  # noqa: E402
from parallax.errors import ParallaxError  # noqa: E402


def documents(pieces) -> list[str]:
    """Join pieces back into documents."""
    docs, current = [], ""
    for piece in pieces:
        current += piece.text
        if piece.ends_document:
            docs.append(current)
            current = ""
    assert current == "", "a piece stream must end with a document end"
    return docs


@pytest.fixture(scope="module")
def small_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = TRAIN.read_text().split(EOT)[:300]
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=2000, special_tokens=[EOT], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return tok


def test_eot_text_files_give_one_document_per_story():
    for path, count in ((TRAIN, 400), (VALID, 100)):
        source = TextFile(path)
        docs = documents(source.pieces())
        assert len(docs) == count  # SOURCE.md's story counts
        assert source.warnings == []
        assert source.bytes_read == path.stat().st_size
    first = documents(TextFile(TRAIN).pieces())[0]
    assert first.startswith("Once upon a time there was a little boy named Ben.")
    assert first == first.strip() and EOT not in first


def test_separators_split_across_read_blocks_are_found(tmp_path, monkeypatch):
    path = tmp_path / "stories.txt"
    path.write_text(f"  First story.\n{EOT}\nSecond, ünïcode 🐉 story.\n\n{EOT}\n\n{EOT}\nThird{EOT}")
    whole = documents(TextFile(path).pieces())
    assert whole == ["First story.", "Second, ünïcode 🐉 story.", "Third"]  # empty one skipped
    for block in (1, 3, 7, 13):  # separators and multi-byte characters cut by every block size
        monkeypatch.setattr(sources, "READ_BYTES", block)
        assert documents(TextFile(path).pieces()) == whole


def test_file_without_separators_is_split_at_blank_lines_with_a_warning(tmp_path, monkeypatch):
    path = unseparated(tmp_path / "v1_style.txt", stories(TRAIN) + stories(VALID))  # TinyStoriesV1's layout
    source = TextFile(path)
    whole = documents(source.pieces())
    assert len(whole) == 500 and whole == stories(TRAIN) + stories(VALID)
    assert len(source.warnings) == 1 and "no <|endoftext|> separators: its documents are its paragraphs" in source.warnings[0]
    tricky = tmp_path / "tricky.txt"  # blank lines of whitespace, cut by every read block
    tricky.write_text("\n\n  One, ünïcode 🐉.\nStill one.\n \t \nTwo.\n\n\n\nThree\n\n")
    assert documents(TextFile(tricky).pieces()) == ["One, ünïcode 🐉.\nStill one.", "Two.", "Three"]
    for block in (1, 3, 7, 13):
        monkeypatch.setattr(sources, "READ_BYTES", block)
        assert documents(TextFile(tricky).pieces()) == ["One, ünïcode 🐉.\nStill one.", "Two.", "Three"]


def test_a_long_paragraph_without_separators_is_one_document_in_pieces(monkeypatch, tmp_path):
    monkeypatch.setattr(sources, "PIECE_CHARS", 32 << 10)
    path = tmp_path / "one_paragraph.txt"  # the 400 stories' lines, no blank line anywhere
    path.write_text("\n".join(stories(TRAIN)) + "\n", encoding="utf-8")
    pieces = list(TextFile(path).pieces())
    assert len(pieces) == 19  # 330 KB in pieces of PIECE_CHARS (32 K) or fewer characters
    assert [p.ends_document for p in pieces].count(True) == 1 and pieces[-1].ends_document
    assert documents(pieces) == [path.read_text().strip()]


def test_cutting_long_documents_never_changes_their_tokens(small_tokenizer):
    tricky = "word  \n\nNext line\n \nA\n\n\n  B\n1 two\n\tC  \nD." * 40
    real = "\n\n".join(stories(VALID))[:60_000]  # stories one after another, as in TinyStoriesV1
    for text in (tricky, real):
        assembler = sources.DocumentAssembler(limit=97)  # tiny pieces: many cuts
        pieces = list(assembler.add(text)) + list(assembler.end())
        assert len(pieces) > 10
        ids = []
        for piece in pieces:
            ids += small_tokenizer.encode(piece.text, add_special_tokens=False).ids
        assert ids == small_tokenizer.encode(text.strip(), add_special_tokens=False).ids


def test_cut_safely_cuts_before_a_newline_that_precedes_a_letter_or_digit():
    assert cut_safely("aaaa \n\n  b\nc", limit=4) == ("aaaa \n\n  b", "\nc")
    assert cut_safely("aaaa \n\n  b", limit=4) == ("aaaa \n\n  b", "")  # no safe point: whole
    assert list(document_pieces("  \n ")) == []
    assert list(document_pieces(" x ")) == [Piece("x", True)]


def test_json_lines_read_the_text_field(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"text": " One. "}) + "\n\n" + json.dumps({"text": "Two", "id": 2}) + "\n")
    source = JsonLinesFile(path, "text")
    assert documents(source.pieces()) == ["One.", "Two"]
    assert source.bytes_read == path.stat().st_size
    with pytest.raises(ParallaxError, match=r"rows.jsonl:1: no 'story' field \(found: text\); name it with --text-field"):
        list(JsonLinesFile(path, "story").pieces())
    path.write_text('{"text": "ok"}\n{"text": broken\n')
    with pytest.raises(ParallaxError, match=r"rows.jsonl:2: not a JSON object"):
        list(JsonLinesFile(path, "text").pieces())
    path.write_text('{"text": 5}\n')
    with pytest.raises(ParallaxError, match=r"field 'text' is int, not text"):
        list(JsonLinesFile(path, "text").pieces())


def test_parquet_reads_the_text_column(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"text": ["Alpha story.", None, " Beta "], "n": [1, 2, 3]}), path)
    assert documents(ParquetFile(path, "text").pieces()) == ["Alpha story.", "Beta"]
    with pytest.raises(ParallaxError, match=r"no column 'story' \(columns: text, n\)"):
        list(ParquetFile(path, "story").pieces())
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(ParallaxError, match="not a Parquet file"):
        list(ParquetFile(bad, "text").pieces())


def test_bad_corpus_paths_are_clear_errors(tmp_path):
    with pytest.raises(ParallaxError, match="no corpus given"):
        corpus_files([])
    with pytest.raises(ParallaxError, match=r"corpus .*missing.txt: no such file or directory"):
        corpus_files([str(tmp_path / "missing.txt")])
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ParallaxError, match=r"empty.txt: empty file"):
        corpus_files([str(tmp_path / "empty.txt")])
    (tmp_path / "data.csv").write_text("a,b")
    with pytest.raises(ParallaxError, match=r"data.csv: unsupported file type"):
        corpus_files([str(tmp_path / "data.csv")])
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(ParallaxError, match="a directory without .txt, .jsonl or .parquet files"):
        corpus_files([str(folder)])
    (folder / "b.txt").write_text("b")
    (folder / "a.jsonl").write_text("{}")
    assert [p.name for p in corpus_files([str(folder)])] == ["a.jsonl", "b.txt"]


def test_non_utf8_text_is_named_with_its_offset(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("fine text\n".encode() + "caf\xe9".encode("latin-1"))
    with pytest.raises(ParallaxError, match=r"latin1.txt: not UTF-8 text \(bad byte at offset 13\)"):
        list(TextFile(path).pieces())
    path.write_bytes("caf\xe9 au lait".encode("latin-1"))  # the bad byte inside the first block
    with pytest.raises(ParallaxError, match=r"latin1.txt: not UTF-8 text \(bad byte at offset 3\)"):
        list(TextFile(path).pieces())
