"""Reports: pure functions of stored runs (terminal tables, compare, HTML, Markdown).

Nothing here measures; every figure is derived from a RunRecord.
"""

from torchmark.report.table import ceilings_table, results_table, run_tables, seed_placement

__all__ = ["ceilings_table", "results_table", "run_tables", "seed_placement"]
