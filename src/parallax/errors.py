"""The one error type users see: a one-line message that names the fix (exit code 2), and how
every message line reaches the user's stderr (``say``: one line in a log, wrapped on a terminal)."""


class ParallaxError(Exception):
    """Bad input or an unmet requirement, reported as one line before any GPU work."""

    exit_code = 2


def missing_dependency(module: str, extra: str) -> ParallaxError:
    """The error for an optional dependency that is not installed, naming the extra."""
    return ParallaxError(
        f"{module} is not installed; install it with: pip install 'slm-parallax[{extra}]'"
    )


def require_module(module: str, extra: str):
    """Import an optional dependency or raise a ParallaxError naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_dependency(module, extra) from exc


def require_installed(module: str, extra: str) -> None:
    """Raise a ParallaxError naming the extra unless ``module`` is installed, found without importing it
    or its parents: importing TransformerEngine loads a cuDNN, and that must wait until the engine has
    chosen which one (engines/torch/recipes/te.prefer_torch_cudnn)."""
    if not installed(module):
        raise missing_dependency(module, extra)


def installed(module: str) -> bool:
    """Whether ``module`` (dotted) can be found on disk; a module already imported counts, one set to
    None in sys.modules (a blocked import) does not."""
    import importlib.machinery
    import importlib.util
    import sys

    parts = module.split(".")
    places = None
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        if name in sys.modules:
            if sys.modules[name] is None:
                return False
            places = getattr(sys.modules[name], "__path__", None)
            continue
        if depth == 1:
            spec = importlib.util.find_spec(name)
        else:
            spec = places and importlib.machinery.PathFinder.find_spec(name, list(places))
        if spec is None or not spec:
            return False
        places = spec.submodule_search_locations
    return True


def say(line: str) -> None:
    """``line`` on stderr, as every message of Parallax reaches the user (``parallax: error: ...``,
    its warnings and notes). Where stderr is no terminal (a log, a pipe, CI) it is one line as it
    is, so that a log and ``grep 'parallax: error'`` keep the whole message; on a terminal it is
    wrapped at the terminal's width (``wrap``)."""
    import sys

    sys.stderr.write(fitted(line, terminal_width(sys.stderr)) + "\n")
    sys.stderr.flush()


def fitted(line: str, width: int | None) -> str:
    """``line`` as a terminal ``width`` columns wide shows it (``wrap``), or as it is where
    ``width`` is None (no terminal): what ``say`` writes, for a writer of its own (a rich console)."""
    return line if width is None else "\n".join(wrap(line, width))


def terminal_width(stream) -> int | None:
    """The width of the terminal that ``stream`` writes to ($COLUMNS where it is set, as rich
    takes it for the tables), or None where ``stream`` is no terminal."""
    import os

    try:
        if not stream.isatty():
            return None
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):  # no file behind it, or closed
        return None
    given = os.environ.get("COLUMNS", "")
    return int(given) if given.isdigit() and int(given) > 0 else columns or 80


def wrap(text: str, width: int, indent: str = "  ") -> list[str]:
    """``text`` as lines of at most ``width`` columns, broken at spaces only: a word longer than
    that (a path) stays whole, to be copied, and a hyphenated name is never split; the lines after
    the first of each line of ``text`` start with ``indent``."""
    import textwrap

    lines = []
    for part in text.splitlines() or [""]:
        lines += textwrap.wrap(part, width, subsequent_indent=indent, break_long_words=False,
                               break_on_hyphens=False) or [""]
    return lines
