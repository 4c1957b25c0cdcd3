"""MkDocs hook: pages include sections of the README, which stays the one source of them.

A page line ``<!-- readme: Title -->`` is replaced by the body of the README's ``## Title``
section (up to the next ``## `` heading), its headings moved one level up (the page's title is
the section's) and its links into ``docs/`` made relative to the site.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = re.compile(r"^<!-- readme: (?P<title>.+?) -->$", re.M)


def readme_section(title: str) -> str:
    """The body of the README section ``## title``; a missing one is an error."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(?P<body>.*?)(?=^## |\Z)", text, re.M | re.S)
    if match is None:
        raise ValueError(f"README.md has no section '## {title}'")
    body = match.group("body").replace("](docs/", "](")
    return re.sub(r"^#(#{2,5}) ", r"\1 ", body, flags=re.M).strip() + "\n"


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda m: readme_section(m.group("title")), markdown)
