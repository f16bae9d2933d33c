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

if ! $py -c "import optuna, mlflow, git" 2>/dev/null; then
    ls .whl/*.whl >/dev/null 2>&1 || { echo "optuna/mlflow/gitpython missing and no .whl/" >&2; exit 2; }
    site=$(mktemp -d)/site
    $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! git rev-parse --git-dir >/dev/null 2>&1; then
    git init -q && git add -A && git -c user.name=optimizer -c user.email=optimizer@localhost \
        commit -qm "base of the GPU night"
fi

opt() { $py -c "import sys; from optimizer.cli import main; sys.exit(main())" "$@"; }
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
