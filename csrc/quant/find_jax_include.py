"""Print jaxlib's include directory (the one holding xla/ffi/api/ffi.h), or nothing.

Run by csrc/CMakeLists.txt with the build's Python. In an isolated pip build jax is not
importable, but sysconfig still names the target environment's site-packages, where an
installed jaxlib keeps its headers."""

import os
import sysconfig

HEADER = os.path.join("xla", "ffi", "api", "ffi.h")


def find() -> str:
    try:
        import jax.ffi

        return jax.ffi.include_dir()
    except Exception:
        pass
    for key in ("platlib", "purelib"):
        d = os.path.join(sysconfig.get_paths()[key], "jaxlib", "include")
        if os.path.exists(os.path.join(d, HEADER)):
            return d
    return ""


print(find())
