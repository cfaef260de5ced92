"""The package's layers (docs/architecture.md): no import circle between its modules, and no
import from a lower layer to a higher one. Every import counts, at module level or inside a
function, as ``scripts/import_graph.py`` reads them from the source with ``ast``."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Lowest first. A module may import its own layer's modules and those of lower layers; layers
# on one line (a tuple) are side by side and import neither each other nor anything above.
LAYERS = (
    "errors",            # ParallaxError: every layer raises it
    "spec",              # what a run is: pure data, no I/O, no probing
    "store",             # result files, timestamps, the cache root
    "native",            # parallax._native's Python face, the OS (GPU probe, topology, lifeline)
    "plan",              # where a spec meets the machine: machine, world, capability, resolve
    ("data", "quant"),   # token sources; the native quantization kernels' framework bindings
    "engines",           # read a resolved run; the frameworks' training loops and recipes
    "analysis",          # statistics, comparison, reports: pure functions of records
    "plans",             # experiment plans as TOML files and their loader
    "run",               # the driver, the launcher, the matrix runner, progress
    "cli",               # the commands
    "__main__",
)


def _load_script():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


graph = _load_script()


def rank_of() -> dict[str, int]:
    ranks = {}
    for i, entry in enumerate(LAYERS):
        for name in entry if isinstance(entry, tuple) else (entry,):
            ranks[name] = i
    return ranks


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """Every import from a module to one of a higher layer or of a layer beside its own."""
    ranks = rank_of()
    wrong = []
    for source, targets in edges.items():
        for target in targets:
            a, b = graph.layer(source), graph.layer(target)
            if ranks[b] > ranks[a] or (ranks[b] == ranks[a] and a != b):
                wrong.append(f"{source} -> {target}")
    return sorted(wrong)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module, or a module
    importing itself (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    return graph.graph()


def test_every_module_belongs_to_a_layer(edges):
    ranks = rank_of()
    assert sorted({graph.layer(m) for m in edges} - set(ranks)) == []


def test_the_graph_sees_lazy_imports_and_packages(edges):
    # function-level imports count: the driver imports the engines' registry at module level,
    # the launcher imports the torch engine's parallel checks inside a function
    assert "parallax.engines.torch.parallel" in edges["parallax.run.distributed"]
    assert "parallax.plan.machine" in edges["parallax.plan.world"]
    assert "parallax.spec.registry" in edges["parallax.engines"]  # a package's __init__ is a module


def test_no_module_imports_a_higher_layer(edges):
    assert upward_imports(edges) == []


def test_no_import_circle(edges):
    assert cycles(edges) == []


def test_the_checks_fail_on_a_planted_circle_and_an_upward_import(edges):
    planted = {name: set(targets) for name, targets in edges.items()}
    # the circle of old: config -> envinfo -> gpu -> config (a frozen config that probed the GPU)
    planted["parallax.spec.config"].add("parallax.plan.envinfo")
    assert upward_imports(planted) == ["parallax.spec.config -> parallax.plan.envinfo"]
    assert cycles(planted) == [["parallax.native.gpu", "parallax.plan.envinfo", "parallax.spec.config"]]
