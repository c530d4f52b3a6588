#!/usr/bin/env bash
# A folder that lets a machine without network build the book: a wheel of every requirement
# (and of what they need) for that machine's Python and processor, setuptools to install the
# book's own package, and Thebe (the live pages' JavaScript). Run it where there is network,
# from the root of a clone; copy the clone with the folder to the machine that has none, and
# follow the README ("On a GPU machine without network").
#
#   scripts/offline_bundle.sh PYTHON_VERSION [FOLDER]       e.g.  scripts/offline_bundle.sh 3.12
#
# PYTHON_VERSION is the offline machine's (`python3 --version` there: 3.12, not 3.12.3);
# FOLDER defaults to offline/. ARCH=aarch64 for an ARM machine (the default is x86_64).
# Wheels need the offline machine's C library to be at least as new as they say: GLIBC below.
# The registry's torch for Linux brings its CUDA libraries: about 3 GB of wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
python_version=${1:?"usage: scripts/offline_bundle.sh PYTHON_VERSION [FOLDER], e.g. 3.12"}
folder=${2:-offline}
arch=${ARCH:-x86_64}
if [[ ! $python_version =~ ^3\.[0-9]+$ ]]; then
    echo "offline_bundle: PYTHON_VERSION is the offline machine's major.minor, e.g. 3.12" >&2
    exit 2
fi
# every manylinux tag a glibc 2.28 machine (RHEL 8 and newer) accepts; GLIBC=2.31 (what
# `ldd --version` says there) for a newer one: wheels are tagged with the oldest glibc they need
glibc_minor=${GLIBC:-2.28}; glibc_minor=${glibc_minor#2.}
platforms=(--platform "manylinux2014_$arch")
for (( minor = glibc_minor; minor >= 17; minor-- )); do
    platforms+=(--platform "manylinux_2_${minor}_$arch")
done
mkdir -p "$folder/wheels"
python3 scripts/fetch_thebe.py
# every pinned requirement but the book's own package (-e .), which pip builds there, and
# but those whose marker leaves the offline machine out: pip download judges a marker by
# the Python that runs it, not by --python-version and --platform (torchft: no aarch64 wheel)
python3 - "$python_version" "$arch" requirements.txt > "$folder/requirements-wheels.txt" <<'EOF'
import sys
from pip._vendor.packaging.requirements import Requirement

version, machine, path = sys.argv[1:]
target = {"python_version": version, "python_full_version": f"{version}.0",
          "platform_machine": machine, "sys_platform": "linux", "platform_system": "Linux"}
for line in open(path):
    text = line.split(" #")[0].strip()
    if text and not text.startswith(("#", "-e ")):
        marker = Requirement(text).marker
        if marker is None or marker.evaluate(target):
            print(text)
EOF
python3 -m pip download --no-cache-dir --only-binary=:all: --implementation cp \
    --python-version "$python_version" "${platforms[@]}" -d "$folder/wheels" \
    -r "$folder/requirements-wheels.txt" "setuptools>=64"
rm -rf "$folder/_vendor" && cp -a _vendor "$folder/_vendor"
echo "offline_bundle: $(ls "$folder/wheels" | wc -l) wheels and Thebe in $folder/ ($(du -sh "$folder" | cut -f1))"
