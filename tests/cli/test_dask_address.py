"""``check --dask ADDRESS`` at something that is no scheduler: exit 2 and one line, within --dask-timeout.

Dask's client alone took 30 s on a refused port, waited forever on a service that never answers,
ran out of memory on one that answers in another protocol (exit 3, "out of memory"), and raised
ValueError (exit 4) on an address it could not parse.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.conftest import EXAMPLE
from tests.fuzz.harness import run_cli_inprocess

pytest.importorskip("dask.distributed", reason="dask[distributed] is not installed")

E = str(EXAMPLE)
#: Far above the few seconds these take, far below the hangs and 30 s waits they replace.
HANG = 25.0


def _one_line_exit_2(run) -> str:
    assert run.code == 2, (run.code, run.stderr[-800:])
    assert run.stdout == "" and "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nsys-rules: --dask"), run.stderr[-800:]
    return lines[0]


def _dask(address: str, *extra: str):
    started = time.monotonic()
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", "--dask", address, *extra, E)
    return run, time.monotonic() - started


class _Server:
    """A TCP service on a free local port that is not Dask: ``silent`` accepts and never answers, ``http``
    answers every connection with an HTTP error."""

    def __init__(self, kind: str) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.kind = kind
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            if self.kind == "http":
                try:
                    conn.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 8)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def server(request):
    srv = _Server(request.param)
    yield srv
    srv.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_refused_port_fails_at_once():
    run, took = _dask(f"tcp://127.0.0.1:{_free_port()}")
    assert "cannot reach the scheduler (Connection refused)" in _one_line_exit_2(run)
    assert took < HANG


@pytest.mark.parametrize("server", ["silent"], indirect=True)
def test_a_service_that_never_answers_ends_at_the_timeout(server):
    run, took = _dask(f"tcp://127.0.0.1:{server.port}", "--dask-timeout", "1")
    assert "no Dask answer within 1 s (--dask-timeout)" in _one_line_exit_2(run)
    assert took < HANG


@pytest.mark.parametrize("server", ["http"], indirect=True)
def test_a_service_of_another_protocol_is_no_scheduler_not_out_of_memory(server):
    run, took = _dask(f"tcp://127.0.0.1:{server.port}", "--dask-timeout", "3")
    line = _one_line_exit_2(run)
    assert "out of memory" not in line and ("not a Dask scheduler" in line or "cannot reach" in line), line
    assert took < HANG


@pytest.mark.parametrize(("address", "says"), [
    ("nonsense://x", "not a scheduler address"),
    ("tcp://127.0.0.1:notaport", "not a scheduler address"),
    ("tcp://[::1", "not a scheduler address"),
    ("tcp://127.0.0.1:99999", "is not a TCP port"),
    ("tcp://127.0.0.1:٨٧٨٦", "in ASCII digits"),
    ("tcp://host.invalid:8786", "cannot resolve host"),
    ("", "needs a scheduler address"),
    (" ", "needs a scheduler address"),
])
def test_a_bad_address_is_a_usage_error(address, says):
    run, _ = _dask(address)
    assert says in _one_line_exit_2(run)


@pytest.mark.parametrize("value", ["0", "nan", "-1", "١", "soon"])
def test_a_bad_timeout_is_a_usage_error(value):
    run = run_cli_inprocess("check", "--no-plugins", "--dask", "tcp://127.0.0.1:1", "--dask-timeout", value, E)
    assert run.code == 2 and run.stderr.startswith("nsys-rules: --dask-timeout:") and run.stderr.count("\n") == 1


def test_a_real_scheduler_is_reached_through_the_same_checks():
    from dask.distributed import LocalCluster

    from nsys_rules.dask_connect import connect_client

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        client = connect_client(cluster.scheduler_address, timeout=10)
        try:
            assert client.submit(sum, [1, 2, 3]).result(timeout=30) == 6
        finally:
            client.close()
