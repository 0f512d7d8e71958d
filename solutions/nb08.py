"""Answers of notebook 08 (capstone): the diagnoses, measured from the run directories with the taught tools.

The diagnosis cell computes them (it does not state them), so that it holds for a fresh set of mysteries
(`MYSTERY_ROOT`) too: each kind of trouble is in exactly one run, so the bad data is the run with one
replica's training loss far above its peers', the straggler the run with a replica stretched
"consistent"-ly (`straggle` events), and the slow link the third; the factor and the bandwidth follow the
notebook's two recipes, rounded to the nearest value its table allows.
"""

NOTEBOOK = "08_capstone.ipynb"

ANSWERS = [
    {"marker": 'my_prediction = None  # "yes" or "no"',
     "assigns": "my_prediction", "kind": "written",
     "source": """\
my_prediction = "no"  # the penalty keeps the noisy replica out wherever it flags it; the other three keep learning"""},
    {"marker": "# Your turn: the link's bandwidth in MB/s of the run you suspect, from rank 0's `sync_reduce` events.",
     "assigns": None, "kind": "written",
     "source": """\
# The link's bandwidth in MB/s, from rank 0's `sync_reduce` events: within a sync the units' all-reduces
# complete one after another, each gap 2 ms of latency + bytes / b.
LATENCY_S = 0.002  # the mysteries' link latency (the table at the top)


def link_bandwidth_mb_s(run) -> float:
    \"\"\"Median over the syncs of Σ bytes / Σ (gap − latency) between rank 0's consecutive completions.\"\"\"
    ev = analysis.events_table(run)
    one_rank = ev[(ev["kind"] == "sync_reduce") & (ev["rank"] == 0)]
    rates = []
    for _, sync in one_rank.groupby("step"):
        sync = sync.sort_values("t1")
        gaps = (sync["t1"].diff().iloc[1:] - LATENCY_S).sum()
        if gaps > 0:
            rates.append(sync["bytes"].iloc[1:].sum() / gaps / 1e6)
    return float(pd.Series(rates).median()) if rates else float("inf")


# only the slow link's run measures its link: on a fast one the gaps are the compute between the units
print({name: f"{link_bandwidth_mb_s(r):.2f} MB/s" for name, r in runs.items()})"""},
    {"marker": "diagnosis = {",
     "assigns": "diagnosis", "kind": "diagnosis", "check": "diagnosis.update(DIAGNOSES)",
     "setup": ["MYSTERY_ROOT = None", "runs = capstone.mysteries(root)", "def late_loss(run, last=8):",
               "# Your turn: the link's bandwidth in MB/s of the run you suspect, from rank 0's `sync_reduce` events."],
     "says": "3 of 3 right", "result": "all(verdicts.values())",
     "source": """\
import math


def nearest(x: float, options) -> float:
    \"\"\"The allowed value closest to the measured one, on a log scale (the values are a factor ~3 apart).\"\"\"
    return min(options, key=lambda o: abs(math.log(x / o)))


def straggle_factor(run, replica: int) -> float:
    \"\"\"k ≈ 1 + straggle / own compute of each stretched step, median (the worked example above).\"\"\"
    ev = analysis.events_table(run)
    mine = ev[(ev["replica"] == replica) & (ev["shard"] == 0)]
    own = mine[mine["kind"].isin(["compute_fwd", "compute_bwd", "optimizer"])].groupby("step")["duration"].sum()
    stretch = mine[(mine["kind"] == "straggle") & (mine["reason"] == "consistent")].set_index("step")["duration"]
    return float((1 + stretch / own.reindex(stretch.index)).median())


def consistent_straggle_s(run) -> pd.Series:
    \"\"\"Seconds per replica its steps were stretched on purpose (random pauses left out).\"\"\"
    ev = analysis.events_table(run)
    mine = ev[(ev["kind"] == "straggle") & ev["reason"].fillna("").str.startswith("consistent")]
    return mine.groupby("replica")["duration"].sum().reindex(range(run.config.replicas), fill_value=0.0)


late = {name: late_loss(r) for name, r in runs.items()}  # table 2: a replica fed noise stays near ln 256
bad_run = max(late, key=lambda name: late[name].max() - late[name].median())
stretched = {name: consistent_straggle_s(r) for name, r in runs.items() if name != bad_run}
slow_run = max(stretched, key=lambda name: stretched[name].max())
link_run = next(name for name in runs if name not in (bad_run, slow_run))
slow_replica = int(stretched[slow_run].idxmax())
diagnosis = dict(sorted({
    bad_run: ("bad_data", {"replica": int(late[bad_run].idxmax())}),
    slow_run: ("straggler", {"replica": slow_replica,
                             "factor": nearest(straggle_factor(runs[slow_run], slow_replica), capstone.FACTORS)}),
    link_run: ("slow_link", {"bandwidth_mb_s": nearest(link_bandwidth_mb_s(runs[link_run]), capstone.BANDWIDTHS_MB_S)}),
}.items()))
diagnosis"""},
]

MAY_MISS = {}

# 08 has no score() cell: its check cell prints how many diagnoses are right
SCORE_CELL = 'print(f"{sum(verdicts.values())} of 3 right")'
SCORE_PATTERN = r"(\d+) of (\d+) right"
