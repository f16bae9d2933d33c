#!/usr/bin/env bash
# The suite's verdicts that only a GPU can give, in one call of a GPU machine that has
# Python, torch and triton but no package index (the wheels come from .whl/, filled by
# bench/gpu_wheels.sh):
#
#   bash bench/gpu_tests.sh OUTDIR
#
# 1. every kernel cheat of the adversarial suite, the phase-detecting ones included, each
#    beside its target's seed (which must come out VALID there); the verdicts are written to
#    OUTDIR/adversarial-gpu.json (the shape of tests/adversarial/baseline.json);
# 2. the imported KernelBench problem: the log-softmax without the max subtraction is
#    INVALID, the honest one VALID;
# 3. the GPU-marked tests of the numerics screen and of the production rivals.
# Each stage gets a share of RUN_S seconds (default 560) from the start (STAGES, below, picks
# and orders them); OUTDIR/summary.txt
# holds each stage's exit status and pytest's last lines, OUTDIR/*.xml the JUnit reports.
set -euo pipefail
out=${1:?usage: gpu_tests.sh OUTDIR}
py=${PYTHON:-python3}
run_s=${RUN_S:-560}
t0=$(date +%s)
mkdir -p "$out"
out=$(cd "$out" && pwd)

# shellcheck source=bench/gpu_env.sh
source bench/gpu_env.sh

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  "$py" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.cuda.is_available())"
} > "$out/device.txt"
cat "$out/device.txt"

left() { echo $(( run_s - ($(date +%s) - t0) )); }
: > "$out/summary.txt"
stage() {  # stage NAME SHARE_PERCENT_OF_WHAT_IS_LEFT PYTEST_ARGS...
    local name=$1 share=$2; shift 2
    local budget=$(( $(left) * share / 100 )) rc=0 s0
    s0=$(date +%s)
    if [ "$budget" -lt 10 ]; then
        echo "$name: no time left" | tee -a "$out/summary.txt"
        return 0
    fi
    echo "== $name (at most ${budget} s)"
    timeout -k 5 "$budget" "$py" -m pytest -q -p no:cacheprovider -rA \
        --junitxml="$out/$name.xml" "$@" > "$out/$name.log" 2>&1 || rc=$?
    { echo "$name: exit $rc in $(( $(date +%s) - s0 )) s"; tail -n 25 "$out/$name.log"; echo; } \
        | tee -a "$out/summary.txt"
}

# STAGES picks and orders them (default: all three, in this order); a stage's share is of
# the time left when it starts, so the last one named gets all of what is left
stages=${STAGES:-"adversarial imported gpu_marked"}
n=$(wc -w <<< "$stages")
i=0
for name in $stages; do
    i=$((i + 1))
    share=$(( i == n ? 100 : (i == 1 ? 65 : 60) ))
    case $name in
        adversarial) ADVERSARIAL_BASELINE="$out/adversarial-gpu.json" \
            stage adversarial "$share" tests/adversarial/test_cheats.py -k "kernels" ;;
        imported) stage imported "$share" tests/adversarial/test_imported.py ;;
        gpu_marked) stage gpu_marked "$share" -m gpu tests/evaluators/test_numerics.py \
            tests/evaluators/kernels/test_rivals.py ;;
        *) echo "unknown stage $name (adversarial, imported, gpu_marked)" >&2; exit 2 ;;
    esac
done
echo "done in $(( $(date +%s) - t0 )) s"
