"""Every Python example in README.md and docs/*.md runs as written (slow: uses the real model).

A code block is run when its fence says ``python``; blocks of one page run in order in one
namespace, as a reader pasting them into one session would. A block that only illustrates a
signature can opt out with a first line ``# not run``.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _blocks(page: Path) -> list[str]:
    """The page's Python blocks, dedented (a block inside a list item is indented)."""
    blocks = [textwrap.dedent(b) for b in _BLOCK.findall(page.read_text())]
    return [b for b in blocks if not b.startswith("# not run")]


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p)], ids=lambda p: p.name)
def test_examples_run(page, smollm, monkeypatch, tmp_path):
    import constrain as cn

    monkeypatch.setattr(cn, "load_model", lambda *a, **k: smollm)  # load once per session
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for i, block in enumerate(_blocks(page)):
        try:
            # dont_inherit: this file's `from __future__ import annotations` must not turn the
            # examples' annotations into strings (a dataclass defined there would not resolve)
            exec(compile(block, f"{page.name}[block {i}]", "exec", dont_inherit=True), namespace)
        except Exception as exc:
            raise AssertionError(f"{page.name}, block {i} fails:\n{block}") from exc
