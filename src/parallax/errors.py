"""The one error type users see: a one-line message that names the fix (exit code 2)."""


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
