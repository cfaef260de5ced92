"""A benchmark's raw per-run records packed into one compressed file, read as if unpacked.

``pack(dir)`` moves every file of every run folder under ``dir`` (a folder holding ``run.json``
or ``config.json``) into ``dir/records.tar.xz``, except the run folder's own ``run.json`` and
``config.json``: those stay plain, so a run's facts stay readable and ``--resume`` still sees
which cells are done. What moves is the bulky part: ``steps.jsonl``, ``run.log``, MaxText's
logs and data indices. Member names are paths relative to ``dir``
(``runs/<cell id>/steps.jsonl``); the archive is byte-for-byte reproducible (sorted members, no
dates or owners), and the plain files are deleted only after the archive on disk reads back
equal to them. ``unpack(dir)`` reverses it.

``read_record(run_dir, name)`` is the one way any code reads such a file: the plain file when
it is there, else the member of the nearest archive above ``run_dir``. A plain file wins over
an archived one (it was written after the pack). A symbolic link in a run folder (MaxText links
the machine's token file) is not a result: ``pack`` removes it and says so.
"""

from __future__ import annotations

import errno
import functools
import io
import lzma
import os
import tarfile
from pathlib import Path

from parallax.errors import ParallaxError
from parallax.store.files import prove_writable, write_bytes

ARCHIVE_FILE = "records.tar.xz"
KEPT_PLAIN = ("run.json", "config.json")  # results.RUN_FILE, results.CONFIG_FILE (results imports us)


class CorruptArchive(ParallaxError):
    """An archive that cannot be read whole: one error for the benchmark, not one per run."""


def read_record(run_dir: Path, name: str) -> bytes:
    """The bytes of ``run_dir/name``, plain or from the archive; FileNotFoundError when neither."""
    path = Path(run_dir) / name
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    found = archive_above(path)
    if found is not None:
        member = path.absolute().relative_to(found.parent.absolute()).as_posix()
        members = read_archive(found)
        if member in members:
            return members[member]
    raise FileNotFoundError(errno.ENOENT, "no such file (plain or packed)", str(path))


def archive_above(path: Path) -> Path | None:
    """The nearest ``records.tar.xz`` in a folder above ``path``."""
    for folder in Path(path).absolute().parents:
        if (folder / ARCHIVE_FILE).is_file():
            return folder / ARCHIVE_FILE
    return None


def read_archive(path: Path) -> dict[str, bytes]:
    """{member name: bytes} of an archive, decompressed once per process and version of the file."""
    stat = Path(path).stat()
    return _read_archive(str(Path(path).absolute()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _read_archive(path: str, mtime_ns: int, size: int) -> dict[str, bytes]:
    try:
        with tarfile.open(path, "r:xz") as tar:
            return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as exc:
        raise CorruptArchive(f"{path}: corrupt or truncated archive ({exc}); restore it "
                             f"(git checkout -- {path}) or re-run the benchmark") from None


def run_folders(root: Path) -> list[Path]:
    """Every folder under ``root`` (itself included) that holds a run: run.json or config.json."""
    root = Path(root)
    return sorted({p.parent for name in KEPT_PLAIN for p in root.rglob(name)})


def packable(root: Path) -> tuple[dict[str, Path], list[Path]]:
    """The plain files to pack {member name: path} and the symbolic links to remove."""
    files, links = {}, []
    for folder in run_folders(root):
        for path in sorted(folder.rglob("*")):
            if path.is_symlink():
                links.append(path)
            elif path.is_file() and not (path.parent == folder and path.name in KEPT_PLAIN):
                files[path.relative_to(root).as_posix()] = path
    return files, links


def pack(root: Path) -> dict:
    """Pack ``root``'s run records into ``root/records.tar.xz`` (adding to the one there)."""
    root = Path(root)
    archive = root / ARCHIVE_FILE
    if (root / KEPT_PLAIN[0]).exists():  # its other files are the user's, not records: never moved or deleted
        raise ParallaxError(f"{root} holds one train run ({KEPT_PLAIN[0]}), not a benchmark; nothing to pack "
                            "(name a benchmark's --output-dir)")
    prove_writable(root, what="folder", fix="make it writable, or copy it to a writable place first")
    files, links = packable(root)
    if not files and not archive.exists():
        raise ParallaxError(f"{root} holds no run records to pack; name a benchmark's --output-dir")
    members = dict(read_archive(archive)) if archive.exists() else {}
    members.update({name: path.read_bytes() for name, path in files.items()})
    _write_archive(archive, members)
    if _read_archive.__wrapped__(str(archive), 0, 0) != members:  # from disk, before anything is deleted
        raise ParallaxError(f"{archive}: did not read back equal to the files; nothing was deleted")
    removed = [f"{link} -> {os.readlink(link)}" for link in links]
    for path in [*files.values(), *links]:
        path.unlink()
    _remove_empty_folders(root, {p.parent for p in [*files.values(), *links]})
    return {"archive": archive, "packed": len(files), "members": len(members), "links": removed,
            "plain_bytes": sum(len(b) for b in members.values()), "archive_bytes": archive.stat().st_size}


def unpack(root: Path) -> dict:
    """Write ``root/records.tar.xz``'s members back as plain files (a plain file there wins) and
    delete the archive."""
    root = Path(root)
    archive = root / ARCHIVE_FILE
    if not archive.is_file():
        raise ParallaxError(f"{root} holds no {ARCHIVE_FILE}; nothing to unpack (name a folder 'parallax results "
                            "pack' packed)")
    prove_writable(root, what="folder", fix="make it writable, or copy it to a writable place first")
    members = read_archive(archive)
    outside = next((n for n in members if ".." in Path(n).parts or Path(n).is_absolute()), None)
    if outside is not None:
        raise CorruptArchive(f"{archive}: member {outside} lies outside {root}; the archive is not Parallax's")
    written = 0
    for name, data in members.items():
        path = root / name
        if not path.exists():
            write_bytes(path, data)
            written += 1
    archive.unlink()
    return {"archive": archive, "written": written, "members": len(members)}


def _write_archive(path: Path, members: dict[str, bytes]) -> None:
    """A reproducible tar.xz, written atomically: readers see the old archive or the new one."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(members[name]), 0o644, 0
            tar.addfile(info, io.BytesIO(members[name]))
    data = lzma.compress(buffer.getvalue(), format=lzma.FORMAT_XZ, preset=9 | lzma.PRESET_EXTREME)
    write_bytes(path, data)


def _remove_empty_folders(root: Path, folders: set[Path]) -> None:
    """Remove the folders that packing emptied (a MaxText run's data/npy), deepest first; never
    ``root`` or a run folder."""
    keep = set(run_folders(root)) | {root}
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        while folder not in keep and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
