"""``python -m sglang_engram doctor``: the SGLang version, which hooks applied, the
``sgl_kernel`` in use, the GPU, and the host-table checks (``HSA_XNACK``, device
addresses of registered host memory, huge pages).
"""

__all__ = ["quiet", "report", "rocm"]
