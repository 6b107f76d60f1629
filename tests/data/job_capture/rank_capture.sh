#!/bin/bash
# Issue 18's real capture: a torch.distributed NCCL all-reduce loop on 2+ GPUs, one nsys session per
# rank named with %q{RANK}, analysed as one job by nsys-rules. Not run yet
# (only one-GPU machines were available). Needs a machine with 2 or more GPUs (kind nvidia-h200-x2).
#
# Prepare, once, on the CPU machine in the repository root (/work/main):
#   1. the capture kit with libdw/libelf (nsys's importer needs them on the GPU host):
#        cp -r ../shared/capture .capture && echo /.capture/ >> .git/info/exclude && bash .capture/fetch-debs.sh
#      (skip if .capture/debs/*.deb exist already)
#   2. these two files into the kit:
#        cp tests/data/job_capture/rank_capture.sh tests/data/job_capture/rank_allreduce.py .capture/
#   3. optional, the ADBC reader wheels in .whl/ (docs/capture.md); without
#      them nsys-rules uses its slower stdlib reader, which is fine for these small traces.
# Run (device tool):
#   run(command="bash .capture/rank_capture.sh", carry=[".capture", ".whl"], kind="nvidia-h200-x2", timeout_s=600)
# About 2-3 minutes. Output in $OUT: capture.log, job.json (check --format json over the rank traces),
# job.txt (the table), planted.json, traces.tar.xz (the per-rank .sqlite exports, a few MB).
#
# Expected (the check at the end prints PASS or FAIL and exits 0 or 1):
#   - rank-straggler names rank SLEEP_RANK (1), from the file names (node_rank1_*.sqlite);
#   - its held_up_total is SLEEP_MS x (slept steps after the first collective), within 10 %: with the defaults
#     40 steps, a sleep every 3rd step (0, 3, ..., 39: 14 sleeps, 13 after the first all-reduce), 15 ms each,
#     that is 195 ms, about 5 ms per step over the 39 job steps; the cause is "host stall";
#   - the clocks line up from the session start times (same host), corrected or not, with a residual skew of
#     microseconds; exposed-comm reports the all-reduce (nothing overlaps it); rank-imbalance stays quiet.
set -u
ROOT=$(pwd); KIT=$ROOT/.capture; OUT=${OUT:-/tmp/rank-out}; W=/tmp/rank
NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
NGPU=${NGPU:-2}; STEPS=${STEPS:-40}; SLEEP_RANK=${SLEEP_RANK:-1}; SLEEP_MS=${SLEEP_MS:-15}; EVERY=${EVERY:-3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

capture() {
  echo "=== setup"
  nvidia-smi -L
  [ "$(nvidia-smi -L | wc -l)" -ge "$NGPU" ] || { echo "needs $NGPU GPUs"; return 1; }
  [ -x "$NSYS" ] || NSYS=$(find /opt/nvidia -name nsys -type f -perm -u+x 2>/dev/null | head -1)
  echo "nsys: $NSYS"
  mkdir -p /tmp/dw && for f in "$KIT"/debs/*.deb; do dpkg -x "$f" /tmp/dw; done
  export LD_LIBRARY_PATH=/tmp/dw/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$ROOT"/.whl/*.whl \
      && export PYTHONPATH=/tmp/site
  fi
  # nsys-rules as the wheel lays it out (rules/ becomes nsys_rules/rules), no network needed.
  rm -rf /tmp/nsr && mkdir -p /tmp/nsr && cp -r "$ROOT/nsys_rules" /tmp/nsr/ && cp -r "$ROOT/rules" /tmp/nsr/nsys_rules/rules
  export PYTHONPATH=/tmp/nsr${PYTHONPATH:+:$PYTHONPATH}
  rm -rf "$W" && mkdir -p "$W/traces" && cp "$KIT/rank_allreduce.py" "$W/" && cd "$W" || return 1

  echo "=== capture: $NGPU ranks, one nsys session each, -o traces/%h_rank%q{RANK}_%n"
  NCCL_DEBUG=WARN timeout 300 python3 -m torch.distributed.run --standalone --nproc_per_node="$NGPU" --no-python \
    "$NSYS" profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none \
      --capture-range=cudaProfilerApi --capture-range-end=stop \
      --export=sqlite --force-overwrite=true -o "traces/%h_rank%q{RANK}_%n" \
    python3 rank_allreduce.py --steps "$STEPS" --sleep-rank "$SLEEP_RANK" --sleep-ms "$SLEEP_MS" \
      --sleep-every "$EVERY" --planted "$OUT/planted.json"
  echo "-> capture exit $?"
  ls -la traces/

  echo "=== nsys-rules check over the rank traces"
  # The .sqlite exports only: the folder also holds nsys's .nsys-rep files, and nsys is not on PATH to re-export them.
  python3 -m nsys_rules check traces/*.sqlite --select rank-straggler,exposed-comm,rank-imbalance > "$OUT/job.txt"
  echo "-> $?"; cat "$OUT/job.txt"
  python3 -m nsys_rules check traces/*.sqlite --format json > "$OUT/job.json"; echo "-> check (all rules) exit $?"

  echo "=== expected vs found"
  python3 - "$OUT/job.json" "$OUT/planted.json" <<'EOF'
import json, sys
report, planted = (json.load(open(p)) for p in sys.argv[1:3])
# Job step k runs from collective k-1's end to collective k's: a sleep before the first all-reduce is outside.
expected = planted["sleep_ns"] * sum(1 for s in planted["slept_steps"] if s >= 1)
found = [f for f in report["findings"] if f["rule"] == "rank-straggler"]
job = report.get("job", {})
print("ranks:", [(r["rank"], r["rank_source"], r.get("clock_correction_ns"), r.get("residual_skew_ns")) for r in job.get("ranks", [])])
print("clock:", job.get("clock"))
ok = len(found) == 1
if ok:
    f = found[0]
    held = f["metrics"]["held_up_total"]["value"]
    print(f"straggler: rank {f['location'].get('rank')}, held up {held / 1e6:.2f} ms, expected {expected / 1e6:.2f} ms "
          f"({100 * (held - expected) / expected:+.1f} %)")
    print(f["message"])
    ok = f["location"].get("rank") == planted["sleep_rank"] and abs(held - expected) <= 0.10 * expected
if ok:
    print("PASS")
else:
    print("FAIL: expected rank", planted["sleep_rank"], "holding the others up", expected, "ns; found:",
          [(x["rule"], x["location"]) for x in found])
sys.exit(0 if ok else 1)
EOF
  RESULT=$?
  tar -C "$W" -cJf "$OUT/traces.tar.xz" --exclude='*.nsys-rep' traces
  return $RESULT
}

capture 2>&1 | tee "$OUT/capture.log"
exit "${PIPESTATUS[0]}"
