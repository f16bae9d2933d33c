# Sourced by the GPU night scripts on a machine that has Python, torch and triton but no
# package index: installs the wheels in .whl/ (the missing engine dependencies, optuna,
# mlflow, gitpython and theirs, and the production rivals that are pure-Python wheels;
# bench/gpu_wheels.sh downloads them) into a private folder, puts this checkout on
# PYTHONPATH, makes the checkout a git repository when it is not one, and defines `opt` (the optimizer CLI). Expects $py.
# The folder (.gpu-site/, git-ignored) outlives the call: a later call on the same machine
# finds it complete and skips the install (about a minute of an H200 call's 10 on a fresh
# machine; an 8-minute night and its install took 595 s of 600 in one call).
site=${GPU_SITE:-$PWD/.gpu-site}
if ls .whl/*.whl >/dev/null 2>&1; then
    # installed again only when .whl/ holds other wheels than the folder was made from
    want=$(cd .whl && ls -- *.whl)
    if [ ! -f "$site/.complete" ] || [ "$(cat "$site/.complete")" != "$want" ]; then
        rm -rf "$site"
        $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl
        printf '%s\n' "$want" > "$site/.complete"
    fi
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
elif ! $py -c "import optuna, mlflow, git" 2>/dev/null; then
    echo "optuna/mlflow/gitpython missing and no .whl/ (bench/gpu_wheels.sh fills it)" >&2
    exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The night's seeds are read from the base commit. A checkout that is not a repository
# becomes one; a repository this script made on an earlier call of the same machine gets
# what is on disk now committed on top (its older seeds would be the night's otherwise).
# Anyone else's repository is left as it is.
base_msg="base of the GPU night"
if ! git rev-parse --git-dir >/dev/null 2>&1; then
    git init -q
    fresh=1
fi
if [ -n "${fresh:-}" ] || [ "$(git log -1 --format=%s 2>/dev/null)" = "$base_msg" ]; then
    git add -A
    git -c user.name=optimizer -c user.email=optimizer@localhost commit -qm "$base_msg" \
        >/dev/null 2>&1 || true
fi

opt() { $py -c "import sys; from optimizer.cli import main; sys.exit(main())" "$@"; }
