"""``fleetmon run --headless`` end to end, as a newcomer runs it (a real subprocess, real HTTP)."""

import json
import subprocess
import sys
import time
import urllib.request

import pytest

FLEETMON = [sys.executable, "-m", "monitor.cli.main"]


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*args, timeout=120):
    return subprocess.run([*FLEETMON, "run", "--headless", "--port", str(free_port()), *args],
                          capture_output=True, text=True, timeout=timeout)


def json_lines(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_default_scenario_pages_with_evidence():
    # The default scenario (baseline + shadow, regression after 60 s) at 20x speed.
    result = run("--speed", "20", "--duration", "15")
    assert result.returncode == 0, result.stderr
    events = json_lines(result.stdout)
    firing = [e for e in events if e["status"] == "firing" and e["alertname"] == "FleetmonSuccessRegression"]
    assert firing, result.stderr
    event = firing[0]
    for key in ("ts", "status", "alertname", "labels", "annotations", "evidence"):
        assert key in event
    evidence = event["evidence"]
    assert evidence["candidate_release"] == "support-v2" and evidence["baseline_release"] == "support-v1"
    assert evidence["b"] > evidence["c"] and evidence["effect"] > evidence["floor"]
    assert evidence["e_value"] >= 1 / evidence["alpha"]
    assert event["annotations"]["runbook_url"].endswith("#fleetmonsuccessregression")
    assert "alert(s) fired" in result.stderr


def test_aa_input_file_produces_no_alert(tmp_path):
    path = tmp_path / "aa.jsonl"
    made = subprocess.run([*FLEETMON, "simulate", "--sim-duration", "900", "--rate", "20", "--regression-at", "-1",
                           "--start", "1767225600", "--seed", "4", "-o", str(path)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    result = run("--input", str(path))
    assert result.returncode == 0, result.stderr
    assert json_lines(result.stdout) == []
    assert "36000 traces" in result.stderr and "0 alert(s) fired" in result.stderr


def test_regressed_input_file_pages_in_event_time(tmp_path):
    path = tmp_path / "reg.jsonl"
    subprocess.run([*FLEETMON, "simulate", "--sim-duration", "600", "--rate", "20", "--start", "1767225600",
                    "-o", str(path)], check=True)
    lines = path.read_text().splitlines()
    lines.insert(10, "this is not json")
    lines.insert(20, json.dumps({"trace_id": "x", "ts": 1767225601, "model_id": "m", "ok": True, "tokens_in": -5}))
    path.write_text("\n".join(lines) + "\n")
    result = run("--input", str(path))
    assert result.returncode == 0
    events = json_lines(result.stdout)
    assert any(e["status"] == "firing" for e in events)
    first = min(e["ts"] for e in events)
    assert 1767225600 + 60 < first < 1767225600 + 300  # after the regression starts, within minutes
    assert "2 invalid" in result.stderr
    assert "line 11 of" in result.stderr and "not valid JSON" in result.stderr
    assert "tokens_in must be an integer >= 0, got -5" in result.stderr


def test_metrics_and_healthz_are_served_while_running():
    port = free_port()
    proc = subprocess.Popen([*FLEETMON, "run", "--headless", "--port", str(port), "--speed", "10", "--duration", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 15
        body = ""
        while time.monotonic() < deadline:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                if "fleetmon_traces_total" in body and "fleetmon_comparison_e_value" in body:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert "fleetmon_traces_total" in body and "fleetmon_comparison_e_value" in body
        health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read())
        assert health["status"] == "ok" and health["traces"] > 0
        from prometheus_client.parser import text_string_to_metric_families
        assert {f.name for f in text_string_to_metric_families(body)} >= {"fleetmon_traces", "fleetmon_success_ratio"}
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


@pytest.mark.parametrize("text,needle", [
    ("[alerts]\nalpha = 2\n", "alerts.alpha must be in (0, 1), got 2.0"),
    ("[redis]\nurl = 'mysql://x'\n", "redis.url must start with redis://"),
])
def test_bad_config_is_rejected_with_a_named_error(tmp_path, text, needle):
    config = tmp_path / "fleetmon.toml"
    config.write_text(text)
    result = run("--config", str(config), "--duration", "1")
    assert result.returncode == 2 and needle in result.stderr
    check = subprocess.run([*FLEETMON, "config", "check", str(config)], capture_output=True, text=True)
    assert check.returncode == 2 and needle in check.stderr


def test_config_check_accepts_the_shipped_file_and_hides_secrets():
    result = subprocess.run([*FLEETMON, "config", "check", "fleetmon.toml", "--show"], capture_output=True, text=True,
                            env={"FLEETMON_NOTIFIERS_WEBHOOK_SECRET": "sekrit", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert "sekrit" not in result.stdout and '"webhook_secret": "***"' in result.stdout
