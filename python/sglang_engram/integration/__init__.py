"""How the plugin enters SGLang: ``register()`` (the ``sglang.srt.plugins`` entry point),
the hook table (every upstream target as data), the import watch that applies a hook
when its module is first imported, the pinned SGLang release, the ``sglang serve``
backend, CPU-engine serving (the ``sgl_kernel`` stand-in, PD defaults), request checks
(a 400 for bad token ids), failed-lookup aborts (a 500 for the batch's requests) and
the registration of our own model architectures.

Nothing here is imported eagerly: ``register()`` stays cheap.
"""

__all__ = [
    "architectures",
    "cpu_serving",
    "hooks",
    "import_watch",
    "kernel_standin",
    "plugin",
    "request_checks",
    "serve_backend",
    "version_pin",
]
