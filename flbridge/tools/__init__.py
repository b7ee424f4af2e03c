"""Tools for vendors: `flbridge doctor` (doctor) and `flbridge scaffold`
(scaffold, with what a header says about its runtime in scaffold_header and
the C-function-to-aten-op matching in scaffold_ops)."""
