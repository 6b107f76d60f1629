#!/bin/bash
# Runs on the GPU host. Captures every scenario of a list into nsys SQLite exports,
# records NVIDIA's own `nsys stats` / `nsys analyze` output beside each, and packs both into OUTDIR.
# Usage: capture.sh SCENARIOS_FILE TAG OUTDIR     (scenario line: name|extra env|nsys flags|command)
#
# The loops copy of the kit's capture.sh (tests/data/framework/capture.sh), run from the prepared kit folder:
#   cd .capture && DEADLINE=450 TOTAL=575 SCEN_TIMEOUT=150 PARALLEL=16 \
#     bash ../tests/data/loops/capture.sh ../tests/data/loops/loops_a.txt loops_a "$OUT"
# The kit (debs/, sanitize.py, bench_serving.cu, llm.py...) is KIT, by default the current folder when it
# holds sanitize.py, else .capture/ at the repository root; loops.py is taken from beside this script (it
# replaces any copy in the kit), so the committed version is the one that runs.
# Optional environment: SCEN_TIMEOUT (s per scenario, default 240); DEADLINE (s after start past which no
# scenario may run; each one's timeout is cut to fit); TOTAL (s after start by which everything, the
# post-processing included, must be done: it caps the nsys stats/analyze pass; default none);
# SKIP_BENCH=1 (never build bench_serving; by default the release build is made when the list runs
# target/release/bench_serving, the debug build when it runs target/debug/bench_serving);
# PARALLEL (post-processing jobs, default 8); REF_TIMEOUT (s per nsys stats/analyze call).
# Outputs in OUTDIR, each written as soon as it is complete: TAG-summary.txt (one line per scenario,
# appended as they end), TAG-traces.tar.xz.NN (15 MB parts; packed before the post-processing starts),
# TAG-logs.tar.xz, then TAG-ref.tar.xz.
set -u
LIST=$(realpath "$1"); TAG=$2; DEST=$(realpath "${3:-.}"); HERE=$(dirname "$(realpath "$0")")
if [ -n "${KIT:-}" ]; then KIT=$(realpath "$KIT")
elif [ -f ./sanitize.py ]; then KIT=$(pwd)
elif [ -f "$HERE/../../../.capture/sanitize.py" ]; then KIT=$(realpath "$HERE/../../../.capture")
else KIT=$HERE; fi
NS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
TMO=${SCEN_TIMEOUT:-240}; DEADLINE=${DEADLINE:-100000}; TOTAL=${TOTAL:-100000}; START=$SECONDS
SUM=$DEST/$TAG-summary.txt; mkdir -p "$DEST"; : > "$SUM"
note() { echo "$*"; echo "$*" >> "$SUM"; }
note "kit: $KIT; loops.py from $HERE; list: $LIST"
[ -f "$KIT/sanitize.py" ] || { note "no sanitize.py in $KIT: prepare the kit first (README.md)"; exit 2; }
ls "$KIT"/debs/*.deb >/dev/null 2>&1 || note "WARNING: no $KIT/debs/*.deb: nsys's importer may fail to write reports"
# nsys's importer needs libdw, which the image lacks: unpack the carried Debian packages.
mkdir -p /tmp/dw && for f in "$KIT"/debs/*.deb; do [ -f "$f" ] && dpkg -x "$f" /tmp/dw; done
note "nsys: $($NS --version 2>&1 | head -1); $(nvidia-smi -L 2>&1 | head -1)"
B=/tmp/bench; rm -rf $B; mkdir -p $B/target/debug $B/target/release $B/traces $B/ref $B/logs
cp "$KIT"/*.py $B/; [ -f "$KIT/bench_serving.cu" ] && cp "$KIT/bench_serving.cu" $B/
cp "$HERE/loops.py" $B/; cd $B
if [ "${SKIP_BENCH:-0}" != 1 ] && grep -v '^#' "$LIST" | grep -q 'target/release/bench_serving'; then
  nvcc -O3 -arch=sm_90 -lineinfo -o target/release/bench_serving bench_serving.cu -lcuda 2>&1 | grep -v warning | tail -2
  note "built release bench_serving at $((SECONDS - START)) s: $(ls target/release/bench_serving 2>&1)"
fi
if [ "${SKIP_BENCH:-0}" != 1 ] && grep -v '^#' "$LIST" | grep -q 'target/debug/bench_serving'; then
  nvcc -G -O0 -arch=sm_90 -o target/debug/bench_serving bench_serving.cu -lcuda 2>&1 | grep -v warning | tail -2
fi
E="env -i HOME=/root PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:/usr/bin:/bin LD_LIBRARY_PATH=/tmp/dw/usr/lib/x86_64-linux-gnu:/usr/local/nvidia/lib64:/usr/local/nvidia/lib PYTHONUNBUFFERED=1"
BASE="--force-overwrite=true ${SAMPLE_FLAGS:---sample=none --cpuctxsw=none} --trace=cuda,nvtx,osrt --export=sqlite"
while IFS='|' read -r name xenv flags cmd; do
  [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  left=$((DEADLINE - (SECONDS - START))); t=$TMO; [ $left -lt $t ] && t=$left
  if [ $t -lt 45 ]; then note "=== $name SKIPPED (deadline, $((SECONDS - START)) s)"; continue; fi
  echo "=== $name ($((SECONDS - START)) s, timeout $t s)"
  s0=$SECONDS
  timeout -k 15 $t $E $xenv $NS profile $BASE $flags -o traces/$name $cmd > logs/$name.log 2>&1 </dev/null
  rc=$?
  sz=$(stat -c %s traces/$name.sqlite 2>/dev/null || echo none)
  note "=== $name rc=$rc $((SECONDS - s0)) s (at $((SECONDS - START)) s) sqlite=$sz"
  grep -e '^RESULT' -e '^done ' logs/$name.log | tail -2 >> "$SUM"
  grep -e '^RESULT' -e 'Error' -e 'error' -e 'Traceback' logs/$name.log | tail -4
done < "$LIST"
for f in traces/*.sqlite; do python3 "$KIT"/sanitize.py "$f" || note "sanitize failed: $f"; done
ls -la traces | tee -a "$SUM"
export XZ_OPT=-T0
# The traces and logs first: whatever happens to the post-processing, they are in DEST.
tar -C $B -cJf - traces/*.sqlite | split -b 15M -d - $DEST/$TAG-traces.tar.xz.
tar -C $B -cJf $DEST/$TAG-logs.tar.xz logs
note "traces packed at $((SECONDS - START)) s: $(ls $DEST/$TAG-traces.tar.xz.* | xargs -n1 basename | tr '\n' ' ')"
post() { n=$(basename $1 .sqlite)
  timeout ${REF_TIMEOUT:-60} $NS stats -q --format json --output ref/$n --report cuda_gpu_kern_sum --report cuda_api_sum --report cuda_kern_exec_sum --report cuda_gpu_mem_time_sum --report cuda_gpu_mem_size_sum --report nvtx_sum $1 >/dev/null 2>&1
  timeout ${REF_TIMEOUT:-90} $NS analyze -q --format json --output ref/$n $1 >/dev/null 2>&1
  timeout ${REF_TIMEOUT:-90} $NS analyze $1 2>&1 | sed "s#$(dirname $NS)/##g" > ref/${n}_analyze.txt; }
export -f post; export NS; export REF_TIMEOUT=${REF_TIMEOUT:-}
pt=${POST_TIMEOUT:-600}; room=$((TOTAL - (SECONDS - START) - 20)); [ $room -lt $pt ] && pt=$room
if [ $pt -ge 20 ]; then
  ls traces/*.sqlite | timeout $pt xargs -P ${PARALLEL:-8} -I{} bash -c 'post {}'
else note "post-processing SKIPPED (no time left)"; fi
rm -f ref/*dx12*
note "post-processing done at $((SECONDS - START)) s"
tar -C $B -cJf $DEST/$TAG-ref.tar.xz ref
tar -C $B -cJf $DEST/$TAG-logs.tar.xz logs
note "all done at $((SECONDS - START)) s"
