"""``packrt.nn``: Module, Parameter, Buffer, the containers, the layers and residency.

A package, so ``import packrt.nn.functional as F`` and ``from packrt.nn import functional``
work as they do with ``torch.nn``; the names are packrt-core's (``packrt_core.nn``).
"""

# The star import binds packrt_core's functional; the last line rebinds this package's own.
from packrt_core.nn import *  # noqa: F403, I001 - the meta-package's job is to re-export
from packrt_core.nn import __all__ as __all__
from packrt.nn import functional as functional  # type: ignore[no-redef]
