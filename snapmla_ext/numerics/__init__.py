"""Numerical fidelity study of SnapMLA's FP8 decode against other FP8 schemes (issue 4; docs/numerics.md).

Run it with `python -m snapmla_ext.numerics` (see __main__.py). Modules, one role each:
    data     synthetic MLA layer stack and the loader/writer of a user's dump
    schemes  the schemes compared, each a set of inputs to reference.decode_dense
    metrics  error metrics against float64 attention
    paged    the paged-cache path: page-order check, compiled-kernel run and its comparison with the emulation
    study    runs everything, returns a dict of results
    report   terminal tables and JSON;  plots: matplotlib PNGs
"""
