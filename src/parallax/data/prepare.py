"""``parallax data prepare``: a corpus -> tokenizer.json + uint16 token files + meta.json.

A prepared directory holds:
  tokenizer.json   the byte-level BPE (trained here, or the one given)
  train.bin        training tokens, validation.bin validation tokens (layout: tokenfile.py);
                   each document is followed by one <|endoftext|>
  meta.json        what went in (inputs, settings: ``fingerprint``), what came out (token and
                   document counts, SHA-256 of every file) and how fast tokenization ran

Preparing again with the same inputs and settings checks the files and does nothing else.
A file that does not match meta.json is named; ``force`` rebuilds. meta.json is written last,
so a directory without it was never finished.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from parallax import __version__
from parallax.spec.config import DataConfig
from parallax.data.sources import HFDataset, Piece, Source, corpus_files, count_documents, file_source
from parallax.data.tokenfile import TokenWriter, file_sha256, verify_token_file
from parallax.data.tokenizer import (EOT, check_tokenizer, eos_id, load_tokenizer, reserved_tokens,
                                     train_tokenizer)
from parallax.store.timestamps import utc_now
from parallax.store import files
from parallax.errors import ParallaxError, require_module

FORMAT = "parallax.tokens/1"
META_FILE = "meta.json"
TOKENIZER_FILE = "tokenizer.json"
SPLIT_FILES = {"train": "train.bin", "validation": "validation.bin"}
STAGING = ".staging"
OURS = {META_FILE, TOKENIZER_FILE, STAGING, *SPLIT_FILES.values()}
BATCH_CHARS = 4 << 20  # text handed to the tokenizer's thread pool per call

Log = Callable[[str], None]


# ----------------------------------------------------------------------------- the result


@dataclass
class PreparedData:
    """A finished prepared directory and its meta.json."""

    directory: Path
    meta: dict

    @property
    def vocab_size(self) -> int:
        return self.meta["tokenizer"]["vocab_size"]

    @property
    def eos_id(self) -> int:
        return self.meta["tokenizer"]["eos_id"]

    def path(self, split: str) -> Path:
        return self.directory / self.meta["splits"][split]["file"]

    def tokens(self, split: str) -> int:
        return self.meta["splits"][split]["tokens"]

    @property
    def tokenizer_path(self) -> Path:
        return self.directory / self.meta["tokenizer"]["file"]

    def problem(self, checksum: bool = True) -> str | None:
        """None when every file matches meta.json, else a sentence naming the first that does not."""
        tokenizer = self.tokenizer_path
        if not tokenizer.is_file():
            return f"{tokenizer} is missing"
        if checksum and file_sha256(tokenizer) != self.meta["tokenizer"]["sha256"]:
            return f"{tokenizer} does not match meta.json (another tokenizer, or a damaged file)"
        for split, entry in self.meta["splits"].items():
            problem = verify_token_file(self.path(split), entry, self.vocab_size, self.eos_id, checksum)
            if problem:
                return problem
        return None

    @classmethod
    def load(cls, directory: str | Path, checksum: bool = True) -> "PreparedData":
        """A prepared directory, every file checked against meta.json (ParallaxError naming it)."""
        directory = Path(directory)
        meta = read_meta(directory)
        if meta is None:
            raise ParallaxError(f"{directory}: no {META_FILE}; prepare it with `parallax data prepare`")
        data = cls(directory, meta)
        problem = data.problem(checksum)
        if problem:
            raise ParallaxError(f"{problem}; re-run `parallax data prepare --force` to rebuild {directory}")
        return data


def read_meta(directory: Path) -> dict | None:
    path = Path(directory) / META_FILE
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ParallaxError(f"{path}: corrupt JSON; re-run `parallax data prepare --force`") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise ParallaxError(f"{path}: format {found!r} is not {FORMAT!r}; re-run `parallax data prepare --force`")
    return meta


@dataclass
class PrepareResult:
    data: PreparedData
    up_to_date: bool  # nothing was done: the directory already held these inputs
    warnings: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- inputs


@dataclass
class Corpus:
    """What goes into each split, and the identity of the inputs (for the fingerprint)."""

    train: list[Source]
    valid: list[Source]
    holdout_every: int | None  # validation = every n-th training document (when no valid sources)
    identity: dict


def _file_identity(path: Path, previous: dict[str, dict]) -> dict:
    """Size and SHA-256 of an input; the hash is reused when path, size and mtime are unchanged."""
    stat = path.stat()
    entry = {"path": str(path.resolve()), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    old = previous.get(entry["path"])
    if old and old.get("bytes") == entry["bytes"] and old.get("mtime_ns") == entry["mtime_ns"]:
        entry["sha256"] = old["sha256"]
    else:
        entry["sha256"] = file_sha256(path)
    return entry


def _content(entries: list[dict]) -> list[dict]:
    """What identifies inputs: content and order, not where they lie or when they were touched."""
    return [{"name": Path(e["path"]).name, "bytes": e["bytes"], "sha256": e["sha256"]} for e in entries]


def plan_corpus(inputs: list[str], options: DataConfig, previous: dict | None,
                hold_out: bool = True) -> tuple[Corpus, dict]:
    """(corpus, source description for meta.json). ``hold_out`` False (``train --data`` without
    evaluation): no validation documents are held out of the training files."""
    known = {e["path"]: e for e in (previous or {}).get("source", {}).get("files", [])}
    if options.hf:
        name = inputs[0] if inputs else options.hf_dataset
        if len(inputs) > 1:
            raise ParallaxError("--hf takes one dataset name (or local directory)")
        hf = {"dataset": name, "train_split": options.hf_train_split, "valid_split": options.hf_valid_split,
              "text_field": options.text_field}
        files = [_file_identity(p, known) for p in corpus_files([name])] if Path(name).is_dir() else []
        train = [HFDataset(name, options.hf_train_split, options.text_field)]
        valid = [HFDataset(name, options.hf_valid_split, options.text_field)]
        identity = {"hf": hf, "local_files": _content(files)}
        return Corpus(train, valid, None, identity), {"kind": "hf", **hf, "files": files}
    train_files = corpus_files(inputs)
    valid_files = corpus_files(list(options.valid), "validation corpus") if options.valid else []
    train_entries = [_file_identity(p, known) for p in train_files]
    valid_entries = [_file_identity(p, known) for p in valid_files]
    train = [file_source(p, options.text_field) for p in train_files]
    valid = [file_source(p, options.text_field) for p in valid_files]
    holdout = None if valid or not hold_out else max(1, round(1 / options.valid_fraction))
    identity = {"train": _content(train_entries), "valid": _content(valid_entries), "holdout_every": holdout,
                "text_field": options.text_field}
    source = {"kind": "files", "files": train_entries + valid_entries,
              "train": [e["path"] for e in train_entries], "valid": [e["path"] for e in valid_entries],
              "holdout_every": holdout}
    return Corpus(train, valid, holdout, identity), source


def fingerprint_of(corpus: Corpus, options: DataConfig) -> tuple[dict, str]:
    if options.tokenizer:
        path = Path(options.tokenizer)
        if not path.is_file():
            raise ParallaxError(f"--tokenizer {path}: no such file")
        tokenizer = {"given_sha256": file_sha256(path)}
    else:
        tokenizer = {"trained": "byte-level BPE", "sample_mb": options.tokenizer_sample_mb}
    inputs = {"format": FORMAT, "vocab_size": options.vocab_size, "corpus": corpus.identity, "tokenizer": tokenizer}
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return inputs, digest


# ----------------------------------------------------------------------------- tokenization


def _train_pieces(corpus: Corpus) -> Iterator[tuple[Source, bool, Piece]]:
    """(source, goes to validation, piece) for every training source, in order."""
    document = 0
    for source in corpus.train:
        for piece in source.pieces():
            held_out = corpus.holdout_every is not None and document % corpus.holdout_every == corpus.holdout_every - 1
            yield source, held_out, piece
            document += piece.ends_document


def _routed(corpus: Corpus) -> Iterator[tuple[Source, int, Piece]]:
    """(source, split index 0 train / 1 validation, piece) over all inputs."""
    for source, held_out, piece in _train_pieces(corpus):
        yield source, int(held_out), piece
    for source in corpus.valid:
        for piece in source.pieces():
            yield source, 1, piece


class _TokenizerTexts:
    """The leading training text (validation documents left out), up to ``limit_bytes``."""

    def __init__(self, corpus: Corpus, limit_bytes: int):
        self.corpus, self.limit, self.seen = corpus, limit_bytes, 0

    def __iter__(self) -> Iterator[str]:
        for _, held_out, piece in _train_pieces(self.corpus):
            if held_out or not piece.text:
                continue
            yield piece.text
            self.seen += len(piece.text.encode())
            if self.seen >= self.limit:
                return


class _Encoder:
    """Encodes batches of pieces on the tokenizer's own thread pool (Rust, GIL released) while
    the caller reads the next batch; results come back in order."""

    def __init__(self, tokenizer, eos: int):
        self.tokenizer, self.eos = tokenizer, eos

    def __call__(self, batch: list[tuple[int, Piece]]) -> tuple[list[np.ndarray], list[int]]:
        encodings = self.tokenizer.encode_batch_fast([p.text for _, p in batch], add_special_tokens=False)
        ids: tuple[list, list] = ([], [])
        documents = [0, 0]
        for (split, piece), encoding in zip(batch, encodings):
            ids[split].append(encoding.ids)
            if piece.ends_document:
                ids[split].append((self.eos,))
                documents[split] += 1
        arrays = [np.fromiter(chain.from_iterable(lists), dtype=np.uint16) for lists in ids]
        return arrays, documents


def _batches(routed: Iterator[tuple[Source, int, Piece]], on_read: Callable[[], None]):
    batch: list[tuple[int, Piece]] = []
    chars = 0
    for _, split, piece in routed:
        batch.append((split, piece))
        chars += len(piece.text)
        if chars >= BATCH_CHARS or len(batch) >= 65536:
            on_read()
            yield batch
            batch, chars = [], 0
    on_read()
    if batch:
        yield batch


def tokenize_corpus(corpus: Corpus, tokenizer, writers: list[TokenWriter], progress) -> None:
    encode = _Encoder(tokenizer, eos_id(tokenizer))

    def write(result):
        arrays, documents = result
        for writer, array, count in zip(writers, arrays, documents):
            writer.write(array)
            writer.documents += count

    sources = corpus.train + corpus.valid
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = None
        for batch in _batches(_routed(corpus), lambda: progress.read(sum(s.bytes_read for s in sources))):
            future = pool.submit(encode, batch)
            if pending is not None:
                write(pending.result())
            pending = future
        if pending is not None:
            write(pending.result())


class _Progress:
    """A rich progress bar of input bytes with MB/s on stderr, or nothing."""

    def __init__(self, show: bool, total: int | None):
        self.bar = None
        if show:
            from rich.console import Console
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)

            self.bar = Progress(TextColumn("tokenizing"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                TimeRemainingColumn(), console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task("tokenizing", total=total)

    def __enter__(self):
        if self.bar:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.__exit__(*exc)

    def read(self, done: int) -> None:
        if self.bar:
            self.bar.update(self.task, completed=done)


# ----------------------------------------------------------------------------- prepare


def _threads() -> int:
    return int(os.environ.get("RAYON_NUM_THREADS") or os.environ.get("RAYON_RS_NUM_CPUS") or os.cpu_count() or 1)


def _check_out_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ParallaxError(f"--out {out}: exists and is not a directory")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in OURS)
        if foreign and not (out / META_FILE).exists():
            raise ParallaxError(f"--out {out}: holds other files ({', '.join(foreign[:3])}); choose an empty directory")


def _difference(old: dict, new: dict) -> str:
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    inner = []
    for key in keys:
        if isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
            inner += [f"{key}.{k}" for k in sorted(set(old[key]) | set(new[key])) if old[key].get(k) != new[key].get(k)]
        else:
            inner.append(key)
    return ", ".join(inner) or "settings"


def _up_to_date(out: Path, inputs: dict, digest: str, force: bool, rebuild_stale: bool, log: Log) -> PreparedData | None:
    """The existing data when it is these inputs' and intact; None to (re)build; else an error."""
    meta = None if force else read_meta(out)
    if meta is None:
        return None
    if meta.get("fingerprint") != digest:
        what = _difference(meta.get("inputs", {}), inputs)
        if rebuild_stale:
            log(f"{out}: prepared from other inputs ({what} changed); rebuilding")
            return None
        raise ParallaxError(
            f"--out {out} holds tokens prepared from other inputs or settings ({what} differ); "
            "choose another --out, or pass --force to replace them"
        )
    data = PreparedData(out, meta)
    problem = data.problem()
    if problem is None:
        return data
    if rebuild_stale:
        log(f"{problem}; rebuilding {out}")
        return None
    raise ParallaxError(f"{problem}; re-run with --force to rebuild {out}")


def _get_tokenizer(corpus: Corpus, options: DataConfig, staging: Path, log: Log) -> tuple[object, dict]:
    if options.tokenizer:
        tokenizer = load_tokenizer(options.tokenizer, options.vocab_size)
        files.write_bytes(staging / TOKENIZER_FILE, Path(options.tokenizer).read_bytes(), "--out")
        return tokenizer, {"origin": str(Path(options.tokenizer).resolve())}
    limit = int(options.tokenizer_sample_mb * 1e6)
    log(f"training a {options.vocab_size:,}-token byte-level BPE on up to {options.tokenizer_sample_mb:g} MB of training text")
    start = time.perf_counter()
    texts = _TokenizerTexts(corpus, limit)
    tokenizer = train_tokenizer(_non_empty(texts, corpus), options.vocab_size, pad=True)
    check_tokenizer(tokenizer, options.vocab_size, "the trained tokenizer")
    files.write_text(staging / TOKENIZER_FILE, tokenizer.to_str(pretty=True), "--out")  # what its save() writes
    return tokenizer, {"origin": "trained", "sample_mb": options.tokenizer_sample_mb,
                       "reserved_tokens": reserved_tokens(tokenizer),
                       "train_seconds": round(time.perf_counter() - start, 3)}


def prepare(inputs: list[str], out: str | Path, options: DataConfig = DataConfig(), *, force: bool = False,
            rebuild_stale: bool = False, show_progress: bool = False, log: Log | None = None,
            hold_out: bool = True) -> PrepareResult:
    """Prepare ``inputs`` (files, directories, or with ``options.hf`` one dataset name) into ``out``.

    ``rebuild_stale`` (the on-the-fly cache of ``train --data``): rebuild instead of failing
    when ``out`` holds other inputs or a damaged file. ``hold_out`` False: no validation split
    (``train --data`` without evaluation). On any failure nothing of this attempt is left: no
    staging folder, and no ``out`` (nor folder above it) where there was none."""
    log = log or (lambda message: None)
    options = options.validate()
    out = Path(out)
    _check_out_dir(out)
    corpus, source = plan_corpus(list(inputs), options, None if force else _quiet_meta(out), hold_out)
    inputs_identity, digest = fingerprint_of(corpus, options)
    existing = _up_to_date(out, inputs_identity, digest, force, rebuild_stale, log)
    if existing is not None:
        return PrepareResult(existing, up_to_date=True)
    check_validation_possible(corpus)  # before the tokenizer's minutes, not after

    made = [p for p in (out, *out.parents) if not p.exists()]  # deepest first
    staging = out / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    try:
        files.make_folder(staging, "--out")
        return _build(out, staging, corpus, source, options, inputs_identity, digest, list(inputs), show_progress, log)
    except BaseException as exc:  # a refusal, a full disk, Ctrl-C or SIGTERM (parallax.run.interrupt)
        shutil.rmtree(staging, ignore_errors=True)
        for folder in made:
            with contextlib.suppress(OSError):  # not empty: leave it
                folder.rmdir()
        if isinstance(exc, OSError) and exc.errno in files.WRITE_ERRNOS:
            raise files.refusal(exc.filename or out, exc, "--out") from None
        raise


def check_validation_possible(corpus: Corpus) -> None:
    """ParallaxError, before any tokenizer is trained, when the validation split would be
    empty: validation files without a document, or fewer training documents than the hold-out
    takes one of. (A streamed dataset is not read twice: its splits are checked after.)"""
    if any(isinstance(s, HFDataset) for s in corpus.train + corpus.valid):
        return
    names = ", ".join(s.name for s in corpus.valid or corpus.train)
    if corpus.valid:
        if count_documents(corpus.valid, 1) == 0:
            raise ParallaxError(f"validation corpus {names}: no text found; pass --valid files that hold text")
        return
    every = corpus.holdout_every
    if every is None:
        return
    documents = count_documents(corpus.train, every)
    if documents >= every:
        return
    if documents == 0:
        raise ParallaxError(f"corpus {names}: no text found (empty corpus)")
    if documents == 1:
        raise ParallaxError(
            f"corpus {names}: 1 document, nothing to hold out for validation; "
            f"pass --valid FILE, or separate documents by blank lines or {EOT}")
    raise ParallaxError(
        f"corpus {names}: {documents} documents, too few to hold out every {every}-th for validation; "
        f"pass --valid FILE, or --valid-fraction {_fraction_for(documents)} (every {documents}-th)")


def _fraction_for(every: int) -> str:
    """The shortest --valid-fraction F written with round(1/F) == every."""
    for digits in range(2, 10):
        text = f"{1 / every:.{digits}g}"
        if round(1 / float(text)) == every:
            return text
    return repr(1 / every)


def _build(out: Path, staging: Path, corpus: Corpus, source: dict, options: DataConfig, inputs_identity: dict,
           digest: str, inputs: list[str], show_progress: bool, log: Log) -> PrepareResult:
    """Tokenize into ``staging``, move the files into ``out`` and write meta.json last."""
    (out / META_FILE).unlink(missing_ok=True)  # the directory is unfinished from here on
    tokenizer, tokenizer_origin = _get_tokenizer(corpus, options, staging, log)
    eos = eos_id(tokenizer)
    writers, seconds = _tokenize_into(staging, corpus, tokenizer, options.vocab_size, eos, show_progress)
    input_bytes = sum(s.bytes_read for s in corpus.train + corpus.valid)
    warnings = sorted({w for s in corpus.train + corpus.valid for w in s.warnings})
    reserved = tokenizer_origin.get("reserved_tokens", 0)
    if reserved:
        warnings.append(
            f"the training text yields only {options.vocab_size - reserved:,} distinct BPE tokens; the vocabulary is "
            f"filled up to {options.vocab_size:,} with {reserved:,} reserved tokens that never occur "
            "(more text, e.g. several files or a directory, gives a full vocabulary)")
    _check_splits(writers, corpus, inputs)

    meta = {
        "format": FORMAT,
        "created_by": f"parallax {__version__}",
        "created_at": utc_now(),
        "fingerprint": digest,
        "inputs": inputs_identity,
        "source": source,
        "tokenizer": {"file": TOKENIZER_FILE, "sha256": file_sha256(staging / TOKENIZER_FILE),
                      "vocab_size": options.vocab_size, "eos_token": EOT, "eos_id": eos, **tokenizer_origin},
        "splits": _split_entries(staging, writers),
        "tokenization": {"seconds": round(seconds, 3), "input_bytes": input_bytes,
                         "mb_per_s": round(input_bytes / 1e6 / seconds, 3) if seconds > 0 else None,
                         "threads": _threads(), "tokenizers": require_module("tokenizers", "data").__version__},
        "warnings": warnings,
    }
    for name in (TOKENIZER_FILE, *SPLIT_FILES.values()):
        os.replace(staging / name, out / name)
    staging.rmdir()
    from parallax.store.results import atomic_write_json

    atomic_write_json(out / META_FILE, meta)
    return PrepareResult(PreparedData(out, meta), up_to_date=False, warnings=warnings)


def _tokenize_into(staging: Path, corpus: Corpus, tokenizer, vocab_size: int, eos: int,
                   show_progress: bool) -> tuple[list[TokenWriter], float]:
    """Tokenize every document into staging's train and validation token files; (the finished
    writers, seconds). Both files are removed when tokenization fails."""
    writers = [TokenWriter(staging / SPLIT_FILES[s], vocab_size, eos, "--out") for s in ("train", "validation")]
    totals = [s.total_bytes for s in corpus.train + corpus.valid]
    start = time.perf_counter()
    try:
        with _Progress(show_progress, None if None in totals else sum(totals)) as progress:
            tokenize_corpus(corpus, tokenizer, writers, progress)
    except BaseException:
        for writer in writers:
            writer.abort()
        raise
    for writer in writers:
        writer.finish()
    return writers, time.perf_counter() - start


def _split_entries(staging: Path, writers: list[TokenWriter]) -> dict:
    """meta.json's ``splits``: file, token and document counts, size and SHA-256 of each."""
    return {
        split: {"file": SPLIT_FILES[split], "tokens": w.n_tokens, "documents": w.documents,
                "bytes": (staging / SPLIT_FILES[split]).stat().st_size,
                "sha256": file_sha256(staging / SPLIT_FILES[split])}
        for split, w in zip(("train", "validation"), writers)
    }


def _non_empty(texts: _TokenizerTexts, corpus: Corpus) -> Iterator[str]:
    yield from texts
    if texts.seen == 0:
        names = ", ".join(s.name for s in corpus.train)
        raise ParallaxError(f"corpus {names}: no text found (empty corpus)")


def _quiet_meta(out: Path) -> dict | None:
    try:
        return read_meta(out)
    except ParallaxError:
        return None


def _check_splits(writers: list[TokenWriter], corpus: Corpus, inputs: list[str]) -> None:
    train, valid = writers
    if train.documents == 0 or train.n_tokens <= train.documents:
        for writer in writers:
            writer.abort()
        raise ParallaxError(f"corpus {', '.join(map(str, inputs)) or '(none)'}: no text found (empty corpus)")
    if valid.n_tokens <= valid.documents and (corpus.valid or corpus.holdout_every is not None):
        for writer in writers:
            writer.abort()
        hf = [s for s in corpus.valid if isinstance(s, HFDataset)]
        if hf:  # `train --hf` comes here too: the fix is a data prepare command
            raise ParallaxError(f"no validation text: {hf[0].name} holds none; prepare another split with "
                                f"`parallax data prepare --hf {hf[0].dataset} --hf-valid-split SPLIT`")
        how = ("the validation inputs hold no text" if corpus.valid else
               f"holding out every {corpus.holdout_every}-th of {train.documents:,} documents left none")
        raise ParallaxError(f"no validation text: {how}; pass --valid FILE (or a larger --valid-fraction)")
