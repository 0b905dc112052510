"""The `oms` command line: one module per command group, each parsing its options, calling
one gate function and rendering the result (`render.py`). `main.py` holds the root group and
the lazy command table; importing this package imports nothing else."""
