"""SSD rows read before the layer that needs them, from the scheduler's hooks: at
admission and one decode step ahead (``ssd_read_ahead``; under the overlap scheduler
from each launched step's sampled tokens: ``overlap_read_ahead``).
"""

__all__ = ["overlap_read_ahead", "ssd_read_ahead"]
