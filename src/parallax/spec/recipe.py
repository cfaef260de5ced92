"""What a precision recipe is: a named way for one framework to train in one number format.

A recipe is data (this module imports no framework): its format (bf16, fp8, mxfp8, nvfp4, mxfp4), the
framework that runs it, the library it needs and the extra that installs it, the compute
capability its format needs in hardware, the datasheet column MFU divides by, the parameters
it records, and where its hooks live (``hooks``: "module:Class", imported only when a run uses
the recipe). The hooks are what an engine calls: build or convert the model, the context a
step runs in, the extra state it carries (``engines/torch/hooks.py``, ``engines/jax/hooks.py``
define the two interfaces).

Recipes are defined one file per backend under ``engines/torch/recipes/``, ``engines/jax/recipes/`` and
``engines/maxtext/recipes.py``, and collected in ``spec/registry.py``, which every reader
(config, capability, hardware, check-env, runner, report) asks.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field

# Number formats, in report order. A run's ``--precision`` names one; its recipe says how.
FORMATS = ("bf16", "fp8", "mxfp8", "nvfp4", "mxfp4")
# What a benchmark runs without --precisions, and the GEMM ceilings measure: the MX formats (emulated
# only, short of a Blackwell GPU) are asked for by name or by a plan (plans/blackwell-formats.toml).
DEFAULT_FORMATS = ("bf16", "fp8", "nvfp4")
# Every framework Parallax knows, in report order (an engine may still be planned).
FRAMEWORKS = ("torch", "jax", "maxtext")
# Datasheet column of each format's dense peak (``hardware.GPUSpec``).
PEAK_COLUMN = {"bf16": "bf16", "fp8": "fp8", "mxfp8": "fp8", "nvfp4": "fp4", "mxfp4": "fp4"}
# Minimum compute capability whose tensor cores run the format natively.
NATIVE_MIN_CC = {"bf16": (8, 0), "fp8": (8, 9), "mxfp8": (10, 0), "nvfp4": (10, 0), "mxfp4": (10, 0)}


def cc_tuple(cc) -> tuple[int, int] | None:
    """'9.0', (9, 0) or 9.0 -> (9, 0); None when absent or unreadable."""
    if cc is None:
        return None
    if isinstance(cc, (tuple, list)):
        return int(cc[0]), int(cc[1])
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(cc))
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass(frozen=True)
class Backend:
    """The library a recipe needs: distributions that must be installed (any one of each
    tuple), the module to import, and the ``slm-parallax`` extra that installs it."""

    name: str  # e.g. "transformer_engine"
    distributions: tuple[tuple[str, ...], ...] = ()  # () : the framework alone suffices
    module: str | None = None
    extra: str | None = None
    min_version: str | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "module": self.module, "extra": self.extra,
                "min_version": self.min_version,
                "distributions": [list(d) for d in self.distributions]}


@dataclass(frozen=True)
class Recipe:
    framework: str
    name: str  # unique within its framework; a cell is (framework, recipe name)
    format: str  # one of FORMATS
    summary: str  # one line: what runs
    backend: Backend
    hooks: str | None  # "module:Class" implementing the engine's hook interface; None: planned
    default: bool = False  # the framework's recipe for ``--precision <format>``
    # The default instead on a GPU of at least this compute capability (registry.default):
    # torch's te-nvfp4 on 10.0+, its emulated-nvfp4 elsewhere.
    default_min_cc: tuple[int, int] | None = None
    cpu: bool = False  # runs on the CPU (correct arithmetic, no benchmark numbers)
    # The torch engine can capture the model's blocks in CUDA graphs (its hooks' ``graph``):
    # what ``--cuda-graphs auto`` turns on and ``--cuda-graphs on`` requires.
    cuda_graphs: bool = False
    # How the torch engine runs the recipe under FSDP2 (``--sharding fsdp``, several GPUs): how
    # its weights travel; None: refused there (engines/torch/parallel.py). DDP runs every recipe.
    fsdp: str | None = None
    emulated: bool = False  # the format is emulated (quantize-dequantize), never native
    min_cc: tuple[int, int] | None = None  # below it the recipe cannot run on a GPU at all
    # At or above it the recipe cannot run either (TE's MXFP8: 10.x only, refused on 12.0+).
    below_cc: tuple[int, int] | None = None
    params: dict = field(default_factory=dict)  # recorded in every result
    planned: str | None = None  # for a recipe without hooks: what will run it
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.framework}:{self.name}"

    @property
    def mfu_format(self) -> str:
        """The format whose dense peak MFU divides by: an emulated recipe's GEMMs run in bf16."""
        return "bf16" if self.emulated else self.format

    @property
    def peak_column(self) -> str:
        return PEAK_COLUMN[self.mfu_format]

    @property
    def native_min_cc(self) -> tuple[int, int]:
        return NATIVE_MIN_CC[self.format]

    @property
    def implemented(self) -> bool:
        return self.hooks is not None

    def load_hooks(self):
        """An instance of the recipe's hook class, constructed with the recipe."""
        if self.hooks is None:
            raise RuntimeError(f"recipe {self.key} has no implementation ({self.planned})")
        module, _, cls = self.hooks.partition(":")
        return getattr(importlib.import_module(module), cls)(self)

    def to_dict(self) -> dict:
        return {"framework": self.framework, "name": self.name, "format": self.format,
                "summary": self.summary, "backend": self.backend.to_dict(), "default": self.default,
                "default_min_cc": ".".join(map(str, self.default_min_cc)) if self.default_min_cc else None,
                "emulated": self.emulated, "peak_column": self.peak_column,
                "native_min_cc": ".".join(map(str, self.native_min_cc)),
                "min_cc": ".".join(map(str, self.min_cc)) if self.min_cc else None,
                "params": dict(self.params), "cuda_graphs": self.cuda_graphs, "implemented": self.implemented, "planned": self.planned}
