"""``check --dask ADDRESS``: the scheduler reached, or one line within seconds.

Dask's own client takes 30 s to give up on a refused port, waits forever on a service that accepts
the connection and never answers (its handshake read has no time limit), reads the first bytes of
any other service (an HTTP server) as a frame length and runs out of memory allocating it, and
raises ``ValueError`` for an address it cannot parse. So before a :class:`distributed.Client` is
made, the address is parsed, a plain TCP connection tried (refused or unresolvable: at once), and
Dask's handshake run under a deadline of ``timeout`` seconds (``--dask-timeout``). Each failure is
a :class:`~nsys_rules.errors.UsageError`: the value of ``--dask`` does not name a scheduler.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from nsys_rules.errors import UsageError
from nsys_rules.textsafe import clip_value

#: Seconds to reach a scheduler and finish Dask's handshake (``--dask-timeout``); a scheduler on the
#: same network answers in milliseconds.
DEFAULT_DASK_TIMEOUT = 10.0

#: Schemes whose location is host:port over TCP (a plain connection can be tried first).
_TCP_SCHEMES = ("tcp", "tls", "ws", "wss")


def connect_client(address: str, timeout: float = DEFAULT_DASK_TIMEOUT) -> Any:
    """A ``distributed.Client`` of the scheduler at ``address``; :class:`UsageError` within about ``timeout`` s."""
    from dask.distributed import Client

    shown = clip_value(address, 200)
    scheme, host, port = _parse(address, shown)
    if scheme in _TCP_SCHEMES:
        _try_tcp(host, port, timeout, shown)
    with _quiet_dask():
        _handshake(address, timeout, shown)
        try:
            return Client(address, timeout=f"{timeout}s")
        except (OSError, TimeoutError) as exc:
            raise UsageError(f"--dask {shown}: cannot reach the scheduler ({clip_value(exc, 300)})") from None
        except Exception as exc:  # noqa: BLE001 - whatever answered is not a usable scheduler: one line, not a traceback
            raise UsageError(f"--dask {shown}: not a Dask scheduler ({type(exc).__name__}: {clip_value(exc, 200)})"
                             ) from None


def _parse(address: str, shown: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a Dask address; host and port empty for schemes without them (inproc)."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    if not address.strip():
        raise UsageError("--dask needs a scheduler address (tcp://host:8786) or 'local'")
    if any(ch.isdigit() and not ch.isascii() for ch in address):  # int() reads ':٨٧٨٦' as port 8786
        raise UsageError(f"--dask {shown}: write the address's numbers in ASCII digits")
    try:
        scheme, location = parse_address(address, strict=False)
        get_backend(scheme)
        if scheme not in _TCP_SCHEMES:
            return scheme, "", None
        host, port = parse_host_port(location, default_port=8786)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--dask {shown}: not a scheduler address, such as tcp://host:8786 or 'local' "
                         f"({clip_value(exc, 200)})") from None
    if not 0 < int(port) < 65536:
        raise UsageError(f"--dask {shown}: port {port} is not a TCP port (1-65535)")
    return scheme, host, int(port)


def _try_tcp(host: str, port: int | None, timeout: float, shown: str) -> None:
    """A plain connection: a refused port or an unknown host fail here at once, not after Dask's retries."""
    try:
        with socket.create_connection((host, port or 8786), timeout=timeout):
            pass
    except socket.gaierror as exc:
        raise UsageError(f"--dask {shown}: cannot resolve host {clip_value(host, 100)!r} ({exc.strerror or exc})") from None
    except TimeoutError:
        raise UsageError(f"--dask {shown}: no answer within {timeout:g} s (--dask-timeout)") from None
    except OSError as exc:
        raise UsageError(f"--dask {shown}: cannot reach the scheduler ({exc.strerror or exc})") from None


def _handshake(address: str, timeout: float, shown: str) -> None:
    """Dask's connection handshake with ``address``, ended after ``timeout`` seconds whatever the other side does."""
    from distributed.comm import connect

    async def probe() -> None:
        comm = await connect(address, timeout=timeout)
        await comm.close()

    try:
        asyncio.run(asyncio.wait_for(probe(), timeout))
    except (asyncio.TimeoutError, TimeoutError):
        raise UsageError(f"--dask {shown}: no Dask answer within {timeout:g} s (--dask-timeout); is it a Dask "
                         "scheduler's address?") from None
    except MemoryError:
        # Dask read the other side's first bytes as the length of a message: not Dask's protocol.
        raise UsageError(f"--dask {shown}: not a Dask scheduler (its answer is not Dask's protocol)") from None
    except OSError as exc:
        raise UsageError(f"--dask {shown}: cannot reach the scheduler ({clip_value(exc, 300)})") from None
    except Exception as exc:  # noqa: BLE001 - any other failure of the handshake: the address serves no Dask
        raise UsageError(f"--dask {shown}: not a Dask scheduler ({type(exc).__name__}: {clip_value(exc, 200)})"
                         ) from None


class _quiet_dask:
    """Dask's loggers silenced while connecting: each failure above is our one line, not theirs too."""

    def __enter__(self) -> None:
        self._logger = logging.getLogger("distributed")
        self._level = self._logger.level
        self._logger.setLevel(logging.CRITICAL + 1)

    def __exit__(self, *exc: object) -> None:
        self._logger.setLevel(self._level)
