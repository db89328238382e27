"""Reports: pure functions of stored runs (terminal tables, compare, HTML, Markdown).

Nothing here measures; every figure is derived from a RunRecord. Each view is its own module,
loaded by whoever draws it. Numbers and case labels come from ``torchmark.format``, which
library code uses too.
"""
