#!/bin/bash
# Runs on the GPU host. Captures the scenarios of one or more lists into nsys SQLite exports, strips the
# host's environment (the kit's sanitize.py) and compresses each trace (xz -9) as soon as it is written.
# Usage: capture.sh LIST[:LIST...] TAG OUTDIR      (scenario line: name|extra env|nsys flags|command)
#
# The loops capture (tests/data/loops/capture.sh) with these changes:
#  - nsys flags per scenario may replace the defaults: a line whose flags hold --trace=... gets no
#    --trace=cuda,nvtx,osrt (JAX lines use --trace=cuda,osrt: nsys 2025.3.1's importer dropped the CUDA
#    events of NVTX-traced JAX runs), and one holding --sample=... gets no --sample=none --cpuctxsw=none;
#  - ONLY="name name..." runs just those scenarios of the lists;
#  - each trace is sanitized and compressed (nice'd xz -9, in the background, one file at a time) while
#    the next scenario runs, and added at once to OUTDIR's TAG-traces-N.tar (a new part past 12 MB: the
#    device gives back files of at most 16 MiB, and a run cut short still gives back what ended);
#  - the workload scripts (*.py) are taken from the kit folder, then from tests/data/fixpairs and
#    tests/data/causes beside this script (those replace the kit's copies), so the committed version runs;
#  - no bench_serving build, no nsys stats/analyze pass (the truths come from our own SQL).
# Environment: KIT (default: ./ if it holds sanitize.py, else .capture-fx/ or .capture/ at the repository
# root), SCEN_TIMEOUT (s per scenario, default 240), DEADLINE (s after start past which no scenario starts;
# timeouts are cut to fit), NSYS (the nsys binary).
# Outputs in OUTDIR: TAG-summary.txt (environment, then one line per scenario with exit code, seconds,
# SQLite size and the program's RESULT line, appended as they end), TAG-logs.tar.xz, TAG-traces-N.tar (parts of
# at most ~15 MB holding xz/NAME.sqlite.xz, each trace added as soon as it is compressed).
set -u
LISTS=$1; TAG=$2; DEST=$(realpath "${3:-.}"); HERE=$(dirname "$(realpath "$0")")
ROOT=$(realpath "$HERE/../../..")
if [ -n "${KIT:-}" ]; then KIT=$(realpath "$KIT")
elif [ -f ./sanitize.py ]; then KIT=$(pwd)
elif [ -f "$ROOT/.capture-fx/sanitize.py" ]; then KIT=$ROOT/.capture-fx
elif [ -f "$ROOT/.capture/sanitize.py" ]; then KIT=$ROOT/.capture
else KIT=$HERE; fi
NS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
TMO=${SCEN_TIMEOUT:-240}; DEADLINE=${DEADLINE:-100000}; START=$SECONDS
IFS=':' read -r -a LL <<< "$LISTS"; for i in "${!LL[@]}"; do LL[$i]=$(realpath "${LL[$i]}"); done
SUM=$DEST/$TAG-summary.txt; mkdir -p "$DEST"; : > "$SUM"
note() { echo "$*"; echo "$*" >> "$SUM"; }
note "kit: $KIT; lists: $LISTS; only: ${ONLY:-all}"
[ -f "$KIT/sanitize.py" ] || { note "no sanitize.py in $KIT: prepare the kit first (README.md)"; exit 2; }
ls "$KIT"/debs/*.deb >/dev/null 2>&1 || note "WARNING: no $KIT/debs/*.deb: nsys's importer may fail"
mkdir -p /tmp/dw && for f in "$KIT"/debs/*.deb; do [ -f "$f" ] && dpkg -x "$f" /tmp/dw; done
B=/tmp/fxbench; rm -rf $B; mkdir -p $B/traces $B/xz $B/logs
cp "$KIT"/*.py $B/
for d in "$HERE" "$HERE/../fixpairs" "$HERE/../causes"; do [ -d "$d" ] && cp "$d"/*.py $B/ 2>/dev/null; done
cd $B
E="env -i HOME=/root PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:/usr/bin:/bin LD_LIBRARY_PATH=/tmp/dw/usr/lib/x86_64-linux-gnu:/usr/local/nvidia/lib64:/usr/local/nvidia/lib PYTHONUNBUFFERED=1"
note "nsys: $($NS --version 2>&1 | head -1); $(nvidia-smi -L 2>&1 | head -1)"
note "driver: $(nvidia-smi --query-gpu=driver_version,clocks.max.sm,memory.total --format=csv,noheader 2>&1 | head -1)"
note "python: $($E python3 -c 'import sys, importlib.metadata as m
v = []
for n in ("torch", "torchvision", "transformers", "jax", "jaxlib", "flax", "optax", "numpy"):
    try: v.append(n + " " + m.version(n))
    except Exception as e: v.append(n + " MISSING")
print(sys.version.split()[0], "; ".join(v))' 2>&1 | tail -1)"

pack() {  # sanitize + compress one trace, lowest priority, while the next scenario runs; then add it to
  # OUTDIR's current TAG-traces-NN.tar (a new part past 12 MB), so a run cut short still returns what ended
  python3 "$KIT"/sanitize.py "traces/$1.sqlite" && nice -n 19 xz -9 -T2 -c "traces/$1.sqlite" > "xz/$1.sqlite.xz.part" \
    && mv "xz/$1.sqlite.xz.part" "xz/$1.sqlite.xz" \
    && tar -C $B -rf "$DEST/$TAG-traces-$(cat part).tar" "xz/$1.sqlite.xz" \
    && [ "$(stat -c %s "$DEST/$TAG-traces-$(cat part).tar")" -gt 12000000 ] && echo $(( $(cat part) + 1 )) > part
  return 0
}
echo 0 > part
PACKPID=""
for LIST in "${LL[@]}"; do
while IFS='|' read -r name xenv flags cmd; do
  [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  if [ -n "${ONLY:-}" ] && ! [[ " $ONLY " == *" $name "* ]]; then continue; fi
  left=$((DEADLINE - (SECONDS - START))); t=$TMO; [ $left -lt $t ] && t=$left
  if [ $t -lt 40 ]; then note "=== $name SKIPPED (deadline, $((SECONDS - START)) s)"; continue; fi
  base="--force-overwrite=true --export=sqlite"
  case "$flags" in *--trace=*) ;; *) base="$base --trace=cuda,nvtx,osrt" ;; esac
  case "$flags" in *--sample=*) ;; *) base="$base --sample=none --cpuctxsw=none" ;; esac
  echo "=== $name ($((SECONDS - START)) s, timeout $t s)"
  echo "nsys profile $base $flags -o traces/$name $cmd   [env: $xenv]" > logs/$name.log
  s0=$SECONDS
  timeout -k 15 $t $E $xenv $NS profile $base $flags -o traces/$name $cmd >> logs/$name.log 2>&1 </dev/null
  rc=$?
  sz=$(stat -c %s traces/$name.sqlite 2>/dev/null || echo none)
  note "=== $name rc=$rc $((SECONDS - s0)) s (at $((SECONDS - START)) s) sqlite=$sz"
  grep -e '^RESULT' -e '^done ' -e 'ms/step' logs/$name.log | tail -2 >> "$SUM"
  grep -e 'Error' -e 'error' -e 'Traceback' -e 'WARNING' logs/$name.log | head -3 | sed 's/^/    /' >> "$SUM"
  if [ "$sz" != none ]; then
    [ -n "$PACKPID" ] && wait $PACKPID
    pack "$name" & PACKPID=$!
  fi
done < "$LIST"
done
[ -n "$PACKPID" ] && wait $PACKPID
note "compressed at $((SECONDS - START)) s:"; ls -la xz | tee -a "$SUM"
tar -C $B -cJf $DEST/$TAG-logs.tar.xz logs
note "all done at $((SECONDS - START)) s: $(ls $DEST | tr '\n' ' ')"
