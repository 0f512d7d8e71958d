"""The outer step (`RunConfig.rules.outer_step`, notebook 02).

Part of `edit_lab.rules` (a reader's own rule, run by every rank), which re-exports every name here and says
how the rules work."""

from __future__ import annotations

from collections.abc import Callable

from edit_lab.rules.source import RuleError, load_rule


OUTER_STEP_SIGNATURE = "fn(anchor, delta_bar, buf, lr, momentum) -> (new_anchor, new_buf)"


def outer_step(source: str) -> Callable:
    """The outer-step rule as every rank calls it on one unit's anchor shard: `step(anchor, delta_bar, buf, lr,
    momentum) -> (new_anchor, new_buf)`, two tensors of the anchor's dtype, device and shape.

    The reader's function gets copies (only what it returns counts, whatever it does in place) and the lr and
    momentum as floats; a pair of anything `torch.as_tensor` reads (a tensor, a list of numbers) is accepted."""
    import torch

    fn = load_rule(source, "outer step rule", names={"torch": torch})

    def step(anchor, delta_bar, buf, lr: float, momentum: float):
        got = fn(anchor.clone(), delta_bar.clone(), buf.clone(), float(lr), float(momentum))
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            shown = " ".join(repr(got).split())
            raise RuleError(f"the outer step rule returned {shown[:80]}, not the pair (new_anchor, new_buf)")
        out = []
        for what, x in zip(("new anchor", "new buffer"), got):
            try:
                t = torch.as_tensor(x, dtype=anchor.dtype, device=anchor.device)
            except Exception as e:  # noqa: BLE001 - None, a string, an object: not values
                raise RuleError(f"the outer step rule returned a {what} of type {type(x).__name__}, not a "
                                f"tensor") from e
            if t.shape != anchor.shape:
                raise RuleError(f"the outer step rule returned a {what} of shape {tuple(t.shape)} for an anchor "
                                f"shard of shape {tuple(anchor.shape)}: both must have the anchor's shape")
            out.append(t.detach())
        return out[0], out[1]

    return step


def outer_step_problem(source: str, lr: float = 0.7, momentum: float = 0.8) -> str | None:
    """Why the outer-step rule cannot run (None when it can), found by calling it for three steps on a 5-value and
    a 1-value anchor shard (the buffer starting at zeros), with the run's lr and momentum, before any process
    starts: it must not fail, must return two tensors of the anchor's shape, and finite ones for finite inputs."""
    try:
        import torch

        rule = outer_step(source)
        deltas = ([0.2, -0.1, 0.05, 0.0, 1.0], [0.1, 0.1, -0.2, 0.3, -0.5], [0.3, 0.0, 0.1, -0.1, 0.2])
        for n in (5, 1):
            anchor, buf = torch.linspace(-1.0, 1.0, n), torch.zeros(n)
            for d in deltas:
                new_anchor, new_buf = rule(anchor, torch.tensor(d[:n]), buf, lr, momentum)
                if not (bool(torch.isfinite(new_anchor).all()) and bool(torch.isfinite(new_buf).all())):
                    raise RuleError(f"the outer step rule returned non-finite values for finite inputs "
                                    f"({new_anchor.tolist()}, {new_buf.tolist()})")
                anchor, buf = new_anchor, new_buf
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{OUTER_STEP_SIGNATURE}; it fails: {type(e).__name__}: {e}"
    return None
