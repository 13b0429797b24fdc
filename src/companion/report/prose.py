"""Sentences the pages build from the runs and the fit, so what a page says follows what was measured.

Each function takes the frame or artifact a page already holds and returns plain text for a ``glue``; an
empty string where the case does not arise (no estimated energy, no oversubscribed run), so a page built
from other runs never states something of this build that is not true of its own.
"""

from __future__ import annotations

import pandas as pd

# CodeCarbon's model of a CPU without an energy counter, in the words every page uses (codecarbon 3.x:
# codecarbon.external.hardware.CPU._get_power_from_cpu_load, codecarbon.external.ram.RAM).
CPU_LOAD_MODEL = "the CPU's power from its load, TDP × (0.1 + 0.9 × load³)"
RAM_MODEL = "the RAM's power as a constant"


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def ram_shares(runs: pd.DataFrame) -> pd.Series:
    """Each run's share of its joules that is CodeCarbon's RAM term (``tables.run_row``'s ``ram_energy_share``),
    for the runs that have one; empty for a frame without the column (one written before it existed)."""
    if "ram_energy_share" not in runs:
        return pd.Series(dtype=float)
    return pd.to_numeric(runs.ram_energy_share, errors="coerce").dropna()


def energy_method_text(runs: pd.DataFrame) -> str:
    """How the estimated joules of these runs were obtained and how much of them is the constant RAM term."""
    est = runs[~runs.energy_measured.astype(bool)]
    if est.empty:
        return "Every run's joules come from a hardware energy counter; no power model is involved."
    sources = " ".join(sorted(set(est.energy_source.astype(str))))
    parts = [
        w for key, w in (("cpu=cpu_load", CPU_LOAD_MODEL), ("ram=ram_model", RAM_MODEL)) if key in sources
    ]
    text = (
        f"{len(est)} of {len(runs)} runs have estimated joules: with no energy counter, CodeCarbon modelled "
        f"{', and '.join(parts) if parts else 'their power'}."
    )
    share = ram_shares(est)
    if len(share):
        text += (
            f" The RAM term is {_pct(share.median())} of a run's joules (median; "
            f"{_pct(share.min())}–{_pct(share.max())} across runs), so runs' energies differ through the CPU "
            "term and their step times."
        )
    return text


def data_text(runs: pd.DataFrame) -> str:
    """What the runs were trained on: generated text or a local file, and from which weights."""
    sources = sorted(set(runs.data_source.astype(str))) if "data_source" in runs else ["synthetic"]
    ckpts = sorted({str(c) for c in runs.get("checkpoint", pd.Series(dtype=object)).dropna()})
    weights = (
        f"from the local checkpoint{'s' if len(ckpts) > 1 else ''} {', '.join(ckpts)}"
        if ckpts
        else "from random weights"
    )
    if sources == ["synthetic"]:
        what = (
            "generated text: a classification task with marker tokens per class (so the loss falls) and "
            "realistic lengths, padded per batch"
        )
        why = " A step's cost depends on the tokens' count and the tensors' shapes, not on the words."
    else:
        what, why = "the text file" + ("s " if len(sources) > 1 else " ") + ", ".join(sources), ""
    return f"Every run fine-tunes {weights} on {what}.{why}"


def oversubscription_text(runs: pd.DataFrame) -> str:
    """Which runs started more ranks than the host has cores, and what that does to their step times."""
    if "oversubscribed" not in runs:
        return ""
    over = runs[runs.oversubscribed.astype(bool)]
    if over.empty:
        return ""
    cpus = pd.to_numeric(over.host_cpus, errors="coerce").dropna()
    on = f" on {int(cpus.min())} cores" if len(cpus) else ""
    n_par = int((runs.world_size > 1).sum())
    return (
        f"{len(over)} of the {n_par} parallel runs started more ranks than the machine has cores (up to "
        f"{int(over.world_size.max())} ranks{on}). Their ranks take turns on a core, so their η(p) is lower "
        "than with a core per rank; the Limitations page says what this means for other machines."
    )


def static_power_text(static_share: float, p0_w: float, idle_w: float | None, ram_share: float | None) -> str:
    """The energy roofline's static share, its fitted P₀ against the calibration's idle power, and the part of
    the joules that is CodeCarbon's constant RAM term."""
    text = (
        f"On these runs the static part P₀·T is {_pct(static_share)} of the energy, with P₀ = {p0_w:.1f} W."
    )
    if idle_w and p0_w < 0.8 * idle_w:
        text += (
            f" That is below the calibration's idle power ({idle_w:.1f} W, estimated): memory traffic Q grows with step time "
            "here, so ε_Q·Q absorbs part of the static power, and the 'memory' share is partly time."
        )
    if ram_share is not None and ram_share > 0:
        text += (
            f" CodeCarbon's constant RAM term alone is {_pct(ram_share)} of the estimated joules (median run): "
            "static by construction."
        )
    return text


def calibration_banner(whose: str, problems: dict, gpu: bool) -> str | None:
    """HTML of a warning box for a page that uses a calibration some of whose quantities failed their checks
    (``problems``: {quantity: [problem, ...]}): which ones, and what the page uses instead; None where none did.
    ``whose``: the calibration's owner as the sentence names it (a device, "the first machine's")."""
    from companion.energy.calibration import CPU_FALLBACKS, QUANTITY_WORDS

    if not problems:
        return None
    names = ", ".join(QUANTITY_WORDS.get(q, q) for q in problems)
    instead = (
        "This page uses the datasheet's values in their place"
        if gpu
        else "In their place this page uses: "
        + "; ".join(
            f"for the {QUANTITY_WORDS.get(q, q)}, {CPU_FALLBACKS.get(q, 'the value as measured')}"
            for q in problems
        )
    )
    return (
        '<div class="admonition warning"><p class="admonition-title">Calibration partly replaced</p>'
        f"<p>The {whose} calibration failed its checks for the {names}. {instead}. The rest of the calibration "
        "is used as measured.</p></div>"
    )


def calibration_notes(found, recorded=()) -> list[str]:
    """A checked calibration's warnings (``energy.calibration.Calibration``), after those the file ``recorded``
    itself, as a page says them: without the file's path on the machine that built the book, each quantity by
    its name in words."""
    import re

    from companion.energy.calibration import QUANTITY_WORDS

    def plain(text: str) -> str:
        text = str(text).replace(f"calibration {found.path}", "the calibration")
        return re.sub(
            r"\b(" + "|".join(QUANTITY_WORDS) + r")\b(?= failed its check)",
            lambda m: f"the {QUANTITY_WORDS[m.group(1)]}",
            text,
        )

    return [plain(w) for w in [*recorded, *found.warnings]]
