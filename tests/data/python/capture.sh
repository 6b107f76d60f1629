#!/bin/bash
# Runs on the GPU host (see ../../../docs/capture.md and ../shared/capture/README.md for libdw).
# Captures both workloads with exactly the flags `nsys-rules profile --python` uses, exports them the way it
# does (with the NVTX payloads), strips host-specific environment, then drops the tables no rule reads
# (native CPU samples and context switches, 95 % of the file) and packs each as xz into OUTDIR.
# Usage: capture.sh OUTDIR   (run from a folder holding train_py.py, decode_py.py and ../shared/capture/sanitize.py
# as sanitize.py; NSYS overrides the nsys binary)
set -u
OUTD=$(realpath "$1"); HERE=$(dirname "$(realpath "$0")")
NS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
FLAGS="--force-overwrite=true --cuda-graph-trace=node --trace=cuda,nvtx --sample=process-tree --python-sampling=true --python-backtrace=cuda --cudabacktrace=sync:0,memory:0"
cap() { name=$1; shift
  $NS profile $FLAGS -o $name "$@"
  $NS export --type=sqlite --include-blobs=true --force-overwrite=true -o $name.sqlite $name.nsys-rep
  python3 "$HERE"/sanitize.py $name.sqlite
  sqlite3 $name.sqlite "drop table if exists SAMPLING_CALLCHAINS; drop table if exists COMPOSITE_EVENTS;
                        drop table if exists SCHED_EVENTS; vacuum;"
  xz -9e -c $name.sqlite > "$OUTD"/$name.sqlite.xz
}
cap py_train python3 "$HERE"/train_py.py 6
cap py_decode python3 "$HERE"/decode_py.py
