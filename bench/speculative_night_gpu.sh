#!/usr/bin/env bash
# The speculative-decoding night on a GPU machine (Python, torch; see bench/gpu_env.sh):
#
#   bash bench/speculative_night_gpu.sh OUTDIR prepare        # the target, engine figures
#   bash bench/speculative_night_gpu.sh OUTDIR night [MINUTES]
#
# prepare: trains and caches the h200 preset's target under .optimizer/cache (about five
# minutes; nothing if cached), times the decode engine on it (OUTDIR/engine.json: every step
# size, plain and padded as the engine's calibration chose) and the sandbox channel's round
# trip with and without a spin (OUTDIR/boundary-spin0.json, boundary-spin5.json).
# night: runs experiments/speculative-h200.toml (building the target first if prepare did
# not), then OUTDIR gets night.log, status.txt, reports/ (the night's report), summary.json (bench/
# night_summary.py) and branches.txt (the pull branches with their messages).
set -euo pipefail
out=${1:?usage: speculative_night_gpu.sh OUTDIR prepare|night [MINUTES]}
phase=${2:?usage: speculative_night_gpu.sh OUTDIR prepare|night [MINUTES]}
minutes=${3:-7.5}
preset=${PRESET:-h200}
exp=${EXPERIMENT:-experiments/speculative-h200.toml}
mkdir -p "$out"
py=${PYTHON:-python3}

# shellcheck source=bench/gpu_env.sh
source bench/gpu_env.sh

$py -m evaluators.speculative.prepare --preset "$preset" | tee "$out/target.json"
if [ "$phase" = prepare ]; then
    $py bench/speculative_engine.py --preset "$preset" --out "$out/engine.json" ${ENGINE_ARGS:-}
    for spin in 0 5; do
        $py bench/boundary_cost.py --calls "${BOUNDARY_CALLS:-1000}" --spin-ms "$spin" \
            --out "$out/boundary-spin$spin.json"
    done
    exit 0
fi
set +e
opt run "$exp" --minutes "$minutes" 2>&1 | tee "$out/night.log"
status=${PIPESTATUS[0]}
set -e
opt status -e "$exp" > "$out/status.txt" 2>&1 || true
opt report -e "$exp" > "$out/report.log" 2>&1 || true
cp -r .optimizer/reports "$out/reports" 2>/dev/null || true
$py bench/night_summary.py "$exp" --out "$out/summary.json" > /dev/null 2>&1 || true
for b in $(git for-each-ref --format='%(refname:short)' refs/heads/optimizer/pr/); do
    { echo "== $b"; git log -1 --format=%B "$b"; git diff --stat "HEAD...$b"; } >> "$out/branches.txt"
done
exit "$status"
