"""``parallax results``: pack a benchmark's raw per-run records into one file, or unpack them."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("results")
def command():
    """Pack a finished benchmark's per-run records (steps, logs) into DIR/records.tar.xz, which
    `compare` and `crossover` read as they read the plain files; or unpack them again."""


@command.command("pack")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True))
def pack_command(dirs):
    """Move each DIR's per-run files, all but run.json and config.json, into DIR/records.tar.xz."""
    from parallax.store.archive import pack

    for folder in dirs:
        with _unless_running(Path(folder)):
            done = pack(Path(folder))
        for link in done["links"]:
            click.echo(f"removed the link {link}: not a result")
        click.echo(f"{done['archive']}: {done['members']} files ({done['packed']} added), "
                   f"{done['plain_bytes'] / 1e6:.1f} MB in {done['archive_bytes'] / 1e6:.1f} MB")
    return 0


@command.command("unpack")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True))
def unpack_command(dirs):
    """Write DIR/records.tar.xz's files back beside each run.json and delete the archive."""
    from parallax.store.archive import unpack

    for folder in dirs:
        with _unless_running(Path(folder)):
            done = unpack(Path(folder))
        click.echo(f"{done['archive']}: {done['written']} of {done['members']} files written back; archive deleted")
    return 0


def _unless_running(folder: Path):
    """The lock (``store/lock.py``) on a benchmark's --output-dir, so a running benchmark is
    refused; no lock file is made in any other folder."""
    import contextlib

    from parallax.store.lock import locked
    from parallax.store.results import MATRIX_FILE

    return locked(folder, "parallax results") if (folder / MATRIX_FILE).exists() else contextlib.nullcontext()
