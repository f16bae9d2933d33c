#!/usr/bin/env bash
# Fills .whl/ with every wheel the GPU scripts install on a machine without a package index
# (bench/gpu_env.sh installs them): the engine's dependencies that an image with PyTorch,
# numpy, safetensors, tiktoken and transformers lacks (optuna, mlflow, gitpython and
# theirs), the production rivals that are pure-Python wheels (Liger-Kernel; its
# runtime needs, torch, triton and packaging, are on such an image), and pytest with
# hypothesis for the suite's GPU-marked tests. Each wheel is named
# with its version and fetched without dependencies, for CPython 3.12 on x86-64 Linux.
#
#   bash bench/gpu_wheels.sh [DIR]     # default .whl
#
# Not fetched (docs/kernels.md, "Production rivals"): FlashInfer (its wheel alone is 62 MB
# and it pulls the CUTLASS DSL, cuda-python and more) and QuACK (the CUTLASS DSL's wheels).
# The folder travels with the working tree, at most 64 MiB in all: the script fails when
# the wheels pass 40 MiB.
set -euo pipefail
dir=${1:-.whl}
py=${PYTHON:-python3}
max_mib=${MAX_MIB:-40}
wheels=(
    # the engine's dependencies (optuna 5.0.0, mlflow 3.17.2, gitpython 3.2.1 and theirs)
    alembic==1.20.1 annotated-types==0.8.0 blinker==1.9.0 cachetools==7.3.3 cffi==2.1.1
    colorlog==6.12.0 cryptography==50.0.2 databricks-sdk==0.167.0 docker==7.2.0
    fastapi==0.165.0 flask==3.1.3 flask-cors==6.0.5 gitdb==4.0.12 gitpython==3.2.1
    google-auth==2.63.0 graphene==3.4.3 graphql-core==3.2.14 graphql-relay==3.2.0
    gunicorn==26.2.0 huey==3.5.4 importlib-metadata==9.1.0 itsdangerous==2.2.0 mako==1.4.3
    mlflow==3.17.2 mlflow-skinny==3.17.2 mlflow-tracing==3.17.2 opentelemetry-api==1.45.2
    opentelemetry-proto==1.45.2 opentelemetry-sdk==1.45.2
    opentelemetry-semantic-conventions==0.66b2 optuna==5.0.0 prettytable==3.19.0
    pyasn1==0.6.5 pyasn1-modules==0.4.2 pycparser==3.12 pydantic==2.14.4
    pydantic-core==2.50.5 python-dotenv==1.2.4 skops==0.16.0 smmap==5.0.3
    sqlalchemy==2.1.9 sqlparse==0.6.1 starlette==1.10.0 typing-inspection==0.4.5
    uvicorn==0.55.0 wcwidth==0.9.4
    # the production rivals
    liger-kernel==0.8.5
    # the test runner, for the suite's GPU-marked tests (bench/gpu_tests.sh)
    pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 hypothesis==6.170.27 sortedcontainers==2.4.0
    attrs==26.1.0
)
mkdir -p "$dir"
$py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$dir" "${wheels[@]}"
mib=$(du -sm "$dir" | cut -f1)
echo "$dir: $(ls "$dir"/*.whl | wc -l) wheels, ${mib} MiB"
if [ "$mib" -gt "$max_mib" ]; then
    echo "$dir holds ${mib} MiB, over ${max_mib} MiB: the working tree a GPU call carries is 64 MiB" >&2
    exit 1
fi
