"""Figures of runs: plain `plotly.graph_objects.Figure`s built by pure functions of loaded runs.

One module per figure family, one colour table for all of them:

    timeline_figure(run, steps=(10, 14))    one rank per replica: compute, waiting, sync-group traffic (view="full": every
                                            rank and collective); hidden vs exposed communication
    penalty_figure(run)                     EDiT's per-unit outlier, weight and clip decisions
    replica_pace_figure([run_a, run_b])     who waits: each replica's tokens/s against its own pace, seconds blocked
    capacity_figure([run_a, run_b])         all replicas together against the capacity bound (Σ own paces)
    straggler_figure([run_a, run_b])        both, and local steps per round, in four panels (explorers, report)
    rounds_figure([sync, edit, aedit])      one time axis, a row per replica: local steps, waiting, syncs
    step_split_figure({"A": a, "B": b}, 7) where one step went per replica of each run: compute, straggling, blocked
    loss_figure([run_a, run_b])             loss against steps and against seconds
    memory_figure(run)                      bytes per rank of parameters, optimizer and method state
    write_html(figs, "page.html")           standalone HTML; write_trace(run) for Perfetto

Every function accepts a `Run`, a run directory or its path; the widgets and the report only
re-filter and redraw these.

The notebooks' own figures, from numbers they computed (import them from their modules):
concepts.py (the method's arithmetic: schedules, the mesh, shards, outer state), prefetch.py
(notebook 04's sync split and bandwidth sweep), sweeps.py (a τ sweep, a simulated cluster's links).
"""

from edit_lab.viz.colors import kind_color, kind_label
from edit_lab.viz.export import figures_html, trace_dict, write_html, write_trace
from edit_lab.viz.losses import budget_loss_figure, loss_figure
from edit_lab.viz.memory import memory_figure
from edit_lab.viz.penalty import penalty_figure
from edit_lab.viz.rounds import round_blocks, round_marks, rounds_figure
from edit_lab.viz.step_split import step_split_figure, step_split_table
from edit_lab.viz.stragglers import capacity_figure, replica_pace_figure, straggler_figure
from edit_lab.viz.timeline import timeline_figure

__all__ = ["budget_loss_figure", "capacity_figure", "figures_html", "kind_color", "kind_label", "loss_figure", "memory_figure",
           "penalty_figure", "replica_pace_figure", "round_blocks", "round_marks", "rounds_figure", "step_split_figure", "step_split_table",
           "straggler_figure", "timeline_figure",
           "trace_dict", "write_html", "write_trace"]
