"""Comparison runs: ``python -m sglang_engram.compare sweep|report``.

``sweep`` measures configs (placements, deployments, GPUs) x concurrencies with SGLang's
own serving benchmark into ``results.jsonl``; ``report`` merges results files from any
machines into Pareto frontiers, values at target interactivities, tokens per dollar,
dominance shares and charts. Needs the ``compare`` extra (scipy, matplotlib, psutil).
"""
