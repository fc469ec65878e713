"""``fleetmon simulate --kafka --config``: the servers, topic and security settings come from the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer

from tests.support.paths import ROOT


def test_simulate_sends_to_the_kafka_its_config_names(kafka_bootstrap: str, unique_topic: Any,
                                                      tmp_path: Path) -> None:
    topic = unique_topic(partitions=1)
    config = tmp_path / "fleetmon.toml"
    config.write_text(f'[kafka]\nbootstrap = "{kafka_bootstrap}"\ntopic = "{topic}"\n')
    proc = subprocess.run([sys.executable, "-m", "monitor.cli.main", "simulate", "--kafka", "--config", str(config),
                           "--rate", "20", "--sim-duration", "3"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sent = int(proc.stderr.split("sent ")[1].split(" ")[0])
    assert f"to {topic} at {kafka_bootstrap}" in proc.stderr and sent > 0
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, group_id=None)
    assert sum(1 for _ in consumer) == sent
    consumer.close()
