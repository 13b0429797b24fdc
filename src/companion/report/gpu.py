"""The GPU chapter's tables and sentences, from ``companion.energy.reference.reference_numbers``."""

from __future__ import annotations

import pandas as pd

from companion.energy.reference import bert_base_b32
from companion.report.figures import TIER_WORDS
from companion.report.numbers import host_slug_words, listed


TIER_NAMES = {"prior": "the prior", "calibrated": "the calibrated tier", "fitted": "the fitted tier"}


def tiers_text(numbers: dict, words: dict) -> str:
    """The clause "the tiers miss by (time / energy): ..." on a set of runs (``numbers``: ``runs``, ``tiers``):
    each tier's step-time and energy errors, in the order of ``words`` ({tier: its name in the sentence}), then
    whose stated intervals left runs out."""
    n, t = numbers["runs"], numbers["tiers"]
    pairs = ", ".join(
        f"{w} {t[k]['time_mape_pct']:.1f} % / {t[k]['energy_mape_pct']:.1f} %"
        for k, w in words.items()
        if k in t
    )
    short = [
        f"{TIER_NAMES.get(k, k)}'s {target} intervals covered {t[k][f'{target}_covered']:.0f} of {n}"
        for k in words
        if k in t
        for target in ("time", "energy")
        if t[k].get(f"{target}_covered") is not None and t[k][f"{target}_covered"] < n
    ]
    covered = "; ".join(short) if short else "every stated interval covered its run"
    return f"the tiers miss by (time / energy): {pairs}; {covered}."


def facts_table(numbers: dict) -> pd.DataFrame:
    """The board's measured power and efficiency figures (one BERT-base step, idle power)."""
    base, power = numbers["bert_base_s512"], numbers["power_w"]
    return pd.DataFrame(
        [
            ("step time", f"{base['step_ms']:.1f} ms"),
            ("model FLOPs utilisation", f"{base['mfu_pct']:.1f} %"),
            (
                "energy efficiency",
                f"{base['gflop_per_j']:.0f} GFLOP/J (at peak and TDP: {base['peak_gflop_per_j']:.0f} GFLOP/J)",
            ),
            ("idle power, no process", f"{power['idle']:.0f} W"),
            ("idle power, a process holding memory", f"{power['hot_idle']:.0f} W"),
            ("CodeCarbon's GPU energy ÷ the counter's", f"{base['codecarbon_gpu_over_nvml']:.3f}"),
            ("memory estimate ÷ allocator's peak", f"{base['memory_estimate_over_measured']:.2f}"),
        ],
        columns=["quantity", "measured"],
    )


def host_bound_text(numbers: dict) -> str:
    """How the calibrated tier errs on the host-bound runs, beside how much those runs moved on their own."""
    hb = numbers["host_bound"]
    if not hb["runs"] or not hb["window_spread_pct"]:
        return ""
    low = hb["calibrated_all_low"]
    return (
        f"On the {hb['runs']} host-bound runs (where issuing kernels is the bottleneck), the calibrated "
        f"tier's step time is low{' on every one' if low else ''}, by {-hb['calibrated_signed_error_pct']:.0f} % "
        "on average; their "
        f"measured step time varied by {hb['window_spread_pct'][0]:.0f} to {hb['window_spread_pct'][1]:.0f} % "
        "within one run."
    )


def first_machine_text(numbers: dict) -> str:
    """The tiers on the first machine's runs, and which of its calibration's quantities failed their checks."""
    flagged = [f["quantity"] for f in (numbers.get("flagged") or {}).values()]
    out = f"On the first machine's {numbers['runs']} runs " + tiers_text(
        numbers,
        {
            "prior": "the datasheet prior",
            "calibrated": "the calibrated tier",
            "fitted": "the fitted tier (leave one out)",
        },
    )
    if flagged:
        out += (
            f" That machine's calibration failed its checks for the {listed(flagged)}: the calibrated tier uses "
            "the datasheet's values instead."
        )
    return out


def test_text(numbers: dict) -> str:
    """What the test set shows: the tiers on runs no choice was made on, from another machine."""
    test = numbers.get("test")
    if not test:
        return ""
    cal = test["calibration"]
    out = f"On the {test['runs']} test configurations, measured on another machine, " + tiers_text(
        test,
        {
            "prior": "the datasheet prior",
            "fitted": "the fitted tier (on the first machine's runs)",
            "calibrated": "the calibrated tier",
        },
    )
    if cal.get("per_op_us") is not None:
        out += f" Its calibration timed only two model depths ({cal['per_op_us']:.0f} µs per operator)."
    return out


ONE_MACHINE_SPLITS = {"reference": "reference runs", "test": "test configurations"}


def one_machine_table(numbers: dict) -> pd.DataFrame:
    """Per machine of the one-machine sets and per tier, on the runs of the machine that took the calibration:
    the errors on the reference profile and on the test set (how many stated intervals missed their run:
    ``interval_misses``, in the text)."""
    rows = []
    for i, one in enumerate(numbers["one_machines"]):
        for t in one["tiers"]["reference"]:
            row = {
                "set": i + 1,
                "tier": "fitted on the set's reference runs" if t == "fitted" else TIER_WORDS[t],
            }
            for split, words in ONE_MACHINE_SPLITS.items():
                v = one["tiers"].get(split, {}).get(t)
                if v:
                    row[f"{words}: time (%)"] = f"{v['time_mape_pct']:.1f}"
                    row[f"{words}: energy (%)"] = f"{v['energy_mape_pct']:.1f}"
            rows.append(row)
    return pd.DataFrame(rows).fillna("—")


def interval_misses(one: dict) -> tuple[int, int]:
    """A one-machine set's stated intervals (the prior's and the calibrated tier's, time and energy, per run; the
    fitted tier states none on so few runs): how many missed their run, and how many there are."""
    stated = [
        (v["runs"] - v[f"{target}_covered"], v["runs"])
        for split in one["tiers"].values()
        for v in split.values()
        for target in ("time", "energy")
        if v.get(f"{target}_covered") is not None
    ]
    return int(sum(m for m, _ in stated)), int(sum(n for _, n in stated))


def machines_text(numbers: dict) -> str:
    """Which machines of the board the page draws on, counted from the sets the folder holds."""
    ones = len(numbers.get("one_machines") or [])
    modes = sum(1 for k in ("modes", "modes_masked") if numbers.get(k))
    named = [
        f"{ones} one-machine set{'s' if ones > 1 else ''}" if ones else "",
        "the first machine",
        "the test machine" if numbers.get("test") else "",
        f"{modes} modes machine{'s' if modes > 1 else ''}" if modes else "",
    ]
    count = ones + 1 + bool(numbers.get("test")) + modes
    machines = f"{count} machine{'s' if count > 1 else ''}"
    bare = {
        r["machine"] for r in (numbers.get("host_speed") or {}).get("rows", []) if r["how"] == "bare loop"
    }
    return f"{machines} with the same board ran them: {listed([n for n in named if n])}" + (
        f"; {len(bare)} more timed bare loops." if bare else "."
    )


def one_machine_text(numbers: dict) -> str:
    """What the tiers do where the calibration and the runs come from one machine, set by set (the sets are
    numbered in the order they were measured, as in the table)."""
    sets = numbers.get("one_machines") or []
    if not sets:
        return ""
    level = f"{numbers.get('interval_level', 0.9) * 100:.0f} %"
    tested = [i for i, one in enumerate(sets) if "test" in one["tiers"]]
    probes = [one["calibration"]["per_op_us"] for one in sets]
    probes = listed([f"{x:.1f}" if x is not None else "no" for x in probes])
    checks = "some checks failed" if any(one["calibration"]["flagged"] for one in sets) else "no check failed"

    def errors(split, indices):
        return listed([f"{sets[i]['tiers'][split]['calibrated']['time_mape_pct']:.0f} %" for i in indices])

    def counts(split, indices):
        return listed(sorted({str(sets[i]["runs"][split]) for i in indices}))

    ran = f"the {counts('reference', range(len(sets)))} reference configurations"
    if tested and len(tested) == len(sets):
        ran = f"the {counts('reference', tested)} reference and {counts('test', tested)} test configurations"
    elif tested:
        who = listed([str(i + 1) for i in tested])
        ran += f" (set{'s' if len(tested) > 1 else ''} {who} also the {counts('test', tested)} test ones)"
    many = len(sets) > 1
    whose = "Each machine's" if many else "Its"
    out = (
        f"{f'Each of {len(sets)} machines' if many else 'One machine'} took its calibration ({probes} µs of host "
        f"time per operator; {checks}), then ran {ran}. {whose} own calibration, "
        "fitted on nothing, puts the calibrated tier's step time off by "
        f"{errors('reference', range(len(sets)))} on the reference runs"
        + (f" and {errors('test', tested)} on the test runs" if tested else "")
        + "."
    )
    missed, stated = (sum(x) for x in zip(*(interval_misses(one) for one in sets)))
    out += (
        f" Every stated {level} interval covered its run."
        if not missed
        else f" {missed} of the {stated} stated {level} intervals (prior and calibrated, time and energy) missed "
        "their run."
    )
    for i, one in enumerate(sets):
        n = sum(one["runs"].values())
        if one["calibrated_low_runs"] == n:
            subject = f"Set {i + 1}" if many else "It"
            out += (
                f" {subject} ran slower than its calibration predicts: the calibrated tier is low on all {n} runs, "
                f"by {-one['calibrated_signed_pct']:.0f} % on average."
            )
    return out


def host_text(numbers: dict) -> str:
    """Why a GPU calibration's host side does not travel between machines."""
    host = numbers.get("host_speed")
    if not host:
        return ""
    lo, hi = host["step_ms_range"]
    other = host["calibrated_from_probe_machine"]
    return (
        f"The same host-bound step, a bare loop or a run, took {lo:.0f} to {hi:.0f} ms on machines with the same "
        "board: the processor "
        "beside the GPU sets it. A host-probe machine's calibration "
        f"({host['probe_per_op_us']:.1f} µs per operator, from three depths that agree) puts the calibrated "
        f"tier's step time off by {other['reference']['time_mape_pct']:.0f} % on the first machine's runs and "
        f"{other['test']['time_mape_pct']:.0f} % on the test machine's."
    )


MODE_WORDS = {"eager": "eager", "compile": "compiled", "cudagraphs": "CUDA graphs"}


def modes_table(numbers: dict) -> pd.DataFrame:
    """BERT-base (batch 32) per sequence length, execution mode, attention and engine: step time, energy, MFU; from
    the masked modes set (the runner's compiled steps as they are now) where there is one, else the first."""
    modes = numbers.get("modes_masked") or numbers.get("modes")
    if not modes:
        return pd.DataFrame()
    base = bert_base_b32(pd.DataFrame(modes["groups"])).to_dict(orient="records")
    rows = sorted(base, key=lambda g: (g["seq_len"], g["engine"] != "native", g["step_ms"]))
    return pd.DataFrame(
        [
            {
                "tokens": g["seq_len"],
                "mode": MODE_WORDS[g["execution"]]
                + (", SDPA uncompiled" if g["attn"] == "sdpa-nocompile" else "")
                + ("" if g["engine"] == "native" else ", Accelerate"),
                "ms per step": f"{g['step_ms']:.1f}",
                "J per step (NVML)": f"{g['energy_per_step_j']:.1f}",
                "MFU (%)": f"{g['mfu_pct']:.0f}",
            }
            for g in rows
        ]
    )


def _base_sdpa(rows: pd.DataFrame) -> pd.DataFrame:
    """BERT-base, batch 32, attention compiled with the model: the rows the modes sentences compare."""
    base = bert_base_b32(rows)
    return base[base.attn == "sdpa"]


def _compiled_energy_512(modes: dict) -> pd.Series:
    """Compiled modes' energy per step over eager's, BERT-base b32 at 512 tokens, native engine."""
    groups = _base_sdpa(pd.DataFrame(modes["groups"]))
    native = groups[(groups.seq_len == 512) & (groups.engine == "native")].set_index("execution")
    return native.drop(index="eager").energy_per_step_j / native.energy_per_step_j["eager"]


def modes_caption(numbers: dict) -> str:
    """The modes table's caption: which machine's runs it holds (``modes_table``'s choice of set)."""
    machine = "second modes machine" if numbers.get("modes_masked") else "first modes machine"
    return f"BERT-base, batch 32, on the {machine} ({numbers.get('device', 'GPU')})"


def modes_text(numbers: dict) -> str:
    """What the execution modes and engines change (the first modes set: Accelerate, and compiled steps whose
    attention ran the math path; the masked set: the runner's compiled steps now), and how far the calibrated
    tier follows them."""
    modes, masked = numbers.get("modes"), numbers.get("modes_masked")
    if not modes:
        return ""
    first = _compiled_energy_512(modes)
    gap = max(abs(e["energy_ratio"] - 1) for e in modes["engines"].values()) * 100
    out = (
        f"On the first modes machine, Accelerate's energy per step is within {gap:.1f} % of this project's "
        f"engine, and compiled steps at 512 tokens took {first.min():.2f}–{first.max():.2f} times eager's energy: "
        "traced without the attention mask, their attention ran the math path in fp32."
    )
    if not masked or not ({128, 512} <= set(masked["best"]) and 512 in masked["mfu_ceilings"]):
        return out
    now, fast, long_ = _compiled_energy_512(masked), masked["best"][128], masked["best"][512]
    if now.empty:  # no compiled step at 512 tokens in the set
        return out
    by_run = _base_sdpa(pd.DataFrame(masked["calibrated_by_run"]))
    compiled = by_run[by_run.execution != "eager"]
    long_all = bool((compiled.step_s_predicted > compiled.step_s_measured).all())
    cap = masked["mfu_ceilings"][512]["with_state_mfu_pct"]
    return out + (
        " Fed the mask, with autocast inside the graph, the second modes machine's compiled steps take "
        f"{now.min():.2f}–{now.max():.2f} of eager's energy at 512 tokens (MFU {long_['mfu_pct']:.0f} % against "
        f"{long_['eager_mfu_pct']:.0f} %; the calibrated roofs allow eager's kernels {cap:.0f} %), and "
        f"{MODE_WORDS[fast['mode']]} at 128 tokens run {fast['speedup']:.1f} times as fast for "
        f"{fast['energy_ratio']:.2f} of its energy. With each mode's host time probed, the calibrated tier "
        + (
            f"predicts those compiled steps {compiled.step_s_ape.min():.0f}–{compiled.step_s_ape.max():.0f} % "
            "long: it times their kernels as eager's, unfused."
            if long_all
            else f"predicts those compiled steps within {compiled.step_s_ape.max():.0f} %."
        )
    )


def cpu_modes_text(hosts: list[dict], alpha: float = 0.05) -> str:
    """Per CPU host that measured them (``reference.cpu_modes_numbers``): how Accelerate and torch.compile moved a
    small BERT's step against native eager, how far the replicates lie apart, whether Welch's test at ``alpha``
    tells each from native eager (not whether they are equal), and how far the calibrated tier missed; "" where
    none is stored."""
    out = []
    for h in hosts:
        rows = pd.DataFrame(h["rows"])
        others = rows[~((rows.execution == "eager") & (rows.engine == "native"))]
        moved = " and ".join(
            f"{'Accelerate' if r.engine == 'accelerate' else 'torch.compile'}" for r in others.itertuples()
        )
        ratios = " and ".join(f"{r.time_ratio:.2f}" for r in others.itertuples())
        beyond = (others.p_value < alpha).sum()
        untested = others.p_value.isna().sum()  # one replicate, or none apart: no test
        out.append(
            f"On a CPU ({host_slug_words(h['host'])}, {h['shape']['layers']}-layer BERT, {int(rows.runs.min())} replicates), "
            f"{moved} took {ratios} times native eager's step, replicates up to {rows.spread_pct.max():.0f} % "
            "apart: "
            + (
                "too few replicates to test"
                if untested
                else f"not told apart from eager (Welch, p ≥ {alpha})"
                if beyond == 0
                else f"{beyond} of {len(others)} told apart from eager (Welch, p < {alpha})"
            )
            + f"; the calibrated tier missed by at most {rows.calibrated_time_error_pct.abs().max():.0f} %."
        )
    return " ".join(out)


def attention_text(numbers: dict) -> str:
    """What leaving attention out of the compiled graphs changed on the machine that measured it (its fastest such
    mode at 512 tokens against eager, and CUDA graphs at 128 tokens either way); "" where the set lacks one."""
    att = numbers.get("attention")
    if not att:
        return ""
    g = bert_base_b32(pd.DataFrame(att["groups"]))
    g = g[g.engine == "native"]

    def at(seq, mode, attn):
        rows = g[
            (g.seq_len == seq)
            & (g.attn == attn)
            & ((g.execution == mode) if mode else (g.execution != "eager"))
        ]
        return rows.loc[rows.step_ms.idxmin()] if len(rows) else None

    out, eager = at(512, None, "sdpa-nocompile"), at(512, "eager", "sdpa")
    short_out, short_in = at(128, "cudagraphs", "sdpa-nocompile"), at(128, "cudagraphs", "sdpa")
    if any(r is None for r in (out, eager, short_out, short_in)):
        return ""
    return (
        f"On an {att['device']}, SDPA left out of the compiled graphs (`attn: sdpa-nocompile`), another way "
        f"around the math path, took {out.step_ms:.1f} ms at 512 tokens "
        f"({'under CUDA graphs' if out.execution == 'cudagraphs' else 'compiled'}) against eager's "
        f"{eager.step_ms:.1f}; under CUDA graphs at 128 tokens its graph breaks cost host time "
        f"({short_out.step_ms:.0f} ms against {short_in.step_ms:.0f} with SDPA compiled)."
    )
