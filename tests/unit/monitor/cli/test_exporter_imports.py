"""The exporter command's process carries no numpy or scipy (~27 MB resident between them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CODE = """
import sys
from monitor.cli.main import main
rc = main(["exporter", "--redis", "nope://127.0.0.1:1", "--port", "0"])  # every import done, then a bad URL
print(rc, sorted(m for m in ("numpy", "scipy", "alerts.engine", "monitor.stats.capped_mean") if m in sys.modules))
"""


def test_the_exporter_command_loads_neither_numpy_nor_the_alert_engine() -> None:
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[4])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2 []", done.stdout + done.stderr
