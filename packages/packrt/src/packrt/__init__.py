"""packrt: a small inference runtime with a documented Module contract.

This meta-package re-exports the public API of the packrt distributions under one name.
"""

from packrt import cuda as cuda
from packrt import errors as errors
from packrt_core import *  # noqa: F403 - the meta-package's job is to re-export
from packrt_core import __all__ as _core_all
from packrt_core import bool as bool
from packrt_core import float as float

__version__ = "0.1.0"
__all__ = [*_core_all]
