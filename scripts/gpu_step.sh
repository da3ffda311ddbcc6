#!/usr/bin/env bash
# One device call of the GPU tier: run scripts/gpu_verify.py steps in a fresh work folder, then
# bring back the step files and a tar of the run's raw/ logs under $OUT/gpu (only ~10 files per
# folder come back, and $OUT is emptied between calls).
# Use (on the GPU machine, after .gpu/a and .gpu/b are installed and the overlay is copied to
# /tmp/pb-overlay by the first call, see docs/gpu-runbook.md):
#   bash scripts/gpu_step.sh TAG --steps embed-gritlm --repeats 5
# PB_OVERLAY (default /tmp/pb-overlay/0.22.0) and PB_TIMEOUT (default 560 s) override.
set -uo pipefail
tag=${1:?usage: gpu_step.sh TAG gpu_verify-args...}
shift
test -f /tmp/vllm-bundle/site/.ready || {
  echo "no vLLM bundle here: install .gpu/a then .gpu/b first (the machine was given back?)"
  exit 3
}
export PYTHONPATH=/tmp/vllm-bundle/site
overlay=${PB_OVERLAY:-/tmp/pb-overlay/0.22.0}
test -f "$overlay/SERIES_HASH" || { echo "no overlay at $overlay: copy .gpu/overlay there first"; exit 3; }
work=/root/pb-work/$tag
rm -rf "$work" && mkdir -p "$work"
# SIGINT, not SIGTERM: gpu_verify's finally blocks then close the engines, so no process keeps
# GPU memory into the next call; the partial step files are written after every round.
timeout -s INT -k 30 "${PB_TIMEOUT:-560}" \
  python3 scripts/gpu_verify.py --overlay "$overlay" --out "$work" "$@"
rc=$?
mkdir -p "$OUT/gpu"
cp "$work"/*.json "$OUT/gpu/" 2>/dev/null
tar czf "$OUT/gpu/raw-$tag.tgz" -C "$work" raw
echo "gpu_step $tag: rc $rc, $(ls "$work"/*.json 2>/dev/null | wc -l) step files"
exit $rc
