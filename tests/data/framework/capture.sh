#!/bin/bash
# Runs on the GPU host. Captures every scenario of a list into nsys SQLite exports,
# records NVIDIA's own `nsys stats` / `nsys analyze` output beside each, and packs both into OUTDIR.
# Usage: capture.sh SCENARIOS_FILE TAG OUTDIR     (scenario line: name|extra env|nsys flags|command)
# Optional environment (fw's copy): SCEN_TIMEOUT (s per scenario, default 240), DEADLINE (s after start past
# which no scenario may run; each one's timeout is cut to fit), SKIP_BENCH=1 (skip building bench_serving), PARALLEL (post-processing jobs).
set -u
LIST=$(realpath "$1"); TAG=$2; DEST=$(realpath "${3:-.}"); KIT=$(dirname "$(realpath "$0")")
NS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
TMO=${SCEN_TIMEOUT:-240}; DEADLINE=${DEADLINE:-100000}; START=$SECONDS
# nsys's importer needs libdw, which the image lacks: unpack the carried Debian packages.
mkdir -p /tmp/dw && for f in "$KIT"/debs/*.deb; do dpkg -x "$f" /tmp/dw; done
B=/tmp/bench; rm -rf $B; mkdir -p $B/target/debug $B/target/release $B/traces $B/ref $B/logs
cp "$KIT"/*.py "$KIT"/bench_serving.cu $B/; cd $B
if [ "${SKIP_BENCH:-0}" != 1 ]; then
nvcc -G -O0 -arch=sm_90 -o target/debug/bench_serving bench_serving.cu -lcuda 2>&1 | grep -v warning | tail -2
nvcc -O3 -arch=sm_90 -lineinfo -o target/release/bench_serving bench_serving.cu -lcuda 2>&1 | grep -v warning | tail -2
fi
E="env -i HOME=/root PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:/usr/bin:/bin LD_LIBRARY_PATH=/tmp/dw/usr/lib/x86_64-linux-gnu:/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
BASE="--force-overwrite=true --sample=none --cpuctxsw=none --trace=cuda,nvtx,osrt --export=sqlite"
while IFS='|' read -r name xenv flags cmd; do
  [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  left=$((DEADLINE - (SECONDS - START))); t=$TMO; [ $left -lt $t ] && t=$left
  if [ $t -lt 45 ]; then echo "=== $name SKIPPED (deadline)"; continue; fi
  echo "=== $name ($((SECONDS - START)) s, timeout $t s)"
  timeout $t $E $xenv $NS profile $BASE $flags -o traces/$name $cmd > logs/$name.log 2>&1 </dev/null
  echo "rc=$? after $((SECONDS - START)) s"; grep -e '^REPORT' -e '^measured' -e 'Error' -e 'error' logs/$name.log | tail -4
done < "$LIST"
for f in traces/*.sqlite; do python3 "$KIT"/sanitize.py "$f" || echo "sanitize failed: $f"; done
post() { n=$(basename $1 .sqlite)
  timeout ${REF_TIMEOUT:-60} $NS stats -q --format json --output ref/$n --report cuda_gpu_kern_sum --report cuda_api_sum --report cuda_kern_exec_sum --report cuda_gpu_mem_time_sum --report cuda_gpu_mem_size_sum --report nvtx_sum $1 >/dev/null 2>&1
  timeout ${REF_TIMEOUT:-90} $NS analyze -q --format json --output ref/$n $1 >/dev/null 2>&1
  timeout ${REF_TIMEOUT:-90} $NS analyze $1 2>&1 | sed "s#$(dirname $NS)/##g" > ref/${n}_analyze.txt; }
export -f post; export NS; export REF_TIMEOUT=${REF_TIMEOUT:-}
ls traces/*.sqlite | timeout ${POST_TIMEOUT:-600} xargs -P ${PARALLEL:-8} -I{} bash -c 'post {}'
rm -f ref/*dx12*
ls -la traces
echo "post-processing done at $((SECONDS - START)) s"
export XZ_OPT=-T0
tar -C $B -cJf - traces/*.sqlite | split -b 15M -d - $DEST/$TAG-traces.tar.xz.
tar -C $B -cJf $DEST/$TAG-ref.tar.xz ref
tar -C $B -cJf $DEST/$TAG-logs.tar.xz logs
