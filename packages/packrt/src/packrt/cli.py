"""The ``packrt`` command: look into a checkpoint, or check it against a model, from headers alone.

``packrt inspect PATH`` prints each tensor's name, dtype, shape and bytes, the metadata, and for a
sharded checkpoint the shard map. ``packrt check PATH --model module:factory`` builds the model under
``packrt.meta_init()`` (so no weight memory is spent) and lists the keys the checkpoint lacks, the keys
the model would not take, and the tensors whose shape or dtype differ. Neither reads tensor data.
``packrt --version`` prints the version of every installed packrt distribution. ``packrt warmup DIR...``
runs each model directory at a few input shapes so that every CPU kernel signature it serves with is
compiled into the kernel cache (``PACKRT_CACHE_DIR``, default ``~/.cache/packrt``) before serving starts
(see :mod:`packrt.warmup`).

``--model`` takes ``module:callable`` or a Hugging Face directory. The module is imported the way
``python -m`` imports one: from the current directory first, then ``sys.path`` (``PYTHONPATH``).
``--config config.json`` hands the callable the JSON object: as keyword arguments
(``build(**config)``), or, when the callable's first parameter is annotated with a dataclass (as
``packrt.models:BertEncoder`` takes ``config: EncoderConfig``), as that dataclass built from the
object (``BertEncoder(EncoderConfig(**config))``). A directory is checked as
``packrt.models.from_pretrained(directory)`` would load it (:func:`packrt.models.pretrained.check_pretrained`):
the model its own config.json declares (``--config`` is refused there), the checkpoint's Hugging Face
names read through the family's key map (names it leaves unused by design, such as a BERT pooler, are
fine), keys printed by their checkpoint names. A checkpoint written by ``packrt.io.save_checkpoint``
(packrt's names) is compared key for key instead.

Exit codes: 0 when all is well (``check``: the checkpoint fits the model), 1 when ``check`` finds a
difference, 2 for a usage error or a file that cannot be read, with the reason on stderr. When the
reader of stdout goes away early (``packrt inspect PATH | head -1``) the command stops quietly, with
no traceback or error on stderr, and exits 141, the status a shell reports for a tool that SIGPIPE
ended, so ``set -o pipefail`` scripts see the same as for ``cat`` or ``ls``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import inspect
import io
import json
import os
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn, TextIO

import packrt_io
from packrt_core import meta_init
from packrt_core.errors import CheckpointError, PackrtError

_EXIT_OK, _EXIT_MISMATCH, _EXIT_ERROR = 0, 1, 2
_EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a process ended by SIGPIPE


class UsageError(Exception):
    """A command line that cannot be carried out (bad ``--model``, a factory that fails)."""


def _table(rows: Sequence[Sequence[str]], right: set[int], out: TextIO) -> None:
    if not rows:
        print("  (none)", file=out)
        return
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        cells = [
            cell.rjust(width) if column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip(), file=out)


def _safe(text: str) -> str:
    """``text`` as the terminal should see it: control characters, lone surrogates and other
    unprintable code points escaped (``\\x07``, ``\\ud800``), so a tensor name can neither ring
    the bell, move the cursor, nor make printing fail."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii") for c in text
    )


def _message(err: BaseException) -> str:
    """An error's text for stderr: each line escaped as :func:`_safe` does, the line breaks kept, so a
    hint the message puts on its own line prints there (names inside are quoted by ``!r`` already)."""
    return "\n".join(_safe(line) for line in str(err).split("\n"))


def _shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(dim) for dim in shape) + "]"


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    if packrt_io.named_gguf(args.path):
        return _inspect_gguf(args.path, out)
    info = packrt_io.inspect_checkpoint(args.path)
    form = f"sharded, {len(info.shards)} shards" if info.sharded else "single file"
    print(f"checkpoint: {_safe(str(info.path))} ({form})", file=out)
    print(f"tensors: {len(info.tensors)}, {info.total_bytes} bytes", file=out)
    if info.tensors:
        header = ["name", "dtype", "shape", "bytes"] + (["shard"] if info.sharded else [])
        rows = [header]
        for name in sorted(info.tensors):
            tensor = info.tensors[name]
            row = [_safe(name), tensor.dtype, _shape(tensor.shape), str(tensor.nbytes)]
            rows.append(row + ([_safe(tensor.file)] if info.sharded else []))
        print(file=out)
        _table(rows, {3}, out)
    metadata = {key: str(value) for key, value in (info.index_metadata or info.metadata).items()}
    if metadata:
        print("\nmetadata:", file=out)
        _table([[f"  {_safe(key)}", _safe(metadata[key])] for key in sorted(metadata)], set(), out)
    if info.sharded:
        print("\nshards:", file=out)
        rows = []
        for shard in info.shards:
            held = [t for t in info.tensors.values() if t.file == shard.name]
            rows.append([f"  {_safe(shard.name)}", f"{len(held)} tensors", f"{sum(t.nbytes for t in held)} bytes"])
        _table(rows, {1, 2}, out)
    return _EXIT_OK


@contextlib.contextmanager
def _cwd_importable() -> Iterator[None]:
    """The current directory first on ``sys.path`` while the command runs, as ``python -m`` puts it."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def import_hint(module_name: str, err: ImportError) -> str:
    """What to do about a module that did not import: where packrt looked, and the fix."""
    if err.name is not None and err.name != module_name and not module_name.startswith(err.name + "."):
        return (
            f"hint: {module_name!r} was found, but importing it failed on {err.name!r}: install what it needs, "
            "or fix its imports"
        )
    top = module_name.split(".")[0]
    return (
        f"hint: {module_name!r} is imported as `python -m` would, from the current directory ({os.getcwd()}) and "
        f"then sys.path; run the command from the directory holding {top}.py (or the package {top}/), or put that "
        "directory on PYTHONPATH (PYTHONPATH=/path/to/dir packrt ...)"
    )


def _factory(spec: str) -> Callable[..., Any]:
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise UsageError(f"--model {spec!r} must be 'module:factory' (e.g. 'mypkg.models:build') or a model directory")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise UsageError(
            f"--model {spec!r}: cannot import module {module_name!r} ({err})\n{import_hint(module_name, err)}"
        ) from err
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as err:
            raise UsageError(f"--model {spec!r}: module {module_name!r} has no {attribute!r}") from err
    if not callable(target):
        raise UsageError(f"--model {spec!r}: {attribute!r} is a {type(target).__name__}, not a callable")
    return target  # type: ignore[no-any-return]


def _read_config(path: str) -> dict[str, Any]:
    from packrt.models.hfconfig import read_regular  # a FIFO is refused unopened

    try:
        text = read_regular(Path(path)).decode("utf-8")
        config = json.loads(text)
    except OSError as err:
        raise UsageError(f"--config {path!r} cannot be read: {err.strerror or err}") from err
    except CheckpointError as err:
        raise UsageError(f"--config {path!r} cannot be read: {err}") from err
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError, deep nesting
        raise UsageError(f"--config {path!r} is not valid JSON: {err}") from err
    if not isinstance(config, dict):
        raise UsageError(f"--config {path!r} must hold a JSON object of arguments, not a {type(config).__name__}")
    return config


def _config_class(factory: Callable[..., Any]) -> type[Any] | None:
    """The dataclass the factory's first parameter is annotated with, if any."""
    try:
        first = next(iter(inspect.signature(factory).parameters.values()), None)
        if isinstance(factory, type):  # a class: its __init__'s annotations (the first class that defines one)
            hints = typing.get_type_hints(next(vars(k)["__init__"] for k in factory.__mro__ if "__init__" in vars(k)))
        else:
            hints = typing.get_type_hints(factory)
    except (TypeError, ValueError, NameError):
        return None
    hint = hints.get(first.name) if first is not None else None
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def _build(factory: Callable[..., Any], spec: str, config: dict[str, Any] | None) -> Any:
    try:
        if config is None:
            return factory()
        config_class = _config_class(factory)
        if config_class is not None:
            return factory(config_class(**config))
        return factory(**config)
    except Exception as err:
        raise UsageError(f"--model {spec!r}: building the model failed: {err!r}") from err


def _inspect_gguf(path: str, out: TextIO) -> int:
    """A GGUF file's architecture, tensors (GGML type, shape, stored bytes) and metadata; a long list (the
    tokenizer's vocabulary) is shown by its length."""
    gguf = packrt_io.open_gguf(path)  # the gguf extra; a CheckpointError naming the file otherwise
    tensors = gguf.tensors
    print(f"checkpoint: {_safe(str(gguf.path))} (GGUF, architecture {_safe(gguf.architecture)})", file=out)
    print(f"tensors: {len(tensors)}, {sum(t.nbytes for t in tensors.values())} bytes", file=out)
    if tensors:
        rows = [["name", "type", "shape", "bytes"]]
        rows += [[_safe(name), t.dtype, _shape(t.shape), str(t.nbytes)] for name, t in sorted(tensors.items())]
        print(file=out)
        _table(rows, {3}, out)
    print("\nmetadata:", file=out)
    shown = []
    for key in sorted(gguf.metadata):
        value = gguf.metadata[key]
        text = f"[{len(value)} items]" if isinstance(value, list) and len(value) > 8 else str(value)
        shown.append([f"  {_safe(key)}", _safe(text if len(text) <= 120 else text[:117] + "...")])
    _table(shown, set(), out)
    return _EXIT_OK


def _check_pretrained(directory: str, path: str) -> packrt_io.CheckReport:
    # Imported here: packrt.models (and its tokenizers dependency) only for a --model directory.
    from packrt.models.pretrained import check_pretrained

    return check_pretrained(directory, path)


def _check(args: argparse.Namespace, out: TextIO) -> int:
    directory = os.path.isdir(args.model)
    if directory and args.config is not None:
        raise UsageError(f"--config applies to --model module:factory; {args.model!r} is a directory with its own")
    factory = None if directory else _factory(args.model)
    config = _read_config(args.config) if args.config is not None else None
    # Headers first: a bad checkpoint path is reported before any model is built.
    packrt_io.inspect_checkpoint(args.path)
    if factory is None:
        report = _check_pretrained(args.model, args.path)
    else:
        with meta_init():
            model = _build(factory, args.model, config)
        report = packrt_io.check_checkpoint(model, args.path)
    print(f"checkpoint: {_safe(str(report.info.path))}", file=out)
    print(f"model: {_safe(args.model)}", file=out)
    sections = [
        ("missing keys (in the model, not in the checkpoint)", list(report.missing_keys)),
        ("unexpected keys (in the checkpoint, not in the model)", list(report.unexpected_keys)),
        ("mismatched tensors", [mismatch.describe() for mismatch in report.mismatched]),
    ]
    for title, lines in sections:
        if lines:
            print(f"\n{title}: {len(lines)}", file=out)
            for line in lines:
                print(f"  {_safe(line)}", file=out)
    print("\nresult: " + ("match" if report.matches else "MISMATCH"), file=out)
    return _EXIT_OK if report.matches else _EXIT_MISMATCH


def versions() -> list[tuple[str, str]]:
    """(distribution, version) for every installed packrt distribution, by name."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name == "packrt" or name.startswith("packrt-"):
            found.setdefault(name, dist.version)
    return sorted(found.items())


class _Version(argparse.Action):
    """``--version``: every packrt distribution's version, read when asked (not at import)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> NoReturn:
        lines = [f"{name} {version}" for name, version in versions()] or ["packrt (no distribution metadata found)"]
        print("\n".join(lines), file=sys.stdout)
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The ``packrt`` command's argument parser, every subcommand included (the site's CLI reference
    prints each one's help from it, so the page and ``--help`` cannot disagree)."""
    parser = argparse.ArgumentParser(
        prog="packrt",
        description="Inspect safetensors checkpoints, check them against models, warm the kernel cache, serve a model.",
    )
    parser.add_argument("--version", action=_Version, help="print every packrt distribution's version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    inspect = commands.add_parser("inspect", help="list tensors, dtypes, shapes, bytes, metadata, shards")
    inspect.add_argument(
        "path", help="a .safetensors file, an index .json, a directory holding either, or a .gguf file"
    )
    inspect.set_defaults(run=_inspect)
    check = commands.add_parser("check", help="compare a checkpoint's keys, shapes, dtypes with a model")
    check.add_argument("path", help="a .safetensors file, an index .json, or a directory holding either")
    check.add_argument(
        "--model",
        required=True,
        help="'module:factory' returning the model (imported from the current directory first), or a Hugging Face "
        "model directory (checked as packrt.models.from_pretrained reads it: through the family's key map)",
    )
    check.add_argument(
        "--config",
        metavar="CONFIG_JSON",
        help="a JSON object for the factory: its keyword arguments, or its config dataclass when the factory's first "
        "parameter is annotated with one",
    )
    check.set_defaults(run=_check)
    warm = commands.add_parser(
        "warmup", help="compile the CPU kernels the given models serve with into the kernel cache, ahead of serving"
    )
    warm.add_argument(
        "paths", nargs="+", metavar="DIR", help="model directories (Hugging Face or sentence-transformers)"
    )
    warm.add_argument(
        "--shape",
        action="append",
        metavar="BATCHxSEQ",
        help="input shapes to run (repeatable; default 1x16 and 8x128: the small-input and the pooled roads)",
    )
    warm.add_argument("--dtype", help="serve the weights in this dtype (as from_pretrained's dtype=)")
    warm.set_defaults(run=_warmup)
    _serve_parser(commands)
    return parser


def _serve_parser(commands: Any) -> None:
    from packrt.serve.limits import ServeLimits  # dataclass only: no FastAPI import to build the parser

    serve = commands.add_parser(
        "serve", help="serve a model directory over HTTP with an OpenAI-style API (needs packrt[serve])"
    )
    # every option defaults to None, so that one given on the command line is told from one left out: a value
    # left out comes from --config's file, else from packrt.serve.config.ServeOptions' default (the help's)
    serve.add_argument(
        "path",
        metavar="DIR",
        nargs="?",
        help="a model directory from_pretrained serves, or a .gguf file (or 'path' in the --config file)",
    )
    serve.add_argument(
        "--config",
        metavar="TOML",
        help="a TOML file setting any of these options by name (port = 9000, max_queued_requests = 128...); an "
        "option given on the command line wins over the file",
    )
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8000)")
    serve.add_argument("--name", help="the model's name in responses and /v1/models (default: the directory's)")
    serve.add_argument(
        "--weight-residency",
        help="as from_pretrained takes it (default: auto, each weight packed where the pack fits the free memory; "
        "packed for a .gguf file, whose other tensors are dequantized at load; borrowed keeps the mapped file as the "
        "one copy, for several server processes, at about half the speed for float weights)",
    )
    serve.add_argument(
        "--drain",
        type=int,
        metavar="SECONDS",
        help="on SIGTERM, how long requests in flight may take to finish (default 30)",
    )
    serve.add_argument(
        "--api-key",
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' on every route but /health (default: the PACKRT_API_KEY "
        "environment variable, else no key)",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="a browser origin allowed to call the server (CORS), e.g. http://localhost:3000; repeat for more, "
        "'*' for any",
    )
    serve.add_argument(
        "--dtype",
        help="serve the weights in this floating dtype (float32, bfloat16, float16; as from_pretrained's dtype=; "
        "default: the checkpoint's own)",
    )
    serve.add_argument(
        "--quantize",
        help="serve the linears quantized (int8; as from_pretrained's quantize=; default: the checkpoint's floats)",
    )
    serve.add_argument(
        "--access-log",
        metavar="FILE",
        help="append one JSON line per request (time, method, path, status, duration_ms, request_id, client, "
        "tokens) to FILE, '-' for standard output; uvicorn's own access lines are then off (default: uvicorn's)",
    )
    for field in dataclasses.fields(ServeLimits):
        default = field.default
        serve.add_argument(
            "--" + field.name.replace("_", "-"),
            type=type(default),
            metavar="N",
            help=f"{field.metadata['help']} (default {default})",
        )
    serve.set_defaults(run=_serve)


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    from packrt.serve import config
    from packrt.serve.limits import LimitsError

    try:
        options = config.resolve(vars(args), args.config)  # a ServeConfigError as raised: it names the file
    except LimitsError as err:
        raise UsageError(str(err)) from err
    if options.path is None:
        raise UsageError("packrt serve needs a model: give its directory (DIR), or 'path' in the --config file")
    try:
        from packrt import serve

        importlib.import_module("packrt.serve.app")  # FastAPI and uvicorn: the serve extra
    except ImportError as err:
        raise UsageError(f"packrt serve needs the serve extra ({err}); pip install 'packrt[serve]'") from err
    serve.serve(
        options.path,
        options.host,
        options.port,
        options.limits,
        weight_residency=options.weight_residency,
        name=options.name,
        drain_s=options.drain,
        api_key=options.api_key,
        cors_origins=options.cors_origin,
        dtype=options.dtype,
        quantize=options.quantize,
        access_log=options.access_log,
    )
    return _EXIT_OK


def _warmup(args: argparse.Namespace, out: TextIO) -> int:
    from packrt import warmup  # imports numba and compiles: only for this command

    try:
        shapes = [warmup.parse_shape(text) for text in args.shape] if args.shape else list(warmup.DEFAULT_SHAPES)
    except ValueError as err:
        raise UsageError(f"--shape: {err}") from err
    result = warmup.warmup(args.paths, shapes, args.dtype)
    print(
        f"warmed {len(result.models)} model(s) in {result.seconds:.1f} s: {result.compiled} kernel signatures "
        f"compiled and cached, {result.loaded} loaded from the cache",
        file=out,
    )
    print(f"kernel cache: {result.cache_dir or '(numba unavailable: numpy kernels, nothing to compile)'}", file=out)
    return _EXIT_OK


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
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse has already printed usage (or --help) itself
        return stop.code if isinstance(stop.code, int) else _EXIT_ERROR
    try:
        with _cwd_importable():
            code: int = args.run(args, sys.stdout)
    except BrokenPipeError:
        raise  # an OSError, but not a failure of the command: main handles it
    except (UsageError, PackrtError, OSError) as err:
        print(f"packrt {args.command}: error: {_message(err)}", file=sys.stderr)
        return _EXIT_ERROR
    except Exception as err:  # a defect of packrt, not of the input: still no traceback, never "mismatch"
        print(
            f"packrt {args.command}: internal error ({type(err).__name__}): {_message(err)}; please report it "
            "with the command line",
            file=sys.stderr,
        )
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
