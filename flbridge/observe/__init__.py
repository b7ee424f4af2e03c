"""Seeing what ran where: the profiler (device time in torch.profiler,
flbridge.profiler's summary), autocompare (every op again on the CPU,
diffed) and coverage (the route each op of a model would take, without
running a kernel).  flbridge.profiler, flbridge.autocompare() and
flbridge.coverage() are their public faces."""
from . import autocompare, coverage, profiler
