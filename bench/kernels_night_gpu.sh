#!/usr/bin/env bash
# The kernel targets' night on a GPU machine that has Python, torch and triton but no
# package index:
#
#   bash bench/kernels_night_gpu.sh OUTDIR [MINUTES]
#
# Missing engine dependencies (optuna, mlflow, gitpython and theirs) are installed from
# wheels in .whl/ into a private folder (docs/kernels.md says how to download them). The
# night runs experiments/kernels.toml in a throw-away git repository made from this
# checkout when it is not one. Then OUTDIR gets: night.log, status.txt, report.md, and
# kept/<target>.py with kept.json: for every kernel target the program the night kept (its
# pull branch, else the seed), for `bench/kernels_h200.py --night OUTDIR/kept`.
set -euo pipefail
out=${1:?usage: kernels_night_gpu.sh OUTDIR [MINUTES]}
minutes=${2:-8}
mkdir -p "$out/kept"
py=${PYTHON:-python3}

# shellcheck source=bench/gpu_env.sh
source bench/gpu_env.sh

set +e
opt run experiments/kernels.toml --minutes "$minutes" 2>&1 | tee "$out/night.log"
status=${PIPESTATUS[0]}
set -e
opt status -e experiments/kernels.toml > "$out/status.txt" 2>&1 || true
opt report -e experiments/kernels.toml > "$out/report.md" 2>&1 || true

echo "{" > "$out/kept.json"
sep=""
for dir in targets/kernels/*/; do
    t=$(basename "$dir")
    name=$($py -c "import tomllib,sys; print(tomllib.load(open(sys.argv[1],'rb'))['name'])" "$dir/target.toml")
    if git show "optimizer/pr/kernels/$name:targets/kernels/$t/kernel.py" > "$out/kept/$t.py" 2>/dev/null; then
        kept="optimizer/pr/kernels/$name"
    else
        cp "$dir/kernel.py" "$out/kept/$t.py"
        kept="seed"
    fi
    printf '%s  "%s": "%s"' "$sep" "$t" "$kept" >> "$out/kept.json"
    sep=$',\n'
done
printf '\n}\n' >> "$out/kept.json"
cat "$out/kept.json"
exit "$status"
