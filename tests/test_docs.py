"""The documentation site's code runs as written.

Every ``python`` and ``bash`` block of the tutorials, the how-to pages and the library guides is
executed, in order, in a fresh directory (one namespace per page); a ``bash`` block may hold only
``msroute`` commands, which run through the command line's entry point and must exit 0. Commands
that are shown but not run go in ``text`` blocks. The getting-started page's Python blocks and its
``msroute`` commands run the same way (its install lines are what CI itself runs). The examples of
the router and serving pages run in ``test_readme.py`` and ``test_service_readme.py``.

The site's hooks are checked too: the HTTP reference is rendered from the app's OpenAPI document,
MathJax is bundled, and no docstring holds a raw reST role (the API reference renders Markdown).
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
import types
from pathlib import Path

import pytest

from msroute.cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(
    p.relative_to(DOCS).as_posix()
    for p in [
        *DOCS.glob("tutorials/*.md"),
        *DOCS.glob("how-to/*.md"),
        DOCS / "getting-started.md",
        DOCS / "library.md",
        DOCS / "budgets.md",
    ]
)
SLOW = {"tutorials/reproduce.md"}


def blocks(path: Path) -> list[tuple[str, str]]:
    """The (language, code) of each fenced block of a page, in order."""
    return re.findall(r"^```(\w+)\n(.*?)^```", path.read_text(), flags=re.S | re.M)


def run_page(path: Path) -> None:
    page = path.name if path.parent == DOCS else path.relative_to(path.parents[1]).as_posix()
    # A real module, so that classes a page defines can be found by module:qualname (saving).
    module = types.ModuleType("docs_page_" + re.sub(r"\W", "_", page))
    sys.modules[module.__name__] = module
    try:
        _run_blocks(path, page, module.__dict__)
    finally:
        del sys.modules[module.__name__]


def _run_blocks(path: Path, page: str, namespace: dict[str, object]) -> None:
    for lang, code in blocks(path):
        if lang == "python":
            exec(compile(code, f"docs/{page}", "exec"), namespace)
        elif lang == "bash":
            for line in code.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                if not line.startswith("msroute "):
                    assert page == "getting-started.md", f"{page}: not an msroute command: {line}"
                    continue
                assert main(shlex.split(line)[1:]) == 0, f"{page}: {line}"


@pytest.mark.parametrize(
    "page", [pytest.param(p, marks=pytest.mark.slow) if p in SLOW else p for p in PAGES]
)
def test_page_code_runs(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert blocks(DOCS / page), f"{page} has no code block"
    monkeypatch.chdir(tmp_path)
    run_page(DOCS / page)
    capsys.readouterr()


def test_every_tutorial_and_how_to_is_tested() -> None:
    assert {
        "tutorials/reproduce.md",
        "tutorials/own-experts.md",
        "tutorials/llm-service.md",
        "tutorials/evaluate-from-journal.md",
        "how-to/custom-data.md",
        "how-to/policy-plugin.md",
        "how-to/ray.md",
    } <= set(PAGES)


def test_a_failing_block_fails_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "tutorials" / "bad.md"
    page.parent.mkdir()
    page.write_text("```bash\nmsroute data instance --sample 5 --seed 0 --dims 0\n```\n")
    with pytest.raises(AssertionError, match="msroute data instance"):
        run_page(page)
    page.write_text("```bash\npip install something\n```\n")
    with pytest.raises(AssertionError, match="not an msroute command"):
        run_page(page)
    page.write_text("```python\nassert 1 == 2, 'the block ran'\n```\n")
    with pytest.raises(AssertionError, match="the block ran"):
        run_page(page)
    capsys.readouterr()


def _hooks() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "_hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


def test_the_http_reference_is_generated_from_the_openapi_document() -> None:
    pytest.importorskip("fastapi")
    hooks = _hooks()
    page = hooks.on_page_markdown("# HTTP API\n\n<!-- openapi:begin -->\n<!-- openapi:end -->\n")
    document = hooks.openapi_document()
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            assert f"### `{method.upper()} {path}`" in page
            for status in op["responses"]:
                assert f"| {status} |" in page
    for name in document["components"]["schemas"]:
        assert f"{{#schema-{name.lower()}}}" in page
    # Every link to a schema has its section.
    anchors = set(re.findall(r"\{#(schema-[\w-]+)\}", page))
    assert set(re.findall(r"\]\(#(schema-[\w-]+)\)", page)) <= anchors


def test_the_committed_http_reference_is_the_apps() -> None:
    """docs/reference/http.md holds the rendered reference (it reads in the repository too):
    it must be what the app's OpenAPI document renders to now."""
    pytest.importorskip("fastapi")
    hooks = _hooks()
    committed = hooks.HTTP_REFERENCE.read_text()
    assert hooks.OPENAPI_REGION.search(committed), "the page lost its openapi:begin/end lines"
    assert "### `GET /v1/routers/{name}`" in committed
    assert committed == hooks.with_reference(committed), (
        "docs/reference/http.md differs from the app's OpenAPI document: run "
        "`python docs/_hooks.py` and commit the page"
    )


def test_the_math_is_bundled_not_fetched() -> None:
    hooks = _hooks()
    config = (DOCS.parent / "mkdocs.yml").read_text()
    scripts = re.findall(r"^  - (\S+)", config.split("extra_javascript:")[1].split("\n\n")[0], re.M)
    assert hooks.MATHJAX_URI + "tex-svg.js" in scripts
    assert not [s for s in scripts if "://" in s], scripts
    # The files come from the docs extra (CI installs it before building the site).
    if importlib.util.find_spec("mathjax") is not None:
        assert all(path.is_file() for path in hooks.mathjax_files().values())


ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj|math|ref):`")


def test_no_docstring_holds_a_raw_rest_role() -> None:
    """The API reference is Markdown: a ``:class:`X``` would show as it is written."""
    src = DOCS.parent / "src" / "msroute"
    found = [
        f"{path.relative_to(src)}:{n}"
        for path in sorted(src.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ROLE.search(line)
    ]
    assert not found, f"raw reST roles (write ``name`` instead): {found}"
