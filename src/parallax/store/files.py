"""Every file Parallax writes, written one way.

- A folder is made (``make_folder``) or checked (``prove_writable``) by writing into it: a probe
  file of one byte, flushed to disk and removed. ``os.access`` is not asked: it says yes to root
  on a read-only or full file system, and under ``/proc``.
- A file is written beside its target and renamed over it (``write_text``, ``write_bytes``,
  ``write_json``; ``replacing`` for a writer that wants a path, e.g. matplotlib or tarfile;
  ``symlink`` for a link), so a reader sees the old file or the new one, never half of one.
  ``folder_for_writing``: the folders made for a write that fails are removed again when empty.
- A log written while something runs (a child's output) is streamed into a file beside its
  target and renamed over it when the stream ends (``streaming``), also when it ends by an
  error or a signal: the log of a failure is what its reader needs.
- Three files are written in place, because the file at its name is the message: a progress
  file that a reader follows while it grows (``append``: whole lines, each in one write), a
  lock and a marker (``open_in_place``, ``write_in_place``).
- A full disk, a read-only file system, a missing permission or a path that cannot be a folder
  is a one-line ParallaxError naming the path and what it needs (``refusal``); the partial file
  is removed.
- ``refuse_input(path, inputs, option)``: a command never writes onto a file it reads;
  ``read_text``: a file the user names is UTF-8 text, or one line saying why not.

A new writer takes these functions; a command that writes a file the user names proves its
folder before the work (``prove_writable``), so a refusal costs nothing.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path

from parallax.errors import ParallaxError

# What each errno needs, in the user's words; other errors say their own strerror.
NEEDS = {
    errno.ENOSPC: "the disk is full; free space there or choose another folder",
    errno.EDQUOT: "the disk quota is used up; free space there or choose another folder",
    errno.EROFS: "the file system is read-only; choose a writable folder",
    errno.EACCES: "permission denied; choose a folder you can write",
    errno.EPERM: "permission denied; choose a folder you can write",
    errno.ENOENT: "a folder cannot be made there; choose a writable folder",
    errno.ENOTDIR: "a file stands where a folder must be; choose another path",
    errno.EISDIR: "a folder stands where the file must go; choose another name",
}
# The errors only a write meets (a full or read-only disk): ``parallax.cli.main`` turns one that
# escaped a writer into a one-line refusal too; a read's ENOENT or EACCES is not taken for one.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def refusal(path, exc: OSError, option: str | None = None) -> ParallaxError:
    """The one line for ``exc`` met writing ``path``: 'cannot write PATH: WHAT IT NEEDS'
    (with the option that chose the path, when the caller knows it)."""
    need = NEEDS.get(exc.errno, f"{exc.strerror or exc}; choose another folder")
    where = f" (from {option})" if option else ""
    return ParallaxError(f"cannot write {path}{where}: {need}")


def _default_file_mode() -> int:
    """The mode ``open()`` would give a new file: 0666 less the process umask (0644 under umask 022)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _sync(fd: int, path: str) -> None:
    """Flush file ``path`` (open as ``fd``) to disk: where a full disk shows at the latest. The
    one seam every write passes, so tests inject ENOSPC or EROFS here (``tests/fixtures/full_disk.py``)."""
    os.fsync(fd)


def _write_all(fd: int, data: bytes, path: str) -> None:
    """Write all of ``data`` to file ``path`` (open as ``fd``): the seam of the writes made in
    place (``append``, ``write_in_place``), where tests inject ENOSPC or EROFS as at ``_sync``."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _open_in_place(path: str, flags: int) -> int:
    """``os.open`` of a file written in place: the seam where tests make its folder refuse it."""
    return os.open(path, flags, 0o666)  # less the umask, as open() gives


def _probe(folder: Path) -> None:
    """Write one byte into ``folder`` and remove it; the OSError when that cannot be done."""
    fd, tmp = tempfile.mkstemp(prefix=".parallax-probe.", dir=folder)
    try:
        os.write(fd, b"p")
        _sync(fd, tmp)
    finally:
        os.close(fd)
        os.unlink(tmp)


def nearest_existing(path: Path) -> Path:
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing


def probe_failure(path) -> OSError | None:
    """Why ``path`` cannot become a folder of new files, or None: the folder, else the nearest
    folder above it that exists, takes a probe file (nothing stays)."""
    existing = nearest_existing(Path(path))
    if not existing.is_dir():
        return OSError(errno.ENOTDIR, "Not a directory", str(existing))
    try:
        _probe(existing)
    except OSError as exc:
        return exc
    return None


def prove_writable(path, option: str = "--output-dir", what: str = "output directory", fix: str | None = None) -> Path:
    """``path``, proved able to hold new files without creating it (``probe_failure``), or a
    one-line ParallaxError naming it, why, and the fix (default: the ``option`` to change)."""
    failure = probe_failure(path)
    if failure is not None:
        full = failure.errno in (errno.ENOSPC, errno.EDQUOT)
        fix = fix or (f"free space there or pass {option} with another path" if full
                      else f"pass {option} with a writable path")
        raise ParallaxError(f"{what} '{path}' is not writable ({failure.strerror}); {fix}")
    return Path(path)


def make_folder(path, option: str | None = None) -> Path:
    """``path`` as a folder (parents made), proved to take files; where it cannot, the folders
    made for it are removed again."""
    path = Path(path)
    made = _missing(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        _probe(path)
    except OSError as exc:
        _remove_empty(made)
        raise refusal(path, exc, option) from None
    return path


def _missing(path: Path) -> list[Path]:
    """``path`` and the folders above it that do not exist yet, deepest first."""
    return [p for p in (path, *path.parents) if not p.exists()]


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        with contextlib.suppress(OSError):  # not empty: something was written, keep it
            folder.rmdir()


@contextlib.contextmanager
def folder_for_writing(path, option: str | None = None):
    """``path`` made as a folder (``make_folder``) for the body's writes; when the body fails,
    the folders made here that stayed empty are removed: a failed write leaves no empty folder."""
    path = Path(path)
    made = _missing(path)
    try:
        yield make_folder(path, option)
    except BaseException:
        _remove_empty(made)
        raise


@contextlib.contextmanager
def replacing(path, option: str | None = None):
    """A temporary path beside ``path`` for a writer that writes by name; renamed over ``path``
    when the body ends well, removed when it does not. Its folder is made (and removed again
    when the write fails and it stayed empty)."""
    path = Path(path)
    with folder_for_writing(path.parent, option), _replacing(path, option) as tmp:
        yield tmp


def _beside(path: Path, option: str | None) -> Path:
    """A new empty file beside ``path`` (``.NAME.XXXXXXXX.SUFFIX``), to be renamed over it."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
        os.close(fd)
    except OSError as exc:
        raise refusal(path, exc, option) from None
    return Path(tmp)


def _into_place(tmp: Path, path: Path) -> None:
    os.chmod(tmp, _default_file_mode())
    os.replace(tmp, path)


@contextlib.contextmanager
def _replacing(path: Path, option: str | None):
    tmp = _beside(path, option)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            _sync(f.fileno(), str(tmp))
        _into_place(tmp, path)
    except OSError as exc:
        raise refusal(path, exc, option) from None
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def streaming(path, option: str | None = None, binary: bool = False):
    """A file open for writing (text, or bytes for a child's stdout) that becomes ``path`` when
    the body ends: streamed beside it and renamed over it, so an earlier ``path`` stays whole
    until then. Also when the body ends by an error or a signal: what was written is the log of
    that failure. A write of the stream that fails (a full disk) removes it and is the one-line
    refusal; while the body runs, the stream is ``.NAME.XXXXXXXX.SUFFIX`` beside ``path``."""
    path = Path(path)
    with folder_for_writing(path.parent, option):
        tmp = _beside(path, option)
        try:
            stream = open(tmp, "wb" if binary else "w")
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise refusal(path, exc, option) from None
        try:
            yield stream
        except BaseException as exc:
            if _written_to(exc, tmp):
                raise refusal(path, exc, option) from None
            with contextlib.suppress(OSError):  # keep the log as far as it can be kept
                _close_into_place(stream, tmp, path)
            raise
        else:
            try:
                _close_into_place(stream, tmp, path)
            except OSError as exc:
                raise refusal(path, exc, option) from None
        finally:
            with contextlib.suppress(OSError):  # closed already, or its data lost with it
                stream.close()
            tmp.unlink(missing_ok=True)


def _written_to(exc: BaseException, tmp: Path) -> bool:
    """Whether ``exc`` is a write of ``tmp`` that failed (a full or read-only disk): a stream's
    own write names no file, or ``tmp``."""
    return (isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS
            and exc.filename in (None, str(tmp)))


def _close_into_place(stream, tmp: Path, path: Path) -> None:
    stream.flush()
    _sync(stream.fileno(), str(tmp))
    stream.close()
    _into_place(tmp, path)


def symlink(path, target, option: str | None = None) -> Path:
    """``path`` as a symbolic link to ``target``: made beside it and renamed over it, so what
    stood at ``path`` (a file or a link) is replaced in one step."""
    path = Path(path)
    with folder_for_writing(path.parent, option):
        tmp = _beside(path, option)
        try:
            tmp.unlink()
            os.symlink(target, tmp)
            os.replace(tmp, path)
        except OSError as exc:
            raise refusal(path, exc, option) from None
        finally:
            tmp.unlink(missing_ok=True)
    return path


def append(path, data: bytes, option: str | None = None) -> None:
    """``data`` (whole lines) added at the end of ``path``, made if missing, in one write: a
    file that a reader follows while it grows (a progress file), so it is not renamed into
    place. A reader takes only lines that end; a write that fails is the one-line refusal.
    ``append(path, b"")`` makes the file (or proves it can be opened) and writes nothing."""
    fd = open_in_place(path, option, append=True)
    try:
        if data:
            _write_all(fd, data, str(path))
    except OSError as exc:
        raise refusal(path, exc, option) from None
    finally:
        os.close(fd)


def open_in_place(path, option: str | None = None, exclusive: bool = False, append: bool = False) -> int | None:
    """A descriptor of ``path``, made if missing (read and write; ``append``: write at its end):
    a file that is its own message at its name, a lock (flocked by its holder) or a marker. With
    ``exclusive``, None where ``path`` exists already: another process made it first (O_EXCL).
    A file that cannot be made (read-only or full disk, no permission) is the one-line refusal."""
    flags = os.O_CREAT | (os.O_WRONLY | os.O_APPEND if append else os.O_RDWR) | (os.O_EXCL if exclusive else 0)
    try:
        return _open_in_place(str(path), flags)
    except OSError as exc:
        if exclusive and exc.errno == errno.EEXIST:
            return None
        raise refusal(path, exc, option) from None


def write_in_place(fd: int, data: bytes, path, option: str | None = None) -> None:
    """``data`` as the whole of file ``path``, open as ``fd`` (``open_in_place``); the one-line
    refusal where it cannot be written."""
    try:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        _write_all(fd, data, str(path))
    except OSError as exc:
        raise refusal(path, exc, option) from None


def write_bytes(path, data: bytes, option: str | None = None) -> Path:
    """``data`` into ``path`` atomically (see the module's notes)."""
    with replacing(path, option) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
    return Path(path)


def write_text(path, text: str, option: str | None = None) -> Path:
    return write_bytes(path, text.encode(), option)


def write_json(path, value, option: str | None = None, **dumps_options) -> Path:
    """``value`` as indented JSON with a final newline."""
    return write_text(path, json.dumps(value, indent=2, **dumps_options) + "\n", option)


def read_text(path, what: str, fix: str) -> str:
    """The UTF-8 text of a file the user names (``what``: '--config', 'plan'...), or one line
    saying why it cannot be read, and ``fix``."""
    try:
        return Path(path).read_bytes().decode()
    except OSError as exc:
        raise ParallaxError(f"{what} {path}: {exc.strerror or exc}; {fix}") from None
    except UnicodeDecodeError as exc:
        raise ParallaxError(f"{what} {path} is not UTF-8 text (byte {exc.start}); {fix}") from None


def refuse_input(path, inputs, option: str) -> None:
    """A one-line ParallaxError when ``path`` is one of ``inputs``, the files the command reads:
    a command never writes onto what it reads."""
    target = Path(path).resolve()
    if any(target == Path(source).resolve() for source in inputs):
        raise ParallaxError(f"{option} {path} would replace a file this command reads; choose another name")
