"""A private ``redis-server`` for tests and benches that kill, restart or roll back Redis.

Never the shared one on 6379: each :class:`RedisServer` runs the Debian ``redis-server`` binary on a
free port with its own directory, so a test can SIGKILL it, restart it on the same port (the
workers' URL stays valid) and swap its append-only files for an older copy (a forced rollback).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

START_TIMEOUT_SECONDS = 20.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process under ``directory``.

    ``appendonly``: persistence off (no RDB snapshots, no AOF: a restart comes back empty) or
    ``appendonly yes`` with ``appendfsync everysec`` (AOF rewrites off, so the files only grow
    and a copy of them is a consistent earlier state once Redis drops a truncated tail).
    """

    def __init__(self, directory: Path, *, appendonly: bool = False, port: int | None = None,
                 binary: str = "redis-server") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.appendonly = appendonly
        self.port = port or free_port()
        self.binary = binary
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def aof_dir(self) -> Path:
        return self.directory / "appendonlydir"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)

    def start(self) -> RedisServer:
        if shutil.which(self.binary) is None:
            raise RuntimeError(f"{self.binary} is not installed (Debian package redis-server)")
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
                "--save", "", "--daemonize", "no", "--protected-mode", "no",
                "--logfile", str(self.directory / f"redis-{self.starts}.log")]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0",
                     "--aof-load-truncated", "yes"]
        else:
            args += ["--appendonly", "no"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with self.client() as client:
                    if client.ping():
                        return self
            except (redis.ConnectionError, redis.BusyLoadingError):
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not answer within {START_TIMEOUT_SECONDS} s: "
                           f"{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: nothing is flushed (with persistence off, everything is gone)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def snapshot_aof(self, into: Path) -> Path:
        """Copy the append-only files as they are now (the copy may end mid-command: Redis drops that tail)."""
        if not self.appendonly:
            raise RuntimeError("snapshot_aof needs appendonly=True")
        shutil.copytree(self.aof_dir, into)
        return into

    def restore_aof(self, snapshot: Path) -> None:
        """Replace the append-only files with ``snapshot`` (Redis must be stopped)."""
        if self.proc is not None:
            raise RuntimeError("stop or kill redis-server before replacing its files")
        shutil.rmtree(self.aof_dir, ignore_errors=True)
        shutil.copytree(snapshot, self.aof_dir)

    def used_memory(self) -> int:
        with self.client() as client:
            return int(client.info("memory")["used_memory"])

    def log_tail(self, chars: int = 2000) -> str:
        logs = sorted(self.directory.glob("redis-*.log"))
        return logs[-1].read_text(errors="replace")[-chars:] if logs else ""
