"""packrt's CUDA kernels on cupy.

The backend registers under the entry-point group ``packrt.backends`` as ``cuda``. Its
``xp`` is cupy and its kernels are :data:`CUDA_KERNELS`: the CPU package's array-generic
kernels with the GPU ones (fused norms, softmax, activations, cuBLAS linear, int8 linear,
attention) put in their place. When cupy is missing or no GPU answers it reports itself
unavailable and says which, and packrt-core turns a request for a CUDA tensor into an
error carrying that reason.
"""

from packrt_kernels_cuda.cuda import CudaBackend
from packrt_kernels_cuda.kernels import CUDA_KERNELS

__all__ = ["CUDA_KERNELS", "CudaBackend"]
__version__ = "0.2.0"
