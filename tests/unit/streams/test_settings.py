"""Worker settings: flag > environment > config file > default."""

import argparse

import pytest

from streams.settings import add_connection_flags, add_pipeline_flags, settings_from


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
    with pytest.raises(ValueError, match="kafka.bootstrap"):
        parse([], {"FLEETMON_KAFKA_BOOTSTRAP": "no-port"})


def test_describe_masks_the_redis_password():
    s = parse(["--redis", "redis://:hunter2@r:6379/0"])
    assert "hunter2" not in repr(s.describe())


def test_pairing_follows_the_config_and_can_be_turned_off():
    assert parse([]).pair_ttl_seconds == 3600
    assert parse([], {"FLEETMON_ALERTS_PAIR_TTL": "30m"}).pair_ttl_seconds == 1800
    assert parse(["--pair-ttl", "2h"]).pair_ttl_seconds == 7200
    assert parse(["--no-pairing"]).pair_ttl_seconds is None
