"""The import graph of the ``parallax`` package, read from its source with ``ast``.

Every ``import parallax...`` and ``from parallax... import ...`` counts, at module level or
inside a function (the package imports frameworks and its own heavy modules lazily), and
``from parallax.x import y`` counts as an import of ``parallax.x.y`` where ``y`` is a module.

    python scripts/import_graph.py             # mermaid graph of the layers (docs/architecture.md)
    python scripts/import_graph.py --dot       # the same as Graphviz DOT
    python scripts/import_graph.py --modules   # one edge per line between modules
    python scripts/import_graph.py --hide errors   # the picture without the layer everyone imports

``tests/unit/test_import_graph.py`` reads the same edges to keep the layers acyclic.
"""

from __future__ import annotations

import argparse
import ast
import pathlib

PACKAGE = "parallax"
SOURCE = pathlib.Path(__file__).resolve().parents[1] / "src" / PACKAGE


def modules(root: pathlib.Path = SOURCE) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every .py file of the package."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module name of a ``from ... import`` (relative imports resolved)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The package modules that ``module`` imports anywhere in its file."""
    found = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # import a.b.c of a package: the deepest module known
                name = name.rpartition(".")[0]
            if name.startswith(PACKAGE) and name != module:
                found.add(name)
    return found


def graph(root: pathlib.Path = SOURCE) -> dict[str, set[str]]:
    """Module -> the package modules it imports (the package's own ``__init__`` left out: it
    only names the version)."""
    files = modules(root)
    known = set(files)
    return {m: imports_of(m, p, known) - {PACKAGE} for m, p in files.items() if m != PACKAGE}


def layer(module: str) -> str:
    """The layer of a module: its first name below the package (``parallax.plan.machine`` ->
    ``plan``; a top-level module is its own layer)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_edges(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(layer(a), layer(b)) for a, targets in edges.items() for b in targets if layer(a) != layer(b)}


def mermaid(edges: set[tuple[str, str]]) -> str:
    lines = ["graph TD"] + [f"  {a} --> {b}" for a, b in sorted(edges)]
    return "\n".join(lines)


def dot(edges: set[tuple[str, str]]) -> str:
    lines = ["digraph parallax {", "  rankdir=TB;"] + [f'  "{a}" -> "{b}";' for a, b in sorted(edges)] + ["}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dot", action="store_true", help="Graphviz DOT instead of mermaid")
    parser.add_argument("--modules", action="store_true", help="module edges, one per line")
    parser.add_argument("--hide", action="append", default=[], metavar="LAYER", help="leave a layer out")
    args = parser.parse_args()
    edges = graph()
    if args.modules:
        print("\n".join(f"{a} -> {b}" for a in sorted(edges) for b in sorted(edges[a])))
        return
    shown = {(a, b) for a, b in layer_edges(edges) if a not in args.hide and b not in args.hide}
    print(dot(shown) if args.dot else mermaid(shown))


if __name__ == "__main__":
    main()
