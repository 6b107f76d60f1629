"""An NCCL all-reduce loop where one rank sleeps before the all-reduce in some steps (issue 18's real capture).

Run under torchrun, one nsys session per rank (see rank_capture.sh). Each step: a few matmuls,
a device sync, then on --sleep-rank every --sleep-every steps a host sleep of --sleep-ms with
the GPU idle, then `dist.all_reduce` and a sync. The other ranks reach the all-reduce first and
their NCCL kernel waits, so the sleeping rank holds them up by about the sleep each time.

The capture range is the measured loop only (cudaProfilerStart/Stop around it, after warm-up
and a barrier). Rank 0 writes --planted: what was planted, for the check that follows.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sleep-rank", type=int, default=1)
    parser.add_argument("--sleep-ms", type=float, default=15.0)
    parser.add_argument("--sleep-every", type=int, default=3, help="sleep in steps where step %% N == 0")
    parser.add_argument("--mb", type=int, default=64, help="all-reduce size in MiB (fp32)")
    parser.add_argument("--matmuls", type=int, default=8, help="4096x4096 bf16 matmuls per step before the all-reduce")
    parser.add_argument("--planted", default="planted.json")
    args = parser.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    grad = torch.ones(args.mb * 1024 * 1024 // 4, device="cuda")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

    def step(index: int, sleep: bool) -> None:
        torch.cuda.nvtx.range_push(f"step {index}")
        x = a
        for _ in range(args.matmuls):
            x = torch.tanh(x @ a)
        torch.cuda.synchronize()  # the GPU is idle from here while this rank's host sleeps
        if sleep:
            time.sleep(args.sleep_ms / 1000)
        dist.all_reduce(grad)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()

    for i in range(args.warmup):
        step(-1 - i, False)
    dist.barrier()
    torch.cuda.synchronize()
    slept = [i for i in range(args.steps) if i % args.sleep_every == 0]
    torch.cuda.cudart().cudaProfilerStart()
    for i in range(args.steps):
        step(i, rank == args.sleep_rank and i in slept)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    dist.barrier()
    if rank == 0:
        with open(args.planted, "w", encoding="utf-8") as out:
            json.dump({"world": world, "sleep_rank": args.sleep_rank, "sleep_ns": int(args.sleep_ms * 1e6),
                       "steps": args.steps, "slept_steps": slept}, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
