# The kernel evaluator on an H200: the adversarial kernel cheats (bench/adversarial_kernels.py)
# and every kernel seed through `optimizer evaluate`. Engine wheels travel in .whl/
# (docs/kernels.md). Usage: OUT=outdir bash bench/kernels_check_h200.sh
set -o pipefail; export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
python3 -c "import torch, triton, optuna, mlflow, git; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
timeout 330 python3 bench/adversarial_kernels.py --out $OUT/adversarial-kernels-h200.json 2>&1 | tee $OUT/adv.log
for t in softmax rmsnorm layernorm gemm cross_entropy; do
  s=$(date +%s); timeout 150 python3 -c "import sys; from optimizer.cli import main; sys.exit(main())" evaluate targets/kernels/$t --json > $OUT/seed-$t.json 2> $OUT/seed-$t.err; rc=$?; e=$(date +%s)
  python3 -c "import json; d=json.load(open('$OUT/seed-$t.json')); print('$t', d['state'], $e-$s, 's', d['metrics'].get('time_ms'), d['reason'][:200])" 2>/dev/null || { echo "$t rc=$rc $((e-s)) s"; tail -3 $OUT/seed-$t.err; }
done
