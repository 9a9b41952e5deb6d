"""One side of the same-run A/B: builds the kernel cases on the packrt sources first on its ``sys.path`` and
times them on request. Started by ``ab.py`` with one revision's ``packages/*/src`` on PYTHONPATH.

It speaks JSON lines: one request per line on stdin, one answer per line on stdout (nothing else is
written there). Requests (``op``): ``hello`` (where packrt was imported from), ``build`` (build and
check ``cases``, then warm them up), ``calibrate`` (one call's CPU seconds of ``case``), ``time``
(``batches`` batches of ``inner`` calls of ``case``: each batch's process CPU seconds per call).
Process CPU time, not wall time: the time the machine gave to other work is not counted, and the
A/B caps every pool at one thread, so it is this one kernel's time; a case made for two threads
(``KernelCase.threads``) runs under a cap of two, and its CPU time then includes the pool's waiting.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import kernel_cases

WARMUP_CALLS = 3


class Worker:
    def __init__(self) -> None:
        self.runs: dict[str, Callable[[], Any]] = {}

    def _cap(self, name: str) -> Callable[[], Any]:
        """The case's run, with the thread cap set to the case's first (a change of cap costs milliseconds:
        never inside the timed loop)."""
        from packrt_kernels_cpu import settings

        wanted = kernel_cases.BY_NAME[name].threads
        if settings.current().threads != wanted:
            settings.update(threads=wanted)
        return self.runs[name]

    def hello(self, request: dict[str, Any]) -> dict[str, Any]:
        import packrt_base
        import packrt_kernels_cpu

        return {"packrt_kernels_cpu": packrt_kernels_cpu.__file__, "packrt_base": packrt_base.__file__}

    def build(self, request: dict[str, Any]) -> dict[str, Any]:
        built: list[str] = []
        missing: dict[str, str] = {}
        wrong: dict[str, str] = {}
        for name in request["cases"]:
            case = kernel_cases.BY_NAME[name]
            try:
                made = case.build()
            except Exception as err:  # a revision without this kernel (or its current signature)
                missing[name] = f"{type(err).__name__}: {err}"
                continue
            problem = kernel_cases.check(case, made) if request.get("check", True) else None
            if problem is not None:
                wrong[name] = problem
                continue
            self.runs[name] = made.run
            for _ in range(WARMUP_CALLS):
                self._cap(name)()
            built.append(name)
        return {"built": built, "missing": missing, "wrong": wrong}

    def calibrate(self, request: dict[str, Any]) -> dict[str, Any]:
        run = self._cap(request["case"])
        spent = []
        for _ in range(5):
            start = time.process_time()
            run()
            spent.append(time.process_time() - start)
        return {"seconds": statistics.median(spent)}

    def time(self, request: dict[str, Any]) -> dict[str, Any]:
        run, inner = self._cap(request["case"]), int(request["inner"])
        times = []
        for _ in range(int(request["batches"])):
            start = time.process_time()
            for _ in range(inner):
                run()
            times.append((time.process_time() - start) / inner)
        return {"times": times}


def main() -> int:
    worker = Worker()
    out = sys.stdout
    sys.stdout = sys.stderr  # anything a kernel or library prints stays off the answer channel
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = getattr(worker, request["op"])(request)
        except Exception:
            answer = {"error": traceback.format_exc()}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
