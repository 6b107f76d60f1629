#!/bin/bash
# The causes are captured with the fix pairs' capture script (same kit, same defaults):
#   bash tests/data/causes/capture.sh tests/data/causes/causes_scenarios.txt TAG OUTDIR
exec bash "$(dirname "$(realpath "$0")")/../fixpairs/capture.sh" "$@"
