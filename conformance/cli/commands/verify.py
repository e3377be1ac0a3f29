"""`conformance verify PKG`: accept a conformance package only when its files match its manifest, it was
judged against this checkout's goldens, its observations judged again give its verdicts, and it is a full
run of the pinned suite with nothing skipped (`nightly.verify`).

Exit status: 0 accepted; 1 refused (every reason printed, naming the file, run, cell or check); 2 not a package.
"""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "verify"
HELP = "verify a conformance package: hashes, goldens, re-judged verdicts, a full run of the pinned suite"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", type=Path, metavar="PKG")


def run(args: argparse.Namespace) -> int:
    from conformance.nightly.verify import verify_package

    for line in verify_package(args.package):
        print(f"ok: {line}")
    print(f"{args.package}: accepted")
    return 0
