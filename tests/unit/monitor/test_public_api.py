"""The names ``monitor`` exports resolve, and importing the package loads no Kafka client."""

import subprocess
import sys

import monitor


def test_every_public_name_resolves():
    for name in monitor.__all__:
        assert getattr(monitor, name).__name__ == name


def test_importing_monitor_loads_nothing_heavy():
    code = "import sys, monitor; print(sorted(m for m in ('kafka', 'redis', 'scipy', 'faust') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
