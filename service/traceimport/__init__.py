"""``trace import``: other tools' rollout records (veRL dumps, CSV/JSONL/Parquet tables) as a trace.

``importers.py`` reads the records and writes the project's trace format; ``tokenizer.py`` finds,
loads and runs the ``tokenizer.json`` that counts the tokens of veRL's decoded text. The command
itself is service/commands/trace.py.
"""
