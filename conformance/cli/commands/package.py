"""`conformance package RUN_DIR... --out PKG`: a conformance package for a release (`nightly.package`):
the runs, an environment statement, every verdict and a manifest of file hashes. Check it with
`conformance verify PKG`. Exit status: 0 written, 2 bad input (a directory that is no run, --out not empty).
"""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "package"
HELP = "write a conformance package (runs, environment statement, manifest) for a release"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (shards of one nightly, or one run)")
    p.add_argument("--out", type=Path, required=True, metavar="PKG", help="the package directory (new or empty)")


def run(args: argparse.Namespace) -> int:
    from conformance.nightly.package import write_package

    out = write_package(args.runs, args.out)
    print(f"package: {out} ({len(args.runs)} run(s)); check it with `conformance verify {out}`")
    return 0
