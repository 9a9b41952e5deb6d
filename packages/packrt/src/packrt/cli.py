"""The ``packrt`` command: look into a checkpoint, or check it against a model, from headers alone.

``packrt inspect PATH`` prints each tensor's name, dtype, shape and bytes, the metadata, and for a
sharded checkpoint the shard map. ``packrt check PATH --model module:factory`` builds the model under
``packrt.meta_init()`` (so no weight memory is spent) and lists the keys the checkpoint lacks, the keys
the model would not take, and the tensors whose shape or dtype differ. Neither reads tensor data.

Exit codes: 0 when all is well (``check``: the checkpoint fits the model), 1 when ``check`` finds a
difference, 2 for a usage error or a file that cannot be read, with the reason on stderr. When the
reader of stdout goes away early (``packrt inspect PATH | head -1``) the command stops quietly, with
no traceback or error on stderr, and exits 141, the status a shell reports for a tool that SIGPIPE
ended, so ``set -o pipefail`` scripts see the same as for ``cat`` or ``ls``.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import packrt_io
from packrt_core import meta_init
from packrt_core.errors import PackrtError

_EXIT_OK, _EXIT_MISMATCH, _EXIT_ERROR = 0, 1, 2
_EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a process ended by SIGPIPE


class UsageError(Exception):
    """A command line that cannot be carried out (bad ``--model``, a factory that fails)."""


def _table(rows: Sequence[Sequence[str]], right: set[int], out: TextIO) -> None:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        cells = [
            cell.rjust(width) if column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip(), file=out)


def _shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(dim) for dim in shape) + "]"


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    info = packrt_io.inspect_checkpoint(args.path)
    form = f"sharded, {len(info.shards)} shards" if info.sharded else "single file"
    print(f"checkpoint: {info.path} ({form})", file=out)
    print(f"tensors: {len(info.tensors)}, {info.total_bytes} bytes", file=out)
    if info.tensors:
        header = ["name", "dtype", "shape", "bytes"] + (["shard"] if info.sharded else [])
        rows = [header]
        for name in sorted(info.tensors):
            tensor = info.tensors[name]
            row = [name, tensor.dtype, _shape(tensor.shape), str(tensor.nbytes)]
            rows.append(row + ([tensor.file] if info.sharded else []))
        print(file=out)
        _table(rows, {3}, out)
    metadata = {key: str(value) for key, value in (info.index_metadata or info.metadata).items()}
    if metadata:
        print("\nmetadata:", file=out)
        _table([[f"  {key}", metadata[key]] for key in sorted(metadata)], set(), out)
    if info.sharded:
        print("\nshards:", file=out)
        rows = []
        for shard in info.shards:
            held = [t for t in info.tensors.values() if t.file == shard.name]
            rows.append([f"  {shard.name}", f"{len(held)} tensors", f"{sum(t.nbytes for t in held)} bytes"])
        _table(rows, {1, 2}, out)
    return _EXIT_OK


def _factory(spec: str) -> Callable[[], Any]:
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise UsageError(f"--model {spec!r} must be 'module:factory', e.g. 'mypkg.models:build'")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise UsageError(f"--model {spec!r}: cannot import module {module_name!r} ({err})") from err
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as err:
            raise UsageError(f"--model {spec!r}: module {module_name!r} has no {attribute!r}") from err
    if not callable(target):
        raise UsageError(f"--model {spec!r}: {attribute!r} is a {type(target).__name__}, not a callable")
    return target  # type: ignore[no-any-return]


def _check(args: argparse.Namespace, out: TextIO) -> int:
    factory = _factory(args.model)
    # Headers first: a bad checkpoint path is reported before any model is built.
    packrt_io.inspect_checkpoint(args.path)
    with meta_init():
        try:
            model = factory()
        except Exception as err:
            raise UsageError(f"--model {args.model!r}: building the model failed: {err!r}") from err
    report = packrt_io.check_checkpoint(model, args.path)
    print(f"checkpoint: {report.info.path}", file=out)
    print(f"model: {args.model}", file=out)
    sections = [
        ("missing keys (in the model, not in the checkpoint)", list(report.missing_keys)),
        ("unexpected keys (in the checkpoint, not in the model)", list(report.unexpected_keys)),
        ("mismatched tensors", [mismatch.describe() for mismatch in report.mismatched]),
    ]
    for title, lines in sections:
        if lines:
            print(f"\n{title}: {len(lines)}", file=out)
            for line in lines:
                print(f"  {line}", file=out)
    print("\nresult: " + ("match" if report.matches else "MISMATCH"), file=out)
    return _EXIT_OK if report.matches else _EXIT_MISMATCH


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="packrt", description="Inspect safetensors checkpoints and check them against models."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    inspect = commands.add_parser("inspect", help="list tensors, dtypes, shapes, bytes, metadata, shards")
    inspect.add_argument("path", help="a .safetensors file, an index .json, or a directory holding either")
    inspect.set_defaults(run=_inspect)
    check = commands.add_parser("check", help="compare a checkpoint's keys, shapes, dtypes with a model")
    check.add_argument("path", help="a .safetensors file, an index .json, or a directory holding either")
    check.add_argument("--model", required=True, help="'module:factory' returning the model to check")
    check.set_defaults(run=_check)
    return parser


def _silence_stdout() -> None:
    """Point stdout's file descriptor at /dev/null, so the interpreter's final flush of what is still
    buffered cannot fail again on the closed pipe and print an error at exit."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return  # not backed by a descriptor (a test's capture): nothing is flushed to a pipe at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _dispatch(argv: Sequence[str] | None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse has already printed usage (or --help) itself
        return stop.code if isinstance(stop.code, int) else _EXIT_ERROR
    try:
        code: int = args.run(args, sys.stdout)
    except BrokenPipeError:
        raise  # an OSError, but not a failure of the command: main handles it
    except (UsageError, PackrtError, OSError) as err:
        print(f"packrt {args.command}: error: {err}", file=sys.stderr)
        return _EXIT_ERROR
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``packrt`` command with ``argv`` (default: ``sys.argv[1:]``) and return its exit code.

    A reader of stdout that stops early ends the command quietly with exit code 141 (see above).
    """
    try:
        code = _dispatch(argv)
        # Flushed here so a reader that left after the last write is noticed now, not at exit.
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return _EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
