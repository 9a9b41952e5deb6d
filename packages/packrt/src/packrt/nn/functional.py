"""``packrt.nn.functional``: the stateless operations the layers use (``F.linear``, ``F.gelu``, ...).

The functions are packrt-core's (:mod:`packrt_core.nn.functional`), re-exported under the name a
PyTorch user imports: ``import packrt.nn.functional as F``.
"""

from packrt_core.nn.functional import *  # noqa: F403 - the meta-package's job is to re-export
from packrt_core.nn.functional import __all__ as __all__
