"""The tiny Engram model: a small Qwen3-like LM with Engram layers, built offline.

``python -m engram.model build --out DIR`` writes it as an HF-style directory (the bundled
model trained on the Python standard library by ``python -m engram.model train``, or with
``--random`` deterministic random weights);
:class:`TinyEngramModel` runs it in torch on the CPU with any table placement.
"""

from engram.model.builder import BuildOptions, build_tiny_model
from engram.model.config import TinyEngramConfig
from engram.model.modeling import DecodeState, TinyEngramModel

__all__ = [
    "BuildOptions",
    "DecodeState",
    "TinyEngramConfig",
    "TinyEngramModel",
    "build_tiny_model",
]
