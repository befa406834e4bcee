"""Rows fetched before the layer that needs them: lookups started on a side stream as
soon as a batch's row ids are known (``side_stream``), and SSD rows read at admission and
one decode step ahead from the scheduler's hooks (``ssd_read_ahead``; under the overlap
scheduler from each launched step's sampled tokens: ``overlap_read_ahead``).
"""

__all__ = ["overlap_read_ahead", "side_stream", "ssd_read_ahead"]
