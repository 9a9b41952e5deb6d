"""Header parsing of a safetensors file with many tensors: packrt-io against the safetensors library.

    python benchmarks/headers.py [--tensors 1000000] [--runs 2] [--dir DIR]

Writes (once, into ``--dir`` or a temporary directory) a file of ``--tensors`` one-element float32
tensors in the layout safetensors' writer gives (compact JSON, ``__metadata__`` first), then times
each reader in a fresh interpreter, ``--runs`` times, in process CPU seconds: packrt's full
validation without touching data (``read_metadata``), ``inspect_checkpoint`` (that plus one
``TensorInfo`` per tensor), the library's ``safe_open`` with ``keys()`` and ``metadata()``, stdlib
``json.loads`` of the header alone (collector paused, as packrt's parse runs), and the two loads of
every tensor (packrt's mapped ``load_arrays``, the library's ``safetensors.numpy.load_file``).
Fresh processes keep one reader's garbage from the next one's clock.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

# name -> (imports, timed body); PATH is the file
_READERS: dict[str, tuple[str, str]] = {
    "packrt read_metadata": ("import packrt_io", "packrt_io.read_metadata(PATH)"),
    "packrt inspect_checkpoint": ("import packrt_io", "packrt_io.inspect_checkpoint(PATH)"),
    "safetensors safe_open keys+metadata": (
        "import safetensors",
        "with safetensors.safe_open(PATH, framework='numpy') as f:\n    f.keys()\n    f.metadata()",
    ),
    "stdlib json.loads (header only)": (
        "import gc, json\nraw = open(PATH, 'rb').read()\nn = int.from_bytes(raw[:8], 'little')\ngc.disable()",
        "json.loads(raw[8:8 + n].decode())",
    ),
    "packrt load_arrays (mapped)": ("import packrt_io", "packrt_io.load_arrays(PATH)"),
    "safetensors.numpy.load_file": ("import safetensors.numpy", "safetensors.numpy.load_file(PATH)"),
}

_TIMED = """
import time
PATH = {path!r}
{imports}
start = time.process_time()
{body}
print(time.process_time() - start)
"""


def write_file(path: Path, tensors: int) -> None:
    """``tensors`` one-element float32 tensors, named like a large model's, in the writers' header form."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    for i in range(tensors):
        header[f"model.layers.{i // 1000}.block.{i % 1000}.weight"] = {
            "dtype": "F32",
            "shape": [1],
            "data_offsets": [4 * i, 4 * i + 4],
        }
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.write(bytes(4 * tensors))


def time_reader(path: Path, imports: str, body: str) -> float:
    """Process CPU seconds of ``body`` (after ``imports``, which are not counted) in a fresh interpreter."""
    script = _TIMED.format(path=str(path), imports=imports, body=body)
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensors", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        where = args.dir or Path(scratch)
        path = where / f"headers-{args.tensors}.safetensors"
        if not path.exists():
            write_file(path, args.tensors)
        print(f"{args.tensors} tensors, header {int.from_bytes(path.read_bytes()[:8], 'little')} bytes; CPU s:")
        for name, (imports, body) in _READERS.items():
            times = [time_reader(path, imports, body) for _ in range(args.runs)]
            print(f"  {name:38s} " + " ".join(f"{t:6.2f}" for t in times), flush=True)


if __name__ == "__main__":
    main()
