"""packrt's exception hierarchy (see :mod:`packrt_core.errors`)."""

from packrt_core.errors import *  # noqa: F403
from packrt_core.errors import __all__ as __all__
