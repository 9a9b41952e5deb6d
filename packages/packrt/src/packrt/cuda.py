"""``packrt.cuda``: whether CUDA tensors can be made here."""

from packrt_core.cuda import device_count, is_available

__all__ = ["device_count", "is_available"]
