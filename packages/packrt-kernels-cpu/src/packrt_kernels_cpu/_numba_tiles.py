"""Calling an LLVM tile (:mod:`.llvm_tiles`) from a compiled loop by its address.

The loops of :mod:`._numba_plan` and :mod:`._numba_int8` take the tiles as an int64 array of machine
addresses, not as ctypes functions: numba reads a ctypes function's address through Python each
time it receives one (about 2 us a function, on every GEMM), and cannot cache a loop handed them.
An address is an integer like the others, so the loops cache and their calls cost what an int costs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from llvmlite import ir  # type: ignore[import-untyped]
from numba import types
from numba.extending import intrinsic

_I64 = ir.IntType(64)
_PTR = ir.IntType(8).as_pointer()
# every tile: (out, ldo, a, lda, b, count) -> void, pointers as addresses, counts as int64
_TILE = ir.FunctionType(ir.VoidType(), [_PTR, _I64, _PTR, _I64, _PTR, _I64])


@intrinsic
def _call_tile(
    typingctx: Any, address: Any, out: Any, ldo: Any, a: Any, lda: Any, b: Any, count: Any
) -> tuple[Any, Any]:
    """``tile(out, ldo, a, lda, b, count)`` for the tile at ``address``; every argument an integer (the
    pointers as addresses). Only for tiles :func:`.llvm_tiles.compile_tiles` built, kept alive by the caller."""
    arguments = (address, out, ldo, a, lda, b, count)
    if not all(isinstance(argument, types.Integer) for argument in arguments):
        return None  # type: ignore[return-value]  # numba's way to say "no match": a TypingError names the types
    signature = types.void(*(types.int64,) * 7)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        tile = builder.inttoptr(args[0], _TILE.as_pointer())
        out_, ldo_, a_, lda_, b_, count_ = args[1:]
        pointer = builder.inttoptr
        builder.call(tile, [pointer(out_, _PTR), ldo_, pointer(a_, _PTR), lda_, pointer(b_, _PTR), count_])
        return context.get_dummy_value()

    return signature, codegen


# as the compiled loops call it (mypy reads numba's decorator as adding the typing context argument)
call_tile = cast(Callable[[int, int, int, int, int, int, int], None], _call_tile)

__all__ = ["call_tile"]
