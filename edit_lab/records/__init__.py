"""Layer 1, the run records: what every run writes and everything else reads (no torch at import).

`events` (the span log and its clock), `rundir` (a run directory's files and `summarize`), `run` (`Run`, a
loaded run), `overlap` (hidden and exposed communication), `analysis` (tables of runs), `trace` (Perfetto),
`examples/` (shipped runs). The engine writes these records, so they sit below it.
"""
