"""The shape of the package's imports: light entry points, one direction, no facade inside.

Each check runs in a fresh interpreter where it measures what an import loads (a test process
has long imported everything).
"""

from __future__ import annotations

import ast
import importlib
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import msroute

SRC = Path(msroute.__file__).resolve().parent
# The service stack (the serve extra) loads only when `msroute serve` runs.
HEAVY = (
    "numba",
    "scipy",
    "matplotlib",
    "rich",
    "fastapi",
    "uvicorn",
    "starlette",
    "pydantic",
    "prometheus_client",
)


def _loaded_after(code: str) -> set[str]:
    """Top-level names of the modules loaded by running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC.parent), *sys.path])}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    ).stdout
    return {name.partition(".")[0] for name in json.loads(out.splitlines()[-1])}


@pytest.mark.parametrize(
    "code",
    [
        "import msroute.errors",
        "import msroute",
        "from msroute.cli import build_parser; build_parser()",  # what `msroute --help` runs
    ],
)
def test_light_entry_points_load_no_heavy_library(code: str) -> None:
    loaded = _loaded_after(code)
    assert not loaded & set(HEAVY), f"{code!r} loaded {sorted(loaded & set(HEAVY))}"


def test_heavy_libraries_load_where_they_are_used() -> None:
    # The probe above would pass if the probe itself were broken: show it sees scipy when used.
    loaded = _loaded_after(
        "import msroute\n"
        "msroute.Problem([[1.0], [0.0]], 1, msroute.Constraints(upper=[0.5])).check_feasible()"
    )
    assert "scipy" in loaded


def test_numba_loads_for_batched_simulation_only() -> None:
    # A batched simulation runs compiled loops (Thompson sampling's sampler among them); the
    # live router's TS draws from numpy's generator of each decision, so its first decisions
    # never wait for numba's import (about a second). The same probe sees numba when used.
    router = (
        "from msroute import Router\n"
        "r = Router({'policy': 'ts-bwk', 'm_draws': 2, 'cost_names': ['usd'], 'seed': 3,\n"
        "            'experts': {'a': [0.03], 'b': [0.002], 'c': [0.01]},\n"
        "            'constraints': {'upper': {'usd': 0.04}}})\n"
        "for _ in range(15):\n"
        "    d = r.route()\n"
        "    r.feedback(d.decision_id, 0.5)\n"
    )
    assert "numba" not in _loaded_after(router)
    simulation = (
        "import msroute\n"
        "p = msroute.Problem([[1.0], [0.0], [0.5]], 2, msroute.Constraints(upper=[1.0]))\n"
        "msroute.make_policy('ts', p, horizon=20, warmup=0).select()\n"
    )
    assert "numba" in _loaded_after(simulation)


def test_version_module_imports_nothing() -> None:
    tree = ast.parse((SRC / "_version.py").read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert imports == []
    assert msroute.__version__ == msroute._version.__version__


def _modules(root: Path = SRC) -> dict[str, Path]:
    """Dotted name -> file of every module of the package at ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(path: Path, *, package: str = "") -> list[tuple[str, list[str], int]]:
    """``(module, names, line)`` of each import of ``path``: the import statements wherever they
    are (in functions, under ``if TYPE_CHECKING``, in ``try``/``except``...; relative ones
    resolved against ``package``) and the ``importlib.import_module("...")`` calls with a
    literal name."""
    tree = ast.parse(path.read_text())
    found: list[tuple[str, list[str], int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend((a.name, [], node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            module = ".".join([*base, node.module] if node.level else [node.module or ""])
            found.append((module.strip("."), [a.name for a in node.names], node.lineno))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.args[0].value, [], node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_no_module_inside_the_package_imports_the_facade() -> None:
    modules = _modules()
    offenders = []
    for name, path in modules.items():
        if name == "msroute":
            continue
        for module, names, line in _imports(path):
            facade_names = [n for n in names if f"msroute.{n}" not in modules]
            if module == "msroute" and (not names or facade_names):
                offenders.append(f"{path.relative_to(SRC)}:{line} imports {facade_names}")
    assert offenders == []


def _graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """Module -> {module it imports: line of the first such import}, over every import of
    ``_imports`` (deferred ones and those for the type checker included).

    ``from p import x`` needs ``p.x`` where that is a module, and the package ``p`` itself
    where ``x`` is a name its ``__init__`` defines. Importing ``a.b.c`` runs the packages
    ``a`` and ``a.b`` first, except those that enclose the importing module (already running
    when it runs), unless it names one of them itself: ``from msroute.plotting import
    policy_color`` in ``msroute.plotting.frontier`` needs the package's ``__init__``, which
    imports ``frontier``.
    """
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: dict[str, int] = {}
        for module, names, line in _imports(path, package=package):
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules]
            named = [module] if len(targets) < len(names) or not names else []
            for target in [*targets, *named]:
                parts = target.split(".")
                enclosing = [".".join(parts[:i]) for i in range(1, len(parts))]
                for dep in [a for a in enclosing if not name.startswith(a + ".")] + [target]:
                    deps.setdefault(dep, line)
        graph[name] = {d: n for d, n in deps.items() if d in modules and d != name}
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The shortest import circle through each module that is on one (found by its strongly
    connected component), each circle once, starting at its first module by name."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if dep not in index:
                connect(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    cycles: list[list[str]] = []
    for component in components:
        for start in component:  # the shortest circle through each module of the component
            cycle = _shortest_cycle(graph, start, set(component))
            first = cycle.index(min(cycle[:-1]))
            rotated = [*cycle[first:-1], *cycle[:first], cycle[first]]
            if rotated not in cycles:
                cycles.append(rotated)
    return cycles


def _shortest_cycle(graph: dict[str, dict[str, int]], start: str, members: set[str]) -> list[str]:
    """The shortest path from ``start`` back to it inside ``members`` (one exists)."""
    paths = {start: [start]}
    queue = [start]
    while True:
        node = queue.pop(0)
        for dep in sorted(graph[node]):
            if dep == start:
                return [*paths[node], start]
            if dep in members and dep not in paths:
                paths[dep] = [*paths[node], dep]
                queue.append(dep)


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    steps = [f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle)]
    return " -> ".join([*steps, cycle[-1]])


def test_imports_have_no_cycle() -> None:
    """No circle among the package's imports, deferred ones (in functions) and those for the
    type checker included: each module can be read, and imported, after the ones it uses."""
    graph = _graph(_modules())
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(_describe(c, graph) for c in cycles)


def test_the_checks_see_every_cycle(tmp_path: Path) -> None:
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "b": 4}, "d": {"e": 1}, "e": {"d": 1}}
    assert _cycles(graph) == [["a", "b", "c", "a"], ["b", "c", "b"], ["d", "e", "d"]]
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {}}) == []
    assert _describe(["d", "e", "d"], graph) == "d (line 1) -> e (line 1) -> d"
    a = tmp_path / "a.py"
    a.write_text(
        "import os\nif TYPE_CHECKING:\n    import b\ndef f():\n    import c\n"
        "try:\n    pass\nexcept ImportError:\n    import d\n"
        "importlib.import_module('e')\n"
    )
    assert [m for m, _, _ in _imports(a)] == ["os", "b", "c", "d", "e"]
    # A package whose submodule imports the package's own names back (not its siblings).
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.sub import f\n")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.g import f\n")
    (pkg / "sub" / "g.py").write_text("from .h import x\ndef f():\n    from pkg.sub import y\n")
    (pkg / "sub" / "h.py").write_text("from pkg import sub\n")
    graph = _graph(_modules(pkg))
    assert graph["pkg.sub.g"] == {"pkg.sub.h": 1, "pkg.sub": 3}
    assert graph["pkg.sub.h"] == {"pkg.sub": 1}
    assert _cycles(graph) == [
        ["pkg.sub", "pkg.sub.g", "pkg.sub"],
        ["pkg.sub", "pkg.sub.g", "pkg.sub.h", "pkg.sub"],
    ]


#: The public paths of ``msroute.core``'s modules (the API reference's, and users'
#: ``from msroute.problem import Problem``): thin modules that re-export them.
PUBLIC_PATHS = {
    "msroute.problem": "msroute.core.problem",
    "msroute.problem_batch": "msroute.core.problem_batch",
    "msroute.bounds": "msroute.core.bounds",
    "msroute.reward": "msroute.core.reward",
    "msroute.projection": "msroute.core.qp.projection",
    "msroute.oracle": "msroute.core.oracle",
}


@pytest.mark.parametrize("public", sorted(PUBLIC_PATHS))
def test_public_paths_give_the_core_modules_names(public: str) -> None:
    """Every public name of the module, the same object, and nothing else: the public path
    imports its module and nothing more."""
    shim, module = importlib.import_module(public), importlib.import_module(PUBLIC_PATHS[public])
    assert shim.__all__ == module.__all__
    assert all(getattr(shim, name) is getattr(module, name) for name in module.__all__)
    assert [m for m, _, _ in _imports(_modules()[public])] == [PUBLIC_PATHS[public]]


def test_no_module_inside_the_package_imports_a_public_path() -> None:
    graph = _graph(_modules())
    offenders = [
        f"{name} imports {d}" for name, deps in graph.items() for d in deps if d in PUBLIC_PATHS
    ]
    assert offenders == []


def test_dir_lists_every_public_name_without_loading_the_lazy_ones() -> None:
    """``dir(msroute)`` shows the lazily imported names (``Router``, ``evaluate``...) too, and
    listing them loads nothing: the router stays unloaded until a name is used."""
    probe = (
        "import json, sys, msroute\n"
        "names = dir(msroute)\n"
        "print(json.dumps([names, 'msroute.router' in sys.modules]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC.parent), *sys.path])}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    ).stdout
    names, router_loaded = json.loads(out.splitlines()[-1])
    assert {"Router", "RouterConfig", "RoutedDecision", "evaluate"} <= set(names)
    assert set(msroute.__all__) <= set(names) and names == sorted(names)
    assert not router_loaded
    assert all(getattr(msroute, name) is not None for name in msroute.__all__)


def test_the_architecture_page_shows_every_module_where_it_is() -> None:
    """docs/architecture.md's source layout names each module of the package root, each
    subpackage, and each module of ``core/`` and ``core/qp/`` (the picture matches the folders)."""
    page = (SRC.parents[1] / "docs" / "architecture.md").read_text()
    layout = page.split("## Source layout", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    names = set(re.findall(r"[\w.]+/?", layout))
    shown = {
        f"{p.name}/" if p.is_dir() else p.name
        for folder in (SRC, SRC / "core", SRC / "core" / "qp")
        for p in folder.iterdir()
        if p.name not in ("__pycache__", "__init__.py", "py.typed")
        and (p.suffix == ".py" or (p / "__init__.py").is_file())
    }
    assert sorted(shown - names) == []
    # core's modules are drawn under core/, and the QP step's under qp/.
    core = layout.split("  core/", 1)[1].split("\n  problem.py", 1)[0]
    assert all(p.name in core for p in (SRC / "core").rglob("*.py") if p.name != "__init__.py")
