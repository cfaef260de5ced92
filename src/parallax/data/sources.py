"""Corpus readers: documents of text from local files or a Hugging Face dataset, streamed.

Every reader yields ``Piece``s: text plus whether it ends a document. A document is one story;
``prepare`` writes ``<|endoftext|>`` after each. Documents are stripped of surrounding
whitespace and empty ones are skipped. A document longer than ``PIECE_CHARS`` is cut into
pieces only where byte-level pre-tokenization splits anyway (before a newline that precedes
an ASCII letter or digit), so its tokens are exactly those of the whole text.

Formats:
  .txt            documents separated by ``<|endoftext|>`` (TinyStoriesV2); a file without that
                  separator is split at blank lines (lines of nothing but whitespace) instead: its
                  documents are its paragraphs (TinyStoriesV1's text exports; a warning says so)
  .jsonl, .json   one JSON object per line with a text field
  .parquet        a column holding the text
  --hf NAME       ``datasets.load_dataset(NAME, split=..., streaming=True)`` rows, text field;
                  NAME may be a hub id (roneneldan/TinyStories) or a local directory of files
"""

from __future__ import annotations

import codecs
import json
import mmap
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from parallax.data.tokenizer import EOT
from parallax.errors import ParallaxError, require_module

TEXT_SUFFIXES = (".txt",)
JSONL_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIXES = (".parquet",)
SUFFIXES = TEXT_SUFFIXES + JSONL_SUFFIXES + PARQUET_SUFFIXES

PIECE_CHARS = 1 << 20  # documents longer than this are tokenized in pieces
READ_BYTES = 8 << 20
# A newline followed by an ASCII letter or digit is always a pre-token boundary of the
# byte-level (GPT-2) regex, and cutting before the newline keeps each side's pre-tokens.
_SAFE_CUT = re.compile(r"\n(?=[A-Za-z0-9])")
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")  # a line of nothing but whitespace between two texts


@dataclass(frozen=True)
class Piece:
    text: str
    ends_document: bool


def cut_safely(text: str, limit: int) -> tuple[str, str]:
    """Split ``text`` at a tokenization-neutral point at or after ``limit // 2`` characters:
    (head, rest); rest is empty when there is no such point."""
    match = _SAFE_CUT.search(text, limit // 2)
    if match is None:
        return text, ""
    return text[: match.start()], text[match.start():]


class DocumentAssembler:
    """Turns a stream of text fragments and document ends into stripped Pieces."""

    def __init__(self, limit: int | None = None):
        self.limit = limit or PIECE_CHARS
        self.buffer = ""
        self.started = False  # a piece of the current document went out already

    def add(self, text: str) -> Iterator[Piece]:
        self.buffer += text
        while len(self.buffer) > self.limit:
            head, rest = cut_safely(self.buffer, self.limit)
            if not rest:
                break  # no safe cut yet: keep reading
            if not self.started:
                head = head.lstrip()
            self.buffer = rest
            if head:
                self.started = True
                yield Piece(head, False)

    def end(self) -> Iterator[Piece]:
        text = self.buffer.rstrip() if self.started else self.buffer.strip()
        if text or self.started:
            yield Piece(text, True)
        self.buffer, self.started = "", False


def document_pieces(text: str) -> Iterator[Piece]:
    assembler = DocumentAssembler()
    yield from assembler.add(text)
    yield from assembler.end()


class Source:
    """One input: ``pieces()`` streams it; ``bytes_read`` and ``total_bytes`` drive progress."""

    name: str
    total_bytes: int | None = None
    bytes_read: int = 0
    warnings: list[str]

    def pieces(self) -> Iterator[Piece]:
        raise NotImplementedError


class TextFile(Source):
    """A .txt file: documents at ``<|endoftext|>`` when the file holds one, else at blank lines."""

    def __init__(self, path: Path):
        self.path, self.name = path, str(path)
        self.total_bytes = path.stat().st_size
        self.warnings = []

    def separated(self) -> bool:
        """Whether the file holds an ``<|endoftext|>`` (decided once, before reading documents)."""
        if self.path.stat().st_size == 0:
            return False
        with open(self.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return view.find(EOT.encode()) >= 0

    def pieces(self) -> Iterator[Piece]:
        self.bytes_read = 0
        separated = self.separated()
        split = re.compile(re.escape(EOT)) if separated else _BLANK_LINE
        decoder = codecs.getincrementaldecoder("utf-8")()
        assembler, pending = DocumentAssembler(), ""
        with open(self.path, "rb") as f:
            while True:
                raw = f.read(READ_BYTES)
                start = self.bytes_read - len(decoder.getstate()[0])  # file offset of the decoder's input
                try:
                    text = decoder.decode(raw, final=not raw)
                except UnicodeDecodeError as exc:
                    raise ParallaxError(
                        f"{self.path}: not UTF-8 text (bad byte at offset {start + exc.start:,})"
                    ) from None
                self.bytes_read += len(raw)
                *documents, pending = split.split(pending + text)
                for document in documents:
                    yield from assembler.add(document)
                    yield from assembler.end()
                keep = _open_tail(pending, separated)  # where a separator may begin that the next read ends
                if keep:
                    yield from assembler.add(pending[:keep])
                    pending = pending[keep:]
                if not raw:
                    break
        yield from assembler.add(pending)
        yield from assembler.end()
        if not separated:
            self.warnings.append(
                f"{self.path} has no {EOT} separators: its documents are its paragraphs (text between blank "
                "lines), as its stories cannot be told apart"
            )


def _open_tail(pending: str, separated: bool) -> int:
    """The offset in ``pending`` from which a separator may still be completed by more text."""
    if separated:
        return max(0, len(pending) - (len(EOT) - 1))
    newline = pending.rfind("\n")
    return len(pending) if newline < 0 else newline


def count_documents(sources: list[Source], limit: int) -> int:
    """The documents in ``sources``, counted up to ``limit`` (reading stops there)."""
    count = 0
    for source in sources:
        for piece in source.pieces():
            count += piece.ends_document
            if count >= limit:
                return count
    return count


class JsonLinesFile(Source):
    def __init__(self, path: Path, text_field: str):
        self.path, self.name, self.field = path, str(path), text_field
        self.total_bytes = path.stat().st_size
        self.warnings = []

    def pieces(self) -> Iterator[Piece]:
        self.bytes_read = 0
        with open(self.path, "rb") as f:
            for number, line in enumerate(f, start=1):
                self.bytes_read += len(line)
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise ParallaxError(f"{self.path}:{number}: not a JSON object ({exc})") from None
                yield from document_pieces(_field(row, self.field, f"{self.path}:{number}"))


class ParquetFile(Source):
    def __init__(self, path: Path, text_field: str):
        self.path, self.name, self.field = path, str(path), text_field
        self.warnings = []

    def pieces(self) -> Iterator[Piece]:
        pq = require_module("pyarrow.parquet", "data")
        self.bytes_read = 0
        try:
            table = pq.ParquetFile(self.path)
        except Exception as exc:  # pyarrow raises ArrowInvalid and friends
            raise ParallaxError(f"{self.path}: not a Parquet file ({exc})") from None
        if self.field not in table.schema_arrow.names:
            raise ParallaxError(
                f"{self.path}: no column '{self.field}' (columns: {', '.join(table.schema_arrow.names)}); "
                "name it with --text-field"
            )
        for batch in table.iter_batches(batch_size=4096, columns=[self.field]):
            for text in batch.column(0).to_pylist():
                text = text or ""
                self.bytes_read += len(text.encode())
                yield from document_pieces(text)


HUB_PROBE_S = 5.0  # one connection attempt, instead of the hub client's retries (about 25 s offline)


def check_hub_reachable(dataset: str) -> None:
    """One line, at once, when the Hugging Face hub cannot be reached (no network): unless
    HF_HUB_OFFLINE asks ``datasets`` to use its local cache."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_S).close()
    except OSError as exc:
        raise ParallaxError(f"cannot stream Hugging Face dataset {dataset}: the hub ({host}) cannot be reached "
                            f"({exc.strerror or exc}); check the network, set HF_HUB_OFFLINE=1 to use the local "
                            "cache, or prepare local files (parallax data prepare) and pass --data") from None


class HFDataset(Source):
    """A split of a Hugging Face dataset, streamed with ``datasets`` (hub id or local directory)."""

    def __init__(self, name: str, split: str, text_field: str):
        self.dataset, self.split, self.field = name, split, text_field
        self.name = f"{name} [{split}]"
        self.warnings = []

    def _open(self):
        datasets = require_module("datasets", "data")
        if not Path(self.dataset).is_dir():
            check_hub_reachable(self.dataset)
        try:
            stream = datasets.load_dataset(self.dataset, split=self.split, streaming=True)
        except ValueError as exc:  # an unknown split
            raise ParallaxError(f"Hugging Face dataset {self.dataset}: {exc}") from None
        except Exception as exc:  # no network, unknown dataset, bad files
            raise ParallaxError(
                f"cannot stream Hugging Face dataset {self.dataset} ({type(exc).__name__}: {exc}); "
                "check the name and the network, or prepare local files instead"
            ) from None
        info = getattr(stream, "info", None)
        split_info = (info.splits or {}).get(self.split) if info is not None and info.splits else None
        self.total_bytes = getattr(split_info, "num_bytes", None) or None
        return stream

    def pieces(self) -> Iterator[Piece]:
        stream = self._open()
        self.bytes_read = 0
        for number, row in enumerate(stream):
            text = _field(row, self.field, f"{self.name} row {number}")
            self.bytes_read += len(text.encode())
            yield from document_pieces(text)


def _field(row, field: str, where: str) -> str:
    if not isinstance(row, dict) or field not in row:
        keys = ", ".join(row) if isinstance(row, dict) else type(row).__name__
        raise ParallaxError(f"{where}: no '{field}' field (found: {keys}); name it with --text-field")
    value = row[field]
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ParallaxError(f"{where}: field '{field}' is {type(value).__name__}, not text")
    return value


def corpus_files(paths: list[str], what: str = "corpus") -> list[Path]:
    """The files behind ``paths`` (a directory stands for its supported files, sorted);
    ParallaxError for a missing path, an unsupported file or an empty corpus."""
    if not paths:
        raise ParallaxError(f"no {what} given: name one or more .txt, .jsonl or .parquet files")
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
            if not found:
                raise ParallaxError(f"{what} {path}: a directory without .txt, .jsonl or .parquet files")
            files.extend(found)
        elif path.is_file():
            if path.suffix.lower() not in SUFFIXES:
                raise ParallaxError(f"{what} {path}: unsupported file type; use .txt, .jsonl or .parquet")
            files.append(path)
        else:
            raise ParallaxError(f"{what} {path}: no such file or directory")
    empty = [str(f) for f in files if f.stat().st_size == 0]
    if empty:
        raise ParallaxError(f"{what} {empty[0]}: empty file (no text to tokenize)")
    return files


def file_source(path: Path, text_field: str) -> Source:
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return JsonLinesFile(path, text_field)
    if suffix in PARQUET_SUFFIXES:
        return ParquetFile(path, text_field)
    return TextFile(path)

