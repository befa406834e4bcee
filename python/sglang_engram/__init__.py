"""SGLang plugin for Engram models: tables in HBM, host DRAM, on SSD, or off.

Loaded by SGLang through the ``sglang.srt.plugins`` entry point
(:func:`sglang_engram.integration.plugin.register`). Importing this package imports neither
SGLang nor torch; everything heavy happens when SGLang imports the modules we hook.
"""

from sglang_engram.integration.version_pin import PINNED_SGLANG_VERSION

__all__ = ["PINNED_SGLANG_VERSION"]
