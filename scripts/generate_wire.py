"""Writes (or with --check, verifies) the files generated from dara_kernels/wire.py:
csrc/core/wire.h and dara_kernels/triton/wire.py.

    python scripts/generate_wire.py [--check]
"""
import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dara_kernels.wire import stale_or_write  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale")
    args = parser.parse_args()
    stale = stale_or_write(ROOT, write=not args.check)
    for relative in stale:
        print(f"{relative} is stale: run python scripts/generate_wire.py" if args.check else f"wrote {relative}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
