"""The shape of the package's imports: light entry points, one direction, no facade inside.

Each check runs in a fresh interpreter where it measures what an import loads (a test process
has long imported everything).
"""

from __future__ import annotations

import ast
import json
import os
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


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _imports(path: Path, *, module_level: bool) -> list[tuple[str, list[str], int]]:
    """``(module, names, line)`` of each import of ``path``; ``module_level`` keeps only those
    run when the module is imported (not in functions, not under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text())
    found: list[tuple[str, list[str], int]] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.extend((a.name, [], node.lineno) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((node.module, [a.name for a in node.names], node.lineno))
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                continue
            elif module_level and isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ):
                if isinstance(node, ast.ClassDef):
                    visit(node.body)
                continue
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    visit([n for n in getattr(node, field, []) if isinstance(n, ast.stmt)])
                if isinstance(node, ast.ExceptHandler):
                    visit(node.body)

    visit(tree.body)
    return found


def test_no_module_inside_the_package_imports_the_facade() -> None:
    modules = _modules()
    offenders = []
    for name, path in modules.items():
        if name == "msroute":
            continue
        for module, names, line in _imports(path, module_level=False):
            facade_names = [n for n in names if f"msroute.{n}" not in modules]
            if module == "msroute" and (not names or facade_names):
                offenders.append(f"{path.relative_to(SRC)}:{line} imports {facade_names}")
    assert offenders == []


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module -> modules it imports), or None."""
    done: set[str] = set()

    def visit(node: str, stack: list[str]) -> list[str] | None:
        if node in stack:
            return [*stack[stack.index(node) :], node]
        if node in done:
            return None
        for dep in sorted(graph.get(node, ())):
            found = visit(dep, [*stack, node])
            if found:
                return found
        done.add(node)
        return None

    for name in graph:
        found = visit(name, [])
        if found:
            return found
    return None


def test_imports_have_no_cycle() -> None:
    """No cycle among the imports that run (deferred ones in functions included: a function
    that imports a module which imports the function's own module is a cycle all the same)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for module, names, _ in _imports(path, module_level=False):
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules]
            deps.update(t for t in [module, *targets] if t in modules)
        # Importing a submodule runs its packages' __init__ first: not a dependency of its own.
        graph[name] = {d for d in deps if d != name and not name.startswith(d + ".")}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_checks_see_a_cycle_and_skip_deferred_imports(tmp_path: Path) -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    a = tmp_path / "a.py"
    a.write_text("import os\nif TYPE_CHECKING:\n    import b\ndef f():\n    import c\nimport d\n")
    assert [m for m, _, _ in _imports(a, module_level=True)] == ["os", "d"]
    assert [m for m, _, _ in _imports(a, module_level=False)] == ["os", "c", "d"]


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
