"""MkDocs hooks: the HTTP reference from the service's OpenAPI document, and MathJax bundled.

- The HTTP reference, between the lines ``<!-- openapi:begin -->`` and ``<!-- openapi:end -->``
  of a page (docs/reference/http.md): every endpoint of ``msroute serve`` (parameters, request
  body, responses and status codes) and every schema, rendered from the OpenAPI document that the
  app built by ``create_app`` serves at ``/openapi.json``. The document is fetched in process
  through the app's ASGI interface (no server, no journal opened). The rendered reference is
  committed in the page, so that it reads in the repository too and an API change shows in its
  diff; ``python docs/_hooks.py`` writes it again, a test fails while the committed one differs
  from the app's, and the site is built from a fresh rendering.
- MathJax is served from the site itself, not from a CDN: the hook adds MathJax 3's
  ``tex-svg.js`` (and its licence) from the installed ``django-static-mathjax`` package, a
  verbatim copy of MathJax's release files, to the site's files. SVG output needs no web fonts,
  so that one file renders every formula offline.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG = ROOT / "examples" / "serve.toml"
HTTP_REFERENCE = ROOT / "docs" / "reference" / "http.md"
OPENAPI_REGION = re.compile(r"^<!-- openapi:begin -->\n.*?^<!-- openapi:end -->$", re.M | re.S)
MATHJAX_URI = "javascripts/vendor/mathjax/"
MATHJAX_FILES = {"tex-svg.js": "es5/tex-svg.js", "LICENSE": "LICENSE"}


# ---------------------------------------------------------------------------- OpenAPI


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the service app, as ``GET /openapi.json`` returns it."""
    from msroute.service import create_app, load_service_config

    with tempfile.TemporaryDirectory() as data_dir:
        app = create_app(load_service_config(EXAMPLE_CONFIG, data_dir=data_dir), token=None)
        status, body = asyncio.run(_asgi_get(app, "/openapi.json"))
    if status != 200:
        raise RuntimeError(f"GET /openapi.json answered {status}: {body[:200]!r}")
    document: dict[str, Any] = json.loads(body)
    return document


async def _asgi_get(app: Any, path: str) -> tuple[int, bytes]:
    """One GET request through the ASGI interface; the app's lifespan is not run."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"docs")],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


def _cell(text: Any) -> str:
    """Text fit for one table cell: one line, pipes escaped."""
    return " ".join(str(text or "").split()).replace("|", "\\|")


def _schema_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _type(schema: dict[str, Any]) -> str:
    """A short Markdown rendering of a JSON schema's type; named schemas link to their section."""
    if "$ref" in schema:
        name = _schema_name(schema["$ref"])
        return f"[`{name}`](#schema-{name.lower()})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            parts = [_type(s) for s in schema[key]]
            return " or ".join(dict.fromkeys(parts))
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(f"`{k}`" for k in kind)
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    if kind is None:
        return "any"
    fmt = f" ({schema['format']})" if "format" in schema else ""
    return f"`{kind}`{fmt}"


def _content(content: dict[str, Any]) -> str:
    """The media types of a request or response body and its schema (FastAPI puts a model's
    schema under one of the media types it lists, e.g. ``application/json`` beside
    ``application/problem+json``)."""
    if not content:
        return ""
    schema = next((spec["schema"] for spec in content.values() if spec.get("schema")), None)
    media = " or ".join(f"`{m}`" for m in content)
    return media + (f": {_type(schema)}" if schema else "")


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    lines = [f"### `{method.upper()} {path}`", ""]
    if op.get("summary"):
        lines += [f"**{op['summary']}**", ""]
    if op.get("description"):
        lines += [op["description"].strip(), ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for p in params:
            lines.append(
                f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | "
                f"{'yes' if p.get('required') else 'no'} | {_cell(p.get('description'))} |"
            )
        lines.append("")
    body = op.get("requestBody")
    if body:
        required = " (required)" if body.get("required") else ""
        lines += [f"Request body{required}: {_content(body.get('content', {}))}", ""]
    lines += ["| status | meaning | body |", "|---|---|---|"]
    for status, response in op.get("responses", {}).items():
        lines.append(
            f"| {status} | {_cell(response.get('description'))} | "
            f"{_content(response.get('content', {})) or '—'} |"
        )
    return [*lines, ""]


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name} {{#schema-{name.lower()}}}", ""]
    if schema.get("description"):
        lines += [schema["description"].strip(), ""]
    props = schema.get("properties", {})
    if props:
        required = set(schema.get("required", []))
        lines += ["| field | type | required | description |", "|---|---|---|---|"]
        for field, spec in props.items():
            lines.append(
                f"| `{field}` | {_type(spec)} | {'yes' if field in required else 'no'} | "
                f"{_cell(spec.get('description') or spec.get('title'))} |"
            )
        lines.append("")
    elif "properties" not in schema:
        lines += [f"Type: {_type(schema)}", ""]
    examples = schema.get("examples") or ([schema["example"]] if "example" in schema else [])
    if examples:
        lines += ["Example:", "", "```json", json.dumps(examples[0], indent=2), "```", ""]
    return lines


def render_openapi(document: dict[str, Any]) -> str:
    """The HTTP reference in Markdown: the endpoints in the document's order, then the schemas."""
    info = document.get("info", {})
    lines = [
        f"Generated from the OpenAPI {document.get('openapi', '')} document of "
        f"{info.get('title', 'the service')} {info.get('version', '')}.",
        "",
        "## Endpoints",
        "",
    ]
    for path, operations in document.get("paths", {}).items():
        for method, op in operations.items():
            lines += _operation(method, path, op)
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        lines += ["## Schemas", ""]
        for name, schema in schemas.items():
            lines += _schema(name, schema)
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------- MathJax


def mathjax_files() -> dict[str, Path]:
    """Site path -> installed file of the bundled MathJax; a missing package is an error."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the docs bundle MathJax from the django-static-mathjax package: "
            'pip install -e ".[docs]"'
        )
    base = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    files = {MATHJAX_URI + name: base / rel for name, rel in MATHJAX_FILES.items()}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise RuntimeError(f"MathJax files missing from the installed package: {missing}")
    return files


# ---------------------------------------------------------------------------- hooks


def on_files(files: Any, config: Any, **_: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, path in mathjax_files().items():
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def with_reference(markdown: str) -> str:
    """``markdown`` with its ``openapi:begin``/``openapi:end`` region rendered afresh (a page
    without one is returned as it is)."""
    if not OPENAPI_REGION.search(markdown):
        return markdown
    region = f"<!-- openapi:begin -->\n{render_openapi(openapi_document())}<!-- openapi:end -->"
    return OPENAPI_REGION.sub(lambda _m: region, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return with_reference(markdown)


if __name__ == "__main__":  # python docs/_hooks.py: write the committed HTTP reference again
    HTTP_REFERENCE.write_text(with_reference(HTTP_REFERENCE.read_text()))
