"""``packrt.hooks``: RemovableHandle and the ready-made hooks (profile, capture, check_finite, trace_shapes)."""

from packrt_hooks import *  # noqa: F403
from packrt_hooks import __all__ as __all__
