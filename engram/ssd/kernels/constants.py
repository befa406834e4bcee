"""Constants the compiled kernels share with plain Python (importing this module does
not import numba)."""

# columns of a read plan's runs: first block, block count, first block in the buffer
FIRST, COUNT, SLOT = 0, 1, 2
# columns of a read plan's batches: where each batch's runs / rows / blocks end
END_RUN, END_ROW, END_BLOCK = 0, 1, 2
# the tag of an empty slot of the RAM row cache
MISS = -1
