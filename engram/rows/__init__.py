"""What every placement's tables use around their rows, whatever holds them:

- :mod:`.set_assoc`: the set-associative index of the HBM hot-row cache (torch, on its
  device);
- :mod:`.seed_rows`: a frequency profile's hottest rows of a table, and which of them a
  set-associative cache holds at once (the hot cache and the ssd RAM cache seed from
  them);
- :mod:`.read_ahead`: handles of rows read ahead of their lookup, the thread that fills
  them and a table's live handles within its budget (``ssd`` fills them; every
  placement's ``read_ahead`` returns one or ``None``).

It builds on the compiled loops of :mod:`engram.ssd.kernels` and nothing above them.
"""
