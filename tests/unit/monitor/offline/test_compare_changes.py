"""compare names what changed between two agents' version tuples, warns when confounded, and prints the MDE."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from monitor.cli.main import main
from monitor.stats.power import minimum_detectable_effect


def _write(path: Path, agent: str, p: float, seed: int, **hashes: str) -> Path:
    rng = random.Random(seed)
    with path.open("w") as out:
        for task in range(400):
            out.write(json.dumps({"agent": agent, "task": f"t{task}", "trial": 0, "ok": rng.random() < p,
                                  "tin": 1000, "tout": 100, "steps": 3, "lat": 5, **hashes}) + "\n")
    return path


def test_changed_confounded_and_detectable_effect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path / "a.jsonl", "A", 0.7, 1, prompt_hash="p1", config_hash="c1")
    b = _write(tmp_path / "b.jsonl", "B", 0.6, 2, prompt_hash="p2", config_hash="c1")
    assert main(["compare", str(a), str(b), "--json", "--resamples", "200"]) == 0
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert report["changed"] == ["model_id", "prompt_hash"]
    assert report["baseline_identity"]["prompt_hash"] == "p1" and report["candidate_identity"]["config_hash"] == "c1"
    assert "confounded: 2 components differ (model_id, prompt_hash)" in out.err
    mde = report["minimum_detectable_effect"]
    m = report["mcnemar"]
    assert mde["n_tasks"] == m["n"] == 400
    assert mde["effect"] == pytest.approx(minimum_detectable_effect(400, mde["baseline_rate"],
                                                                    discordance=m["n_discordant"] / 400))
    assert 0 < mde["effect"] < 0.3
    assert main(["compare", str(a), str(b), "--resamples", "200"]) == 0
    text = capsys.readouterr().out
    assert "B vs A: changed: model_id, prompt_hash  (confounded: 2 components differ)" in text
    assert "smallest drop these 400 tasks detect at 80% power" in text
