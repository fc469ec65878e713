"""``fleetmon dlq list|export|redrive`` on the real broker: a worker dead-letters bad and oversized records,
the operator lists them with their reasons, re-drives the ones that pass now, and every count stays exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer

from monitor.run.simulate import Scenario, generate
from tests.support.paths import ROOT

MAX_RECORD_BYTES = 600    # the first worker's limit: the padded traces below are over it


def fleetmon(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "monitor.cli.main", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, check=False)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def stats(redis_url: str, prefix: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(fleetmon("stats", "--redis", redis_url, "--prefix", prefix, "--json").stdout)
    return doc


@pytest.fixture
def worker_run(kafka_bootstrap: str, redis_db_url: str, tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def run(topic: str, dlq: str, prefix: str, expected_traces: int, expected_dlq: int, *extra: str) -> None:
        log = tmp_path / f"worker-{len(procs)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "monitor.cli.main", "worker", "--bootstrap",
                                     kafka_bootstrap, "--redis", redis_db_url, "--prefix", prefix, "--topic", topic,
                                     "--dlq-topic", dlq, "--group-id", f"g-{prefix}", *extra], cwd=ROOT,
                                    env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=out, stderr=subprocess.STDOUT)
        procs.append(proc)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            doc = stats(redis_db_url, prefix)
            if doc["totals"]["traces"] >= expected_traces and doc["dlq"] >= expected_dlq:
                break
            time.sleep(1)
        proc.terminate()
        proc.wait(timeout=30)
        doc = stats(redis_db_url, prefix)
        assert (doc["totals"]["traces"], doc["dlq"]) == (expected_traces, expected_dlq), \
            log.read_text(errors="replace")[-3000:]

    yield run
    for proc in procs:
        if proc.poll() is None:
            proc.kill()


def test_list_export_and_redrive_the_dlq(kafka_bootstrap: str, unique_topic: Any, redis_db_url: str,
                                         worker_run: Any, tmp_path: Path) -> None:
    topic, dlq = unique_topic(partitions=2), unique_topic(partitions=1)
    prefix = f"dlq{uuid.uuid4().hex[:8]}"
    records = list(generate(Scenario(rate_per_second=10, duration_seconds=20, start_ts=time.time() - 600, seed=5)))
    valid, padded = records[:150], records[150:180]
    for record in padded:     # valid traces, but over the first worker's record limit
        record["tags"] = {f"note{i}": "x" * 200 for i in range(3)}
    bad = [b'{"trace_id": "b1", "release": "r1", "outcome": "bogus", "outcome": "success", "ts": 1796110000}',
           b"not json at all", json.dumps({**records[0], "trace_id": "neg", "tokens_in": -3}).encode()]
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for record in [*valid, *padded]:
        producer.send(topic, json.dumps(record).encode())
    for value in bad:
        producer.send(topic, value)
    producer.flush()
    producer.close()

    worker_run(topic, dlq, prefix, len(valid), len(padded) + len(bad), "--max-record-bytes", str(MAX_RECORD_BYTES))

    common = ["--bootstrap", kafka_bootstrap, "--dlq-topic", dlq]
    lines = fleetmon("dlq", "list", *common, "--json").stdout.splitlines()
    entries, summary = [json.loads(line) for line in lines[:-1]], json.loads(lines[-1])["summary"]
    assert len(entries) == summary["records"] == summary["sources"] == len(padded) + len(bad)
    assert {e["source"]["topic"] for e in entries} == {topic}
    oversized = [k for k in summary["reasons"] if "-byte limit" in k]
    assert len(oversized) == 1 and summary["reasons"][oversized[0]] == len(padded)
    assert any("appears more than once" in r for e in entries for r in e["reasons"])
    assert any("tokens_in" in r for e in entries for r in e["reasons"])
    text = fleetmon("dlq", "list", *common, "--reason", "tokens_in", "--limit", "5").stdout
    assert "reason: tokens_in" in text and "1 DLQ record(s)" in text

    out = tmp_path / "fix-me.jsonl"
    fleetmon("dlq", "export", *common, "--reason", "tokens_in|more than once", "-o", out)
    assert len(out.read_text().splitlines()) == 2

    dry = json.loads(fleetmon("dlq", "redrive", *common, "--topic", topic, "--dry-run", "--json").stdout)
    assert (dry["would_send"], dry["still_invalid"]) == (len(padded), len(bad))
    sent = json.loads(fleetmon("dlq", "redrive", *common, "--topic", topic, "--json").stdout)
    assert (sent["sent"], sent["still_invalid"]) == (len(padded), len(bad))

    # a worker with the default limit counts the re-driven traces exactly once; nothing new is dead-lettered
    worker_run(topic, dlq, prefix, len(valid) + len(padded), len(padded) + len(bad))


def test_dlq_commands_name_a_missing_topic(kafka_bootstrap: str) -> None:
    proc = fleetmon("dlq", "list", "--bootstrap", kafka_bootstrap, "--dlq-topic", f"missing.{uuid.uuid4().hex}",
                    check=False)
    assert proc.returncode == 3 and "does not exist" in proc.stderr


def test_dlq_bad_arguments_exit_2(kafka_bootstrap: str) -> None:
    proc = fleetmon("dlq", "list", "--bootstrap", kafka_bootstrap, "--reason", "(", check=False)
    assert proc.returncode == 2 and "--reason" in proc.stderr
    proc = fleetmon("dlq", "list", "--bootstrap", kafka_bootstrap, "--since", "soon", check=False)
    assert proc.returncode == 2
