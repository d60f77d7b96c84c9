"""`costmodel report`: plan or simulation results -> a finance CSV with its data dictionary, or a
self-contained HTML page with charts (api.py; sources.py reads the results through their schemas)."""
