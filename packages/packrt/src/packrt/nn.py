"""``packrt.nn``: Module, Parameter, Buffer, the containers and the layers."""

from packrt_core.nn import *  # noqa: F403
from packrt_core.nn import __all__ as __all__
