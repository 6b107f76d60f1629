"""Fake ``nsys``, ``nvidia-smi`` and ``ldd`` on a private PATH, for the profile and doctor tests."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from nsys_rules import nsys_locate, nsys_status
from nsys_rules.commands import doctor

FAKE_NSYS = Path(__file__).with_name("fake_nsys.py")


@dataclass
class FakeTools:
    """The private bin folder (the whole PATH), the fake nsys in it, and its call log."""

    bin: Path
    log: Path
    work: Path

    @property
    def nsys(self) -> Path:
        return self.bin / "nsys"

    def calls(self) -> list[list[str]]:
        """Each nsys invocation's arguments, in order."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def add_script(self, name: str, body: str, folder: Path | None = None) -> Path:
        """An executable Python script ``name`` in ``folder`` (default the bin folder)."""
        folder = folder or self.bin
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(0o755)
        return path

    def install_nsys(self, folder: Path | None = None) -> Path:
        """The fake nsys, in the bin folder or elsewhere (an install off PATH)."""
        return self.add_script("nsys", FAKE_NSYS.read_text(), folder)


def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, with_nsys: bool = True) -> FakeTools:
    """PATH holds only the fake tools; the standard nsys places and nvidia-smi places are emptied; cwd is a
    fresh work folder. So no real nsys, nvidia-smi or ldd of the machine running the tests takes part."""
    fake = FakeTools(tmp_path / "bin", tmp_path / "nsys-calls.jsonl", tmp_path / "work")
    fake.bin.mkdir()
    fake.work.mkdir()
    if with_nsys:
        fake.install_nsys()
    monkeypatch.setenv("PATH", str(fake.bin))
    monkeypatch.setenv("FAKE_NSYS_LOG", str(fake.log))
    for name in ("NSYS_RULES_NSYS", "CUDA_LAUNCH_BLOCKING", "PYTORCH_NO_CUDA_MEMORY_CACHING", "FAKE_NSYS_NO_EXPORT",
                 "FAKE_NSYS_STATUS", "FAKE_NSYS_GPU_METRICS", "CARGO_PROFILE_DEV_OPT_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    # One standard place, empty: the messages still list where nsys was looked for.
    monkeypatch.setattr(nsys_locate, "STANDARD_PLACES", (str(tmp_path / "usr/local/cuda/bin/nsys"),))
    monkeypatch.setattr(doctor, "NVIDIA_SMI_PLACES", ())
    # No driver parameters: the counters' access is judged from the fake nsys's listing only.
    monkeypatch.setattr(nsys_status, "NVIDIA_PARAMS", tmp_path / "no-driver-params")
    monkeypatch.chdir(fake.work)
    return fake
