"""A private six-node Redis Cluster for tests that kill masters (never the one services.sh starts).

Three masters and three replicas of the Debian ``redis-server`` on free ports (each with its bus port,
port + 10000, free too), persistence off, ``cluster-node-timeout`` short so that a SIGKILLed master's
replica is promoted within seconds, created with ``redis-cli --cluster create --cluster-replicas 1``.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis
from redis.cluster import RedisCluster

START_TIMEOUT_SECONDS = 30.0
NODE_TIMEOUT_MS = 2000


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> list[int]:
    """``n`` free ports whose cluster bus ports (+10000) are free too."""
    found: list[int] = []
    while len(found) < n:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port < 55_000 and port not in found and _free(port + 10_000):
            found.append(port)
    return found


def cluster_info(port: int) -> dict[str, str]:
    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=5) as client:
        return {k: str(v) for k, v in client.cluster("INFO").items()}


class RedisClusterNodes:
    """Six ``redis-server --cluster-enabled yes`` processes under ``directory``."""

    def __init__(self, directory: Path, nodes: int = 6) -> None:
        self.directory = Path(directory)
        self.ports = free_ports(nodes)
        self.procs: dict[int, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def client(self) -> RedisCluster:
        return RedisCluster(host="127.0.0.1", port=self.ports[0], socket_timeout=10)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)

    def start_node(self, port: int) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed (Debian package redis-server)")
        directory = self.directory / str(port)
        directory.mkdir(parents=True, exist_ok=True)
        args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no",
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--cluster-replica-validity-factor", "0",
                "--cluster-require-full-coverage", "no", "--logfile", str(directory / "redis.log")]
        self.procs[port] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.procs[port].poll() is not None:
                raise RuntimeError(f"redis-server on {port} exited: {self.log_tail(port)}")
            try:
                with self.node(port) as client:
                    if client.ping():
                        return
            except (redis.ConnectionError, redis.BusyLoadingError):
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on {port} did not answer: {self.log_tail(port)}")

    def start(self) -> RedisClusterNodes:
        for port in self.ports:
            self.start_node(port)
        create = subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                                 "--cluster-replicas", "1", "--cluster-yes"],
                                capture_output=True, text=True, timeout=120, check=False)
        if create.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {create.stdout}{create.stderr}")
        self.wait_ok()
        return self

    def wait_ok(self, timeout: float = 60) -> None:
        """Until every live node says ``cluster_state:ok`` and knows three masters with slots."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if all(cluster_info(p).get("cluster_state") == "ok" for p in self.live()) and \
                        len(self.masters()) == 3:
                    return
            except redis.RedisError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the cluster did not become ok within {timeout} s")

    def live(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def masters(self) -> dict[int, list[int]]:
        """Master port → the slot starts it serves (as a live node sees it)."""
        with self.node(self.live()[0]) as client:
            slots = client.execute_command("CLUSTER", "SLOTS")
        out: dict[int, list[int]] = {}
        for row in slots:
            out.setdefault(int(row[2][1]), []).append(int(row[0]))
        return out

    def master_of(self, key: str) -> int:
        with self.node(self.live()[0]) as client:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            rows = client.execute_command("CLUSTER", "SLOTS")
        return next(int(row[2][1]) for row in rows if int(row[0]) <= slot <= int(row[1]))

    def replica_of(self, master: int) -> int:
        with self.node(master) as client:
            info = client.info("replication")
        return int(info["slave0"]["port"])

    def signal(self, port: int, sig: signal.Signals) -> None:
        self.procs[port].send_signal(sig)

    def kill(self, port: int) -> None:
        proc = self.procs[port]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)

    def wait_master(self, port: int, timeout: float = 60) -> None:
        """Until ``port`` says it is a master (a promoted replica)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with self.node(port) as client:
                    if client.info("replication")["role"] == "master":
                        return
            except redis.RedisError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"node {port} was not promoted within {timeout} s")

    def read(self, port: int, *command: str, timeout: float = 30) -> dict:
        """``command`` (a hash read) on node ``port``, asked again while the node says the cluster is down
        (a replica just resumed or promoted answers CLUSTERDOWN until it has heard from the others)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.node(port) as client:
                    return client.execute_command(*command)
            except (redis.ResponseError, redis.ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=30)

    def log_tail(self, port: int, chars: int = 2000) -> str:
        log = self.directory / str(port) / "redis.log"
        return log.read_text(errors="replace")[-chars:] if log.exists() else ""
