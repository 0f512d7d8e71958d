"""Layer 2, the core: one rank's model, collectives, sharding and the EDiT sync (read this folder first).

In reading order: `model` (a small Llama, cut into the units a sync walks through), `mesh` (shard groups × sync
groups), `comm` (collectives, async handles, the simulated slow link), `sharding` (ZeRO-3: the forward calls the
method's `pre_unit(l)` before each unit's all-gather), `methods/` (`base` the hooks, `local_sgd` the schedule,
`edit` the layer-wise sync, `aedit` the time-triggered one, and the baselines), `outer` (Δ = a − θ and the
outer Nesterov step), `penalty` (the pseudo-gradient penalty: decisions, weights, clip; its detector and knobs
are torch-free, in `edit_lab/detector.py` and `edit_lab/config/penalty.py`) and `wire` (compressed
pseudo-gradients); when the replicas talk is `edit_lab/protocol.py` (torch-free, shared with the simulator and
the config's checks). It knows nothing of clocks, processes or the course.
"""
