"""SSD rows read before the layer that needs them, from the scheduler's hooks: at
admission and one decode step ahead (``ssd``; under the overlap scheduler from each
launched step's sampled tokens: ``overlap``). The flag is ``--engram-prefetch``.
"""

__all__ = ["overlap", "ssd"]
