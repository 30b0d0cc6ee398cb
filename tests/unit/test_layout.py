# SPDX-License-Identifier: GPL-2.0
"""The import graph read from the sources: no circle, and every import goes
down the pipeline's floors (ARCHITECTURE.md), never up."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "images", "gdbscripts")
# bottom to top; a module may import its own floor and the floors below
FLOORS = ("harness.base", "images.kernels", "images.guest", "images", "harness.analysis", "harness.guest",
          "harness.debug", "harness.reports", "harness.drivers", "harness", "gdbscripts")


def modules(root: Path = REPO, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    out = {}
    for pkg in packages:
        for f in (root / pkg).rglob("*.py"):
            name = ".".join(f.relative_to(root).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = f
    return out


def edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (anywhere in it, TYPE_CHECKING included)"""
    out: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        pkg = m if f.name == "__init__.py" else m.rpartition(".")[0]
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    parts = pkg.split(".")
                    base = ".".join(parts[:len(parts) - n.level + 1] + ([base] if base else []))
                # every name: `from pkg import a, b` may reach two modules
                names = [f"{base}.{a.name}" for a in n.names] + [base]
            else:
                continue
            for t in names:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != m:
                    out[m].add(t)
    return out


def floor(module: str) -> int:
    """The floor of the most specific folder that holds module."""
    return max(((len(f), i) for i, f in enumerate(FLOORS) if module == f or module.startswith(f + ".")),
               default=(0, -1))[1]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    assert circles(edges(modules())) == []


def test_a_circle_through_the_second_name_of_an_import_is_caught():
    """tests/fixtures/layout/circle: ring.a imports ring.b only as the second
    name of `from ring import c, b`, and ring.b imports ring.a back."""
    root = REPO / "tests" / "fixtures" / "layout"
    assert circles(edges(modules(root, ("ring",)))) == [["ring.a", "ring.b"]]


def test_every_name_of_an_import_is_an_edge():
    """Each module a `from X import a, b` reaches is counted, not the first only."""
    graph = edges(modules())
    assert {"harness.analysis.classify", "harness.analysis.cpu_state"} <= graph["harness.drivers.readings"]


def test_every_import_goes_down_the_floors():
    up = [f"{m} -> {t}" for m, ts in edges(modules()).items() for t in ts if floor(t) > floor(m)]
    assert up == [], "imports from a lower floor into a higher one:\n" + "\n".join(sorted(up))


def test_a_kernel_scheme_imports_nothing_of_what_goes_into_the_guest():
    bad = [f"{m} -> {t}" for m, ts in edges(modules()).items() if m.startswith("images.kernels")
           for t in ts if t.startswith("images.guest")]
    assert bad == []


def test_images_import_nothing_of_the_harness_but_its_base():
    bad = [f"{m} -> {t}" for m, ts in edges(modules()).items() if m.startswith("images")
           for t in ts if not t.startswith(("images", "harness.base"))]
    assert bad == []


def test_every_module_sits_on_a_floor():
    assert all(floor(m) >= 0 for m in modules())
