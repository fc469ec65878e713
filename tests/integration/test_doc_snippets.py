"""Every Python snippet in README.md and docs/*.md runs as written, against the real services."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.integration

FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
DOCUMENTS = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
SNIPPETS = [(doc, i, code) for doc in DOCUMENTS for i, code in enumerate(FENCE.findall((ROOT / doc).read_text()))]


def test_the_documents_have_snippets():
    assert {doc for doc, _, _ in SNIPPETS} >= {"README.md", "docs/operating.md"}


@pytest.mark.parametrize("doc, index, code", SNIPPETS, ids=[f"{d}#{i}" for d, i, _ in SNIPPETS])
def test_snippet_runs(doc, index, code, kafka_bootstrap):
    env = {**os.environ, "FLEETMON_KAFKA_BOOTSTRAP": kafka_bootstrap}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"{doc} snippet {index} failed:\n{done.stderr[-2000:]}"
