"""``packrt.io``: safetensors checkpoints (the public API of :mod:`packrt_io`, re-exported)."""

from packrt_io import *  # noqa: F403 - the meta-package's job is to re-export
from packrt_io import __all__ as __all__
