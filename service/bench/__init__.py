"""``make bench``: the benchmark sections written into docs/benchmarks.md.

``report.py`` runs the sections and writes each between its markers (``python -m service.bench.report``);
``sections.py`` holds the sections that wrap a CLI benchmark (``rollout-scheduler bench ...``, whose
commands are service/commands/bench_*.py). One folder, so whoever adds a benchmark finds both halves.
"""
