"""packrt's CUDA kernels on cupy.

The backend registers under the entry-point group ``packrt.backends`` as ``cuda``. It
runs the same array-generic kernels as the CPU backend with ``xp = cupy``; when cupy is
missing or no GPU answers it reports itself unavailable and says why, and packrt-core
turns a request for a CUDA tensor into an error carrying that reason.
"""

from packrt_kernels_cuda.cuda import CudaBackend

__all__ = ["CudaBackend"]
__version__ = "0.2.0.dev0"
