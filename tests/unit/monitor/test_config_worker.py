"""Worker settings ([worker] and the streaming flags): flag > environment > config file > default."""

import argparse

import pytest

from monitor.cli.worker_flags import add_connection_flags, add_pipeline_flags, settings_from
from monitor.config import ConfigError, load


def parse(argv, environ=None):
    parser = argparse.ArgumentParser()
    add_connection_flags(parser)
    add_pipeline_flags(parser)
    return settings_from(parser.parse_args(argv), environ=environ or {})


def test_defaults():
    s = parse([])
    assert (s.bootstrap, s.redis_url, s.topic, s.dlq_topic, s.group_id, s.prefix) == (
        "localhost:9092", "redis://localhost:6379/0", "fleetmon.traces", "fleetmon.traces.dlq", "fleetmon", "fleetmon")
    assert s.dimensions == ("release", "arm", "task_type", "tenant", "locale")
    assert s.max_slice_values == 100
    assert [(r.name, r.size_seconds, r.retention_seconds) for r in s.resolutions] == [
        ("1m", 60, 48 * 3600), ("1h", 3600, 35 * 86400)]


def test_environment_then_flags_override():
    env = {"FLEETMON_KAFKA_BOOTSTRAP": "k1:9092,k2:9092", "FLEETMON_REDIS_URL": "redis://r:6379/2",
           "FLEETMON_SLICES_MAX_VALUES": "7", "FLEETMON_WINDOWS_MINUTE_RETENTION": "2h",
           "FLEETMON_WORKER_BATCH_MAX_RECORDS": "1000"}
    s = parse([], env)
    assert (s.bootstrap, s.redis_url, s.max_slice_values, s.batch_max_records) == (
        "k1:9092,k2:9092", "redis://r:6379/2", 7, 1000)
    assert s.resolutions[0].retention_seconds == 7200
    s = parse(["--bootstrap", "k3:9092", "--redis", "redis://other/0", "--max-slice-values", "3",
               "--dimensions", "tenant,release", "--minute-retention", "1h", "--batch-max-records", "50",
               "--group-id", "g2", "--prefix", "p2"], env)
    assert (s.bootstrap, s.redis_url, s.max_slice_values, s.batch_max_records, s.group_id, s.prefix) == (
        "k3:9092", "redis://other/0", 3, 50, "g2", "p2")
    assert s.dimensions == ("tenant", "release")
    assert s.resolutions[0].retention_seconds == 3600


def test_bad_values_name_the_setting():
    with pytest.raises(ValueError, match="FLEETMON_WORKER_BATCH_MAX_RECORDS: batch max records must be"):
        parse([], {"FLEETMON_WORKER_BATCH_MAX_RECORDS": "lots"})
    with pytest.raises(ValueError, match="--dimensions must be distinct"):
        parse(["--dimensions", "tenant,tenant"])
    with pytest.raises(ValueError, match="window retention"):
        parse(["--minute-retention", "soon"])
    with pytest.raises(ValueError, match=r"kafka\.bootstrap"):
        parse([], {"FLEETMON_KAFKA_BOOTSTRAP": "no-port"})


def test_describe_masks_the_redis_password():
    s = parse(["--redis", "redis://:hunter2@r:6379/0"])
    assert "hunter2" not in repr(s.describe())


def test_pairing_follows_the_config_and_can_be_turned_off():
    assert parse([]).pair_ttl_seconds == 3600
    assert parse([], {"FLEETMON_ALERTS_PAIR_TTL": "30m"}).pair_ttl_seconds == 1800
    assert parse(["--pair-ttl", "2h"]).pair_ttl_seconds == 7200
    assert parse(["--no-pairing"]).pair_ttl_seconds is None


def test_the_worker_section_of_the_file_is_read_and_the_environment_and_flags_win(tmp_path):
    path = tmp_path / "fleetmon.toml"
    path.write_text("[worker]\nbatch_max_records = 500\nnative = false\nsession_timeout = 4.5\n")
    s = parse(["--config", str(path)])
    assert (s.batch_max_records, s.native, s.session_timeout_seconds) == (500, False, 4.5)
    s = parse(["--config", str(path)], {"FLEETMON_WORKER_BATCH_MAX_RECORDS": "600", "FLEETMON_WORKER_NATIVE": "on"})
    assert (s.batch_max_records, s.native) == (600, True)
    assert parse(["--config", str(path), "--batch-max-records", "7"], {}).batch_max_records == 7


def test_an_empty_worker_variable_is_ignored_and_a_bad_file_value_is_named(tmp_path):
    assert parse([], {"FLEETMON_WORKER_PARTITIONS": ""}).partitions == 4
    path = tmp_path / "fleetmon.toml"
    path.write_text("[worker]\npartitions = 0\n")
    with pytest.raises(ConfigError, match=r"worker\.partitions must be a number > 0, got 0"):
        load(path, env={})
    with pytest.raises(ValueError, match="--batch-within-seconds: batch within must be a number > 0"):
        parse(["--batch-within", "0"])


def test_native_threads_is_checked_and_reaches_the_worker(tmp_path):
    with pytest.raises(ValueError, match="FLEETMON_WORKER_NATIVE_THREADS: native threads must be a number > 0, "
                                         "got '0'"):
        load(env={"FLEETMON_WORKER_NATIVE_THREADS": "0"})
    path = tmp_path / "fleetmon.toml"
    path.write_text("[worker]\nnative_threads = 0\n")
    with pytest.raises(ConfigError, match=r"worker\.native_threads must be a number > 0, got 0"):
        load(path, env={})
    assert settings_from(None, {"FLEETMON_WORKER_NATIVE_THREADS": "3"}).native_threads == 3
    assert settings_from(None, {}).native_threads == 1
