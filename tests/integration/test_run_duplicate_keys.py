"""``fleetmon run --kafka`` decodes records like the worker: a repeated JSON key is invalid, not the last value."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Any

from kafka import KafkaProducer

from monitor.run.simulate import Scenario, generate
from tests.support.paths import ROOT


def test_run_from_kafka_rejects_duplicate_keys(kafka_bootstrap: str, unique_topic: Any) -> None:
    topic = unique_topic(partitions=1)
    good = list(generate(Scenario(rate_per_second=2, duration_seconds=2, start_ts=time.time() - 30, seed=3)))
    dup = json.dumps(good[0]).replace('"outcome": ', '"outcome": "bogus", "outcome": ', 1)
    assert dup.count('"outcome"') == 2
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for value in [*(json.dumps(r) for r in good), dup]:
        producer.send(topic, value.encode())
    producer.flush()
    producer.close()
    env = {**os.environ, "FLEETMON_KAFKA_TOPIC": topic, "FLEETMON_KAFKA_GROUP_ID": f"g-{topic}"}
    proc = subprocess.run([sys.executable, "-m", "monitor.cli.main", "run", "--kafka", kafka_bootstrap, "--headless",
                           "--duration", "15", "--port", "0"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = re.search(r"(\d+) traces over .*?, (\d+) invalid", proc.stderr)
    assert summary, proc.stderr[-3000:]
    assert (int(summary.group(1)), int(summary.group(2))) == (len(good), 1)
    assert "appears more than once" in proc.stderr
