"""The packrt demo: ``python -m packrt.demo`` (``--smoke`` for the quick CI run).

For now it makes a tensor of every dtype, moves it through numpy and DLPack (zero-copy
where the format allows) and prints a table of what happened.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import packrt
from packrt.errors import DLPackError


def _row(name: str, cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip([name, *cells], widths, strict=True))


def dtype_tour(n: int) -> list[list[str]]:
    """One row per dtype: shape, bytes, whether numpy and DLPack views share memory."""
    rows = []
    for dt in _all_dtypes():
        t = packrt.arange(n, dtype=packrt.int64).to(dt) if dt is not packrt.bool else packrt.arange(n) % 2 == 0
        view = t.numpy()
        shared = np.shares_memory(view, np.asarray(t))
        try:
            peer = np.from_dlpack(t)
            dlpack = "zero-copy" if np.shares_memory(peer, view) else "copy"
        except DLPackError:
            dlpack = "not exportable"
        back = packrt.from_numpy(view)
        rows.append(
            [
                dt.name,
                str(t.shape),
                str(t.nbytes),
                "yes" if shared else "no",
                dlpack,
                "yes" if back.data_ptr() == t.data_ptr() else "no",
            ]
        )
    return rows


def _all_dtypes() -> list[packrt.dtype]:
    return [
        packrt.float16,
        packrt.bfloat16,
        packrt.float32,
        packrt.float64,
        packrt.int8,
        packrt.uint8,
        packrt.int16,
        packrt.int32,
        packrt.int64,
        packrt.bool,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m packrt.demo", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a quick run for CI")
    args = parser.parse_args(argv)
    n = 8 if args.smoke else 1 << 20
    start = time.perf_counter()
    rows = dtype_tour(n)
    header = ["dtype", "shape", "nbytes", "numpy view", "DLPack", "from_numpy back"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print(f"packrt {packrt.__version__}: tensors of every dtype through numpy and DLPack")
    print(_row(header[0], header[1:], widths))
    for r in rows:
        print(_row(r[0], r[1:], widths))
    print(
        f"cuda available: {packrt.cuda.is_available()} ({packrt.cuda.device_count()} device(s)); "
        f"{(time.perf_counter() - start) * 1e3:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
