#!/usr/bin/env bash
# Kernel wins against production, in one call of a GPU machine that has Python, torch and
# triton but no package index:
#
#   bash bench/kernels_production_gpu.sh OUTDIR [MINUTES] [prepare|retime]
#
# 1. the kernel night (experiments/kernels.toml, MINUTES of search, default 6) through
#    bench/kernels_night_gpu.sh;
# 2. the bench's re-timing of the kept programs beside the seed, eager PyTorch and the
#    production rivals that run there (bench/kernels_h200.py --quick --night);
# 3. the end-to-end gate on the kept programs, their seeds, the rivals and torch's op
#    (bench/kernels_production.py gate);
# then OUTDIR/result.json (everything above in one file) and OUTDIR/table.txt, the table
# printed last. Each stage after the night gets the time left before RUN_S seconds (default
# 570) from the start, so that the whole fits a 600-second call; a stage cut short keeps the
# rows it finished. The rivals' and the engine's wheels come from .whl/ (bench/gpu_wheels.sh).
#
# `prepare` runs the same steps without a GPU, so that no device minute is spent on a
# Python error: no night (the seeds stand in for the kept programs), the bench's --prepare
# (every program and rival imported, the plan written) and the gate on the CPU through the
# Triton interpreter (the small model, correctness only).
#
# `retime` skips the night and times and gates the programs an earlier run kept, read from
# its result file (KEPT_FROM=path/to/result.json, inside the working tree): for a second
# call when the first one's night left too little time for the rest.
set -euo pipefail
out=${1:?usage: kernels_production_gpu.sh OUTDIR [MINUTES] [prepare|retime]}
minutes=${2:-6}
mode=${3:-run}
case "$mode" in
    run|prepare) ;;
    retime) [ -f "${KEPT_FROM:-}" ] || { echo "retime needs KEPT_FROM=RESULT_JSON (an earlier run's result.json)" >&2; exit 2; } ;;
    *) echo "mode is run, prepare or retime, not '$mode'" >&2; exit 2 ;;
esac
py=${PYTHON:-python3}
run_s=${RUN_S:-570}
t0=$(date +%s)
work=${WORK:-$PWD/.gpu-run}
rm -rf "$work"
mkdir -p "$work/night/kept" "$out"

# shellcheck source=bench/gpu_env.sh
source bench/gpu_env.sh

stages=()
left() { echo $(( run_s - ($(date +%s) - t0) )); }
stage() {  # stage NAME SHARE_PERCENT_OF_WHAT_IS_LEFT CMD...: run CMD with a time limit
    local name=$1 share=$2; shift 2
    local budget=$(( $(left) * share / 100 ))
    local s0 rc=0
    s0=$(date +%s)
    if [ "$budget" -lt 5 ]; then
        echo "== $name: no time left" >&2
        stages+=(--stage "$name=124:0")
        return 0
    fi
    echo "== $name (at most ${budget} s)"
    timeout -k 5 "$budget" "$@" || rc=$?
    stages+=(--stage "$name=$rc:$(( $(date +%s) - s0 ))")
}

if [ "$mode" = prepare ]; then
    echo "{" > "$work/night/kept.json"
    sep=""
    for dir in targets/kernels/*/; do
        t=$(basename "$dir")
        cp "$dir/kernel.py" "$work/night/kept/$t.py"
        printf '%s  "%s": "seed"' "$sep" "$t" >> "$work/night/kept.json"
        sep=$',\n'
    done
    printf '\n}\n' >> "$work/night/kept.json"
    stage bench 100 "$py" bench/kernels_h200.py --prepare --night "$work/night/kept" \
        --out "$work/bench.json"
    stage gate 100 "$py" bench/kernels_production.py gate --kept "$work/night/kept" \
        --device cpu --out "$work/gate.json" ${GATE_ARGS:-}
elif [ "$mode" = retime ]; then
    "$py" bench/kernels_production.py kept --result "$KEPT_FROM" --night "$work/night"
else
    s0=$(date +%s)
    rc=0
    bash bench/kernels_night_gpu.sh "$work/night" "$minutes" > "$work/night-stdout.log" 2>&1 \
        || rc=$?
    tail -n 15 "$work/night-stdout.log"
    stages+=(--stage "night=$rc:$(( $(date +%s) - s0 ))")
fi
if [ "$mode" != prepare ]; then
    stage bench 55 "$py" bench/kernels_h200.py --quick --reps 50 --night "$work/night/kept" \
        --out "$work/bench.json" ${BENCH_ARGS:-}
    stage gate 100 "$py" bench/kernels_production.py gate --kept "$work/night/kept" \
        --out "$work/gate.json" ${GATE_ARGS:-}
fi
"$py" bench/kernels_production.py summary --work "$work" --out "$out/result.json" "${stages[@]}"
