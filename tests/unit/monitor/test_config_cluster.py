"""redis.cluster in fleetmon.toml and FLEETMON_REDIS_CLUSTER (monitor/config.py), and where it leads."""

from __future__ import annotations

import pytest

from monitor.config import ConfigError, load
from monitor.worker_settings import worker_settings


def test_cluster_is_off_by_default_and_on_from_the_file_or_the_environment(tmp_path):
    assert load(env={}).redis.cluster is False
    toml = tmp_path / "fleetmon.toml"
    toml.write_text('[redis]\nurl = "redis://127.0.0.1:7000/0"\ncluster = true\n')
    config = load(toml, env={})
    assert config.redis.cluster is True and worker_settings(config).redis_cluster is True
    assert load(toml, env={"FLEETMON_REDIS_CLUSTER": "false"}).redis.cluster is False
    assert load(env={"FLEETMON_REDIS_CLUSTER": "1"}).redis.cluster is True
    assert load(env={"FLEETMON_REDIS_CLUSTER": "true"}).redis.cluster is True


def test_a_bad_cluster_value_names_the_key():
    with pytest.raises(ConfigError, match=r"FLEETMON_REDIS_CLUSTER \(redis\.cluster\) must be true or false"):
        load(env={"FLEETMON_REDIS_CLUSTER": "maybe"})


def test_a_cluster_prefix_cannot_hold_hash_tag_braces():
    load(env={"FLEETMON_REDIS_PREFIX": "fm{x}"})  # one Redis: any prefix without spaces
    with pytest.raises(ConfigError, match=r"redis\.prefix must be without '\{' or '\}'.*got 'fm\{x\}'"):
        load(env={"FLEETMON_REDIS_PREFIX": "fm{x}", "FLEETMON_REDIS_CLUSTER": "1"})
    with pytest.raises(ConfigError, match=r"redis\.url must be a redis:// or rediss:// node address"):
        load(env={"FLEETMON_REDIS_URL": "unix:///tmp/redis.sock", "FLEETMON_REDIS_CLUSTER": "1"})
