#!/usr/bin/env bash
# Check the workers against another torch release: make a throwaway virtual environment
# with that torch and torchvision, then run every worker's demos in it at small sizes
# (scripts/check_demos.py), one line per demo and a count at the end.
#
#   scripts/check_torch_versions.sh TORCH TORCHVISION [check_demos.py options]
#   scripts/check_torch_versions.sh 2.11.0 0.26.0
#   scripts/check_torch_versions.sh 2.11.0 0.26.0 --only collectives --jobs 1
#   CHECK_VENV=DIR scripts/check_torch_versions.sh 2.11.0 0.26.0 --install-only
#
# The environment is made in a temporary folder and removed at the end; CHECK_VENV=DIR
# keeps it in DIR instead, and a later call with the same DIR reuses it (--install-only
# makes it and runs nothing). PYTHON names the interpreter that makes it (default python3,
# 3.11 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: $0 TORCH TORCHVISION [--install-only | check_demos.py options], e.g. $0 2.11.0 0.26.0"
version='^[0-9]+\.[0-9]+(\.[0-9]+)?$'
if [[ $# -lt 2 || ! $1 =~ $version || ! $2 =~ $version ]]; then
    echo "$usage" >&2
    exit 2
fi
torch_version=$1 torchvision_version=$2
shift 2

if [[ -n ${CHECK_VENV:-} ]]; then
    venv=$CHECK_VENV
else
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    venv=$scratch/venv
fi

wanted="torch==$torch_version torchvision==$torchvision_version"
installed=$("$venv/bin/python" -c 'import torch, torchvision
print(f"torch=={torch.__version__} torchvision=={torchvision.__version__}")' \
    2>/dev/null | sed 's/+[a-z0-9]*//g' || true)
if [[ $installed != "$wanted" ]]; then
    echo "+ a virtual environment with $wanted in $venv"
    "${PYTHON:-python3}" -m venv "$venv"
    # uv installs torch's gigabytes of wheels several times faster than pip; pip installs uv
    "$venv/bin/pip" install --quiet --quiet uv
    # with the workers' other run-time needs, at the versions the book pins
    mapfile -t others < <(grep -E '^(numpy|psutil|mlxtend|py-spy|torchft)==' requirements.txt)
    # Triton, a gigabyte, is left out: it serves torch.compile's GPU code, and the demos here
    # compile with aot_eager on the CPU. (Bytecode compiled now: Python would otherwise
    # compile torch's sources at every import.)
    echo 'triton ; sys_platform == "never"' >"$venv/overrides.txt"
    if ! "$venv/bin/uv" pip install --quiet --compile-bytecode --python "$venv/bin/python" \
            --overrides "$venv/overrides.txt" \
            "torch==$torch_version" "torchvision==$torchvision_version" "${others[@]}"; then
        echo "check: could not install $wanted (see the installer's message above)" >&2
        exit 1
    fi
fi

if [[ ${1:-} == --install-only ]]; then
    exit 0
fi
# The workers are imported from this clone, as the book imports them.
PYTHONPATH=$PWD "$venv/bin/python" scripts/check_demos.py "$@"
