"""How the exporter's reads travel: the commands the Wire packs itself are the bytes redis-py would send."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.connection import Connection

from monitor.store.redis.wire import Scripts, Wire, resp_command

ARGUMENTS = st.one_of(st.text(max_size=40), st.integers(), st.binary(max_size=40))


@settings(max_examples=300, deadline=None)
@given(st.lists(ARGUMENTS, max_size=60))
def test_a_packed_command_is_what_redis_py_packs(args):
    command = ("EVALSHA", "f" * 40, len(args), *args)
    want = b"".join(bytes(part) for part in Connection().pack_command(*command))
    assert resp_command(command) == want


def test_a_large_command_is_packed_as_redis_py_packs_it_in_chunks():
    command = ("EVALSHA", "f" * 40, 3, "k" * 10_000, b"\x00" * 7000, 2**70, *range(-5, 3000))
    assert resp_command(command) == b"".join(bytes(part) for part in Connection().pack_command(*command))


@pytest.mark.parametrize("odd", [1.5, True, None, bytearray(b"x"), memoryview(b"x")])
def test_any_other_argument_type_is_left_to_the_client(odd):
    assert resp_command(("EVALSHA", "f" * 40, 1, "key", odd)) is None  # the client packs (or refuses) it


def test_a_text_is_encoded_as_the_client_encodes_it():
    command = ("EVALSHA", "sha", 1, "clé")
    latin = Connection(encoding="latin-1").pack_command(*command)
    assert resp_command(command, "latin-1") == b"".join(bytes(part) for part in latin)
    with pytest.raises(UnicodeEncodeError):
        resp_command(("EVALSHA", "sha", 1, "\u20ac"), "latin-1")  # as the client's encoder raises


class _Recording(Connection):
    """A connection that records what it would write (no socket)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[bytes] = []

    def send_packed_command(self, command, check_health=True):
        assert isinstance(command, list)  # redis-py writes each item of a list (a bytes would go out int by int)
        self.sent.extend(bytes(item) for item in command)


class _Script:
    sha = "f" * 40


def test_the_wire_sends_what_the_client_would_send():
    scripts = Scripts.__new__(Scripts)
    scripts.by_name = {"counts": _Script()}
    connection = _Recording()
    wire = Wire(scripts, connection, pool=None)
    wire.send("counts", ["k1", "k2"], [3, "v", b"raw"])
    assert b"".join(connection.sent) == b"".join(
        bytes(part) for part in Connection().pack_command("EVALSHA", "f" * 40, 2, "k1", "k2", 3, "v", b"raw"))
    connection.sent.clear()
    wire.send("counts", ["k1"], [1.5])  # a type it does not pack: the client's own packing
    assert b"".join(connection.sent) == b"".join(
        bytes(part) for part in Connection().pack_command("EVALSHA", "f" * 40, 1, "k1", 1.5))
