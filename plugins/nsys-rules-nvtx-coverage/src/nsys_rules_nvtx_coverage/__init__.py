"""nsys-rules plugin: NVTX coverage of GPU work (rule ``nvtx-coverage``)."""

from __future__ import annotations

__version__ = "0.1.0"
