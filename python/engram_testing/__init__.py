"""What the tests (``test/``) and the benchmarks (``benchmark/``) share, importable by both
without pytest; never shipped in the plugin, never imported by ``engram``,
``engram_kernels`` or ``sglang_engram``.

- ``server``: real SGLang servers and the sglang-router started and stopped (the CPU
  engine on a machine without a GPU); ``client``: requests and ``/metrics`` samples.
- ``reference``: served tokens checked against the tiny Engram reference model.
- ``qwen4_tiny_checkpoint`` (+ ``qwen4_tiny_weights``): a tiny random Qwen3.8-Flash-Next
  (``qwen4_exp``) checkpoint, ``python -m engram_testing.qwen4_tiny_checkpoint``.
- ``tree_memory``: a server's process-tree RSS and its largest mappings.
- ``plain``: plain computations the tests check the core library's fast paths against.
- ``soak/``: the PD soak's load, faults, resource samples and report.
- ``bench_text``: the benchmarks' text, a pinned package's sources split train/held-out
  by a committed file list (``bench_text.tsv``), the same on every machine.
- ``tiers/``: the tier benchmark's held-out prompts, RAM-cache curve and report.
"""
