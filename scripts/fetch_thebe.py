"""Fetch Thebe, the JavaScript that makes a page's code cells live, into ``_vendor/thebe``.

The README's set-up command runs this before the build; the build copies the folder
into the site as ``_thebe/`` (``_ext/live_pages.py``), so a page in live mode loads Thebe
from the site itself and nothing from outside the reader's machine. Pure Python, no npm:
it downloads the release tarball from the npm registry, checks it against the integrity
hash the registry published for it, and unpacks ``package/lib`` without its source maps
and type declarations.
Run again, it does nothing when the folder already holds this release.
"""

from __future__ import annotations

import base64
import hashlib
import io
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

VERSION = "0.9.3"
URL = f"https://registry.npmjs.org/thebe/-/thebe-{VERSION}.tgz"
INTEGRITY = ("sha512-Rb/7kVhtlffXra3kIe7OuIGE7awsm2/fGWxw21DiNfnWLnUQiDl9AWqYdshPwZPG"
             "/5DzLpsJRPix2xtCPtJmQQ==")
TARGET = Path(__file__).resolve().parent.parent / "_vendor" / "thebe"


def matches_integrity(data: bytes, integrity: str = INTEGRITY) -> bool:
    algorithm, _, expected = integrity.partition("-")
    return base64.b64encode(hashlib.new(algorithm, data).digest()).decode() == expected


def unpack(data: bytes, target: Path) -> int:
    """Write ``package/lib``'s files (no ``.map``, no ``types/``) under ``target``."""
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    count = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            parts = Path(member.name).parts
            if (not member.isfile() or parts[:2] != ("package", "lib") or ".." in parts
                    or member.name.endswith(".map") or "types" in parts):
                continue
            path = staging.joinpath(*parts[2:])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.extractfile(member).read())
            count += 1
    (staging / "VERSION").write_text(VERSION + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return count


def main() -> int:
    version = TARGET / "VERSION"
    if version.is_file() and version.read_text().strip() == VERSION \
            and (TARGET / "index.js").is_file():
        print(f"thebe {VERSION} is already in {TARGET}")
        return 0
    try:
        with urllib.request.urlopen(URL, timeout=120) as response:
            data = response.read()
    except OSError as error:
        print(f"fetch_thebe: cannot download {URL}: {error}", file=sys.stderr)
        return 1
    if not matches_integrity(data):
        print(f"fetch_thebe: {URL} does not match its published integrity hash",
              file=sys.stderr)
        return 1
    count = unpack(data, TARGET)
    print(f"thebe {VERSION}: {count} files in {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
