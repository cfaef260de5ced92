"""``parallax data``: prepare token data for training (``parallax data prepare``)."""

from __future__ import annotations

import sys

import click

from parallax.errors import say
from parallax.spec.config import DataConfig

DEFAULTS = DataConfig()


@click.group("data")
def command():
    """Prepare TinyStories (or any text corpus) as token files for `parallax train --data`."""


@command.command("prepare")
@click.argument("corpus", nargs=-1)
@click.option("--out", "-o", required=True, metavar="DIR", help="Directory for tokenizer.json, train.bin, "
              "validation.bin and meta.json.")
@click.option("--valid", multiple=True, metavar="PATH",
              help="Validation corpus (repeatable). Default: hold out every N-th training document.")
@click.option("--valid-fraction", type=float, default=DEFAULTS.valid_fraction, show_default=True,
              help="Without --valid: hold out every round(1/F)-th document for validation.")
@click.option("--tokenizer", metavar="FILE", help="Use this tokenizer.json instead of training one.")
@click.option("--vocab-size", type=int, default=DEFAULTS.vocab_size, show_default=True,
              help="Tokens in the vocabulary, <|endoftext|> included (the model's vocab).")
@click.option("--tokenizer-sample-mb", type=float, default=DEFAULTS.tokenizer_sample_mb, show_default=True,
              help="Train the tokenizer on at most this much leading training text.")
@click.option("--text-field", default=DEFAULTS.text_field, show_default=True,
              help="Field (.jsonl, --hf) or column (.parquet) holding the text.")
@click.option("--hf", is_flag=True, help=f"CORPUS is a Hugging Face dataset (default {DEFAULTS.hf_dataset}) "
              "or a local directory of data files, streamed with `datasets`.")
@click.option("--hf-train-split", default=DEFAULTS.hf_train_split, show_default=True)
@click.option("--hf-valid-split", default=DEFAULTS.hf_valid_split, show_default=True)
@click.option("--force", is_flag=True, help="Rebuild even if DIR holds prepared data.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def prepare_command(corpus, out, valid, valid_fraction, tokenizer, vocab_size, tokenizer_sample_mb, text_field,
                    hf, hf_train_split, hf_valid_split, force, quiet):
    """Tokenize CORPUS (.txt split at <|endoftext|>, or at blank lines without it; .jsonl,
    .parquet, or directories of them) into uint16 token files. Re-running with the same inputs
    does nothing."""
    from parallax.data.prepare import prepare
    from parallax.store.results import writable_output_dir

    options = DataConfig(vocab_size=vocab_size, text_field=text_field, valid=tuple(valid),
                         valid_fraction=valid_fraction, tokenizer=tokenizer,
                         tokenizer_sample_mb=tokenizer_sample_mb, hf=hf, hf_train_split=hf_train_split,
                         hf_valid_split=hf_valid_split)

    options.validate()  # the numbers, then the folder: before reading or tokenizing anything
    writable_output_dir(out, "--out")

    def log(message: str) -> None:
        if not quiet:
            say(f"parallax: {message}")

    from parallax.run import interrupt

    with interrupt.catching():  # Ctrl-C, SIGTERM: the staging folder goes, exit 130/143
        result = prepare(list(corpus), out, options, force=force,
                         show_progress=not quiet and sys.stderr.isatty(), log=log)
    for warning in result.warnings:
        say(f"parallax: warning: {warning}")
    from parallax.analysis.report.terminal import console_for_output, paragraph

    paragraph(console_for_output(), summary(result))
    return 0


def summary(result) -> str:
    data, meta = result.data, result.data.meta
    if result.up_to_date:
        return f"{data.directory}: up to date (same inputs and settings; files verified), nothing to do"
    splits, tok, speed = meta["splits"], meta["tokenizer"], meta["tokenization"]
    return (
        f"{data.directory}: train {splits['train']['tokens']:,} tokens ({splits['train']['documents']:,} documents), "
        f"validation {splits['validation']['tokens']:,} tokens ({splits['validation']['documents']:,} documents); "
        f"tokenizer {tok['vocab_size']:,} tokens, sha256 {tok['sha256'][:12]}; "
        f"tokenized {speed['input_bytes'] / 1e6:.1f} MB in {speed['seconds']:.1f} s "
        f"({speed['mb_per_s']:.1f} MB/s, {speed['threads']} threads)"
    )
