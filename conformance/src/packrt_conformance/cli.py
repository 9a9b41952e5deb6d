"""``packrt-conformance``: run the installed suite; every argument goes to pytest.

``--help`` prints the command's own options; ``--pytest-help`` prints pytest's.

Example: ``packrt-conformance --impl torch --expectations torch.txt --report-json out.json``.

``--impl mymodule:Adapter`` imports ``mymodule`` the way ``python -m`` does: from the current
directory first, then ``sys.path`` (``PYTHONPATH``). When that import fails the command prints what
failed and how to fix it, and exits 4 (pytest's usage-error status, as for any bad ``--impl``);
otherwise the exit status is pytest's.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from packrt_conformance import isolation

__all__ = ["check_adapter_first", "help_text", "import_hint", "main", "suite_dir"]

_EXIT_USAGE = int(pytest.ExitCode.USAGE_ERROR)


def suite_dir() -> Path:
    """The directory of the shipped suite tests."""
    return Path(__file__).parent / "suite"


def _option(args: Sequence[str], name: str) -> str | None:
    """The value of option ``name`` in ``args`` (``name X`` or ``name=X``), the last one winning (read
    from the raw command line, before pytest parses it)."""
    value = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(f"{name}="):
            value = arg.partition("=")[2]
    return value


def _impl_spec(args: Sequence[str]) -> str | None:
    """The value of ``--impl`` in ``args`` (``--impl X`` or ``--impl=X``), the last one winning."""
    return _option(args, "--impl")


def import_hint(module_name: str, err: ImportError) -> str:
    """Where the module was looked for, and the fix."""
    missing = err.name
    found_but_broken = missing is not None and missing != module_name and not module_name.startswith(f"{missing}.")
    if found_but_broken:
        return (
            f"hint: {module_name!r} was found, but importing it failed on {missing!r}: install what your "
            "adapter needs, or fix its imports"
        )
    top, _, _ = module_name.partition(".")
    looked = f"from the current directory ({os.getcwd()}) and then sys.path"
    fix = (
        f"run packrt-conformance from the directory holding {top}.py (or the package {top}/), "
        "or put that directory on PYTHONPATH (PYTHONPATH=/path/to/dir packrt-conformance --impl ...)"
    )
    return f"hint: --impl modules are imported as `python -m` would, {looked}; {fix}"


def _adapter_module_error(spec: str | None) -> str | None:
    """The error and hint when the module of ``--impl module:object`` does not import, else None."""
    if spec is None or ":" not in spec:
        return None  # an entry-point name: the plugin reports those
    module_name = spec.partition(":")[0]
    try:
        importlib.import_module(module_name)
    except ImportError as err:
        return f"packrt-conformance: error: --impl {spec}: cannot import module {module_name!r} ({err})\n" + (
            import_hint(module_name, err)
        )
    return None


@contextlib.contextmanager
def _cwd_importable() -> Iterator[None]:
    """The current directory first on ``sys.path`` during the run, as ``python -m`` puts it."""
    cwd = os.getcwd()
    if cwd in sys.path:  # already importable: leave sys.path alone
        yield
        return
    sys.path.insert(0, cwd)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # the run may have taken it off itself
            sys.path.remove(cwd)


_HELP = ("-h", "--help")
_PYTEST_HELP = "--pytest-help"
_CHECK_ADAPTER = "--check-adapter"


def check_adapter_first(args: Sequence[str]) -> int | None:
    """``--check-adapter``: the adapter's own problems printed and exit status 4 before any clause
    runs; None when it holds (the run goes on)."""
    from packrt_conformance.adapter import AdapterError
    from packrt_conformance.adapter_check import adapter_problems, format_problems
    from packrt_conformance.adapters import build_adapter

    spec = _impl_spec(args)
    if spec is None:
        print(f"packrt-conformance: error: {_CHECK_ADAPTER} needs --impl SPEC", file=sys.stderr)
        return _EXIT_USAGE
    try:
        problems = adapter_problems(build_adapter(spec, _option(args, "--device")))
    except AdapterError as err:
        print(f"packrt-conformance: error: {err}", file=sys.stderr)
        return _EXIT_USAGE
    print(format_problems(spec, problems), file=sys.stderr if problems else sys.stdout)
    return _EXIT_USAGE if problems else None


def help_text() -> str:
    """``packrt-conformance --help``: the command's own usage and options, and where pytest's are."""
    from packrt_conformance import plugin  # the options are declared once, for pytest and for this text

    parser = argparse.ArgumentParser(
        prog="packrt-conformance",
        usage="%(prog)s [--impl SPEC] [options] [pytest options and arguments]",
        description="Run the Module contract conformance suite against an implementation (its adapter). "
        "Every argument this command does not know is handed to pytest (-k, -x, -q, --lf, ...).",
        epilog=f"pytest's own options: {_PYTEST_HELP} (pytest's full --help, with these options in its "
        "'packrt-conformance' group). The exit status is pytest's; 4 for a bad --impl.",
        add_help=False,
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this message and exit")
    parser.add_argument(_PYTEST_HELP, action="store_true", help="show pytest's help (every pytest option) and exit")
    parser.add_argument(
        _CHECK_ADAPTER,
        action="store_true",
        help="check the adapter first (every protocol member and signature, the dtype names, meta_init, a "
        "probe per declared capability); its problems are printed and the command exits 4 before any clause runs",
    )
    group = parser.add_argument_group(*plugin.OPTION_GROUP)
    plugin.add_options(group.add_argument)
    return parser.format_help()


def main(argv: list[str] | None = None) -> int:
    """Run pytest over the shipped suite with the conformance plugin loaded; return its exit code.

    ``-h`` / ``--help`` prints the command's own options (:func:`help_text`) and returns 0;
    ``--pytest-help`` prints pytest's full help instead.
    """
    args = sys.argv[1:] if argv is None else argv
    if _PYTEST_HELP in args:
        args = [arg for arg in args if arg != _PYTEST_HELP and arg not in _HELP] + ["--help"]
    elif any(arg in _HELP for arg in args):
        print(help_text(), end="")
        return 0
    with _cwd_importable():
        problem = _adapter_module_error(_impl_spec(args))
        if problem is not None:
            print(problem, file=sys.stderr)
            return _EXIT_USAGE
        if _CHECK_ADAPTER in args:
            args = [arg for arg in args if arg != _CHECK_ADAPTER]
            status = check_adapter_first(args)
            if status is not None:
                return status
        with isolation.isolated_environment():  # the suite's own ini, rootdir and no conftest (isolation.py)
            return int(pytest.main([*isolation.pytest_args(), *args]))


if __name__ == "__main__":
    raise SystemExit(main())
