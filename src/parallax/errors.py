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
