"""One function per figure: a tidy frame in, an interactive Altair chart out, one shared theme.

Every chart's subtitle says on which hardware its energy was obtained and whether it was measured or
estimated (``energy_label``). Charts render offline: the ``companion`` renderer writes a div and calls
``window.vegaEmbed`` from the book's local bundle (``book/_static/vega-bundle.js``), never a CDN.
``export`` writes each chart as SVG and PNG for papers.
"""

from __future__ import annotations

import html
import json
import uuid

import altair as alt
import numpy as np
import pandas as pd

from companion.energy import hardware, registry
from companion.energy.fit import energy_kind
from companion.energy.validation import SPLIT_WORDS
from companion.errors import ConfigError
from companion.report.static import export, static_spec, to_svg  # noqa: F401 (the figures' static forms)

WIDTH, HEIGHT = "container", 320  # single and layered charts take the text column's width
FACET_WIDTH = 380  # each panel of a faceted chart (Vega-Lite cannot size facets to a container)
MODE_ORDER = ["single", "tp", "fsdp", "2d"]
MODE_WORDS = {
    "single": "single-device",
    "tp": "TP",
    "fsdp": "FSDP",
    "2d": "2-D",
}  # a layout mode in a table or sentence
MODE_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#b279a2"]
MODE_SCALE = alt.Scale(domain=MODE_ORDER, range=MODE_COLORS)  # the same colour per layout everywhere
# One colour per concept across the book: layouts (above), energy parts, kinds of model. No colour is reused.
PART_ORDER = ["compute", "memory", "static"]
PART_SCALE = alt.Scale(domain=PART_ORDER, range=["#9c755f", "#72b7b2", "#e45756"])
KIND_ORDER = ["law", "baseline", "after the fact (measured time)"]
KIND_SCALE = alt.Scale(domain=KIND_ORDER, range=["#ff9da6", "#bab0ac", "#eeca3b"])
# the validation's models by kind: the law's and baselines' colours above, one more for the operator roofline
MODEL_KIND_ORDER = list(registry.KINDS)
MODEL_KIND_SCALE = alt.Scale(domain=MODEL_KIND_ORDER, range=["#1b7f79", "#ff9da6", "#bab0ac", "#eeca3b"])
COMPARISON_WIDTH = (
    270  # each of the two panels of model_comparison: both fit the text column with their labels
)
# The operator roofline's time terms: words, and colours of their own (ten, none used by another concept).
OPERATOR_WORDS = {
    "gemm_s": "GEMMs",
    "kernel_s": "tiny kernels",
    "attention_s": "attention",
    "elementwise_s": "element-wise",
    "state_s": "weights, gradients, AdamW",
    "step_fixed_s": "launches per step",
    "layer_fixed_s": "launches per layer",
    "tp_dispatch_s": "TP dispatch",
    "fsdp_hooks_s": "FSDP hooks",
    "comm_latency_s": "collectives: latency",
    "comm_bytes_s": "collectives: bytes",
}
OPERATOR_COLORS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
]
# The models of the validation, in words and in one order (the primary model first): the registry's
MODEL_WORDS = {spec.name: spec.short for spec in registry.SPECS}
UNITLESS = ("alpha", "beta", "log_c")  # panel titles without a unit
# each law coefficient (``models.UNITS``' keys) in words, for panel titles
PARAM_WORDS = {
    "log_c": "log c",
    "alpha": "α (FLOPs exponent)",
    "beta": "β (bytes exponent)",
    "a_j_per_token": "energy per token",
    "b_j": "fixed energy",
    "k": "power share of TDP",
    "eps_F_j_per_flop": "energy per FLOP",
    "eps_Q_j_per_byte": "energy per byte",
    "P0_w": "static power",
    "u_compute": "compute roof share",
    "v_memory": "memory roof share",
}
SI = "~s"  # axis labels with SI prefixes: 100G, 2.5m
NUM = ".3~g"  # three significant digits, no padding: 0.9, 1.6e-10


# ------------------------------------------------------------------------------------------ rendering
def render_html(spec: dict) -> str:
    """HTML for one chart: a div, its spec as JSON, and a call to the book's local ``vegaEmbed``.

    The chart's ``description`` (its one-sentence caption) travels as ``data-caption`` so the book can number
    and caption it.
    """
    div = f"vis-{uuid.uuid4().hex[:12]}"
    caption = html.escape(str(spec.get("description", "")), quote=True)
    payload = json.dumps(spec).replace("</", "<\\/")
    return f"""<div id="{div}" class="companion-chart" data-caption="{caption}"></div>
<script type="application/json" id="{div}-spec">{payload}</script>
<script>(function() {{
  function draw() {{
    var el = document.getElementById("{div}");
    var spec = JSON.parse(document.getElementById("{div}-spec").textContent);
    if (!window.vegaEmbed) {{ el.innerHTML = '<p style="color:#b00">Chart unavailable: the local Vega bundle did not load.</p>'; return; }}
    window.vegaEmbed(el, spec, {{actions: false, renderer: "svg"}}).catch(function(err) {{
      el.innerHTML = '<p style="color:#b00">Chart error: ' + err + '</p>'; console.error(err); }});
  }}
  if (document.readyState === "complete") draw(); else window.addEventListener("load", draw);
}})();</script>"""


def _offline_html(spec: dict, **_) -> dict:
    return {"text/html": render_html(spec)}


def use_offline_renderer() -> None:
    """Make Altair charts in notebooks render through the book's local Vega bundle."""
    alt.renderers.register("companion", _offline_html)
    alt.renderers.enable("companion")
    alt.theme.register("companion", enable=True)(_theme)


def _theme() -> alt.theme.ThemeConfig:
    return {
        "config": {
            "view": {"stroke": None, "continuousWidth": 640, "continuousHeight": HEIGHT},
            "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridColor": "#eee", "labelOverlap": True},
            "legend": {"labelFontSize": 11, "titleFontSize": 12, "orient": "right", "labelLimit": 220},
            "header": {"labelFontSize": 11, "labelLimit": 360},
            "title": {"fontSize": 14, "subtitleFontSize": 11, "subtitleColor": "#555", "anchor": "start"},
            "range": {"category": MODE_COLORS},
        }
    }


# How each meter method obtains a component's power, in words (companion.runs.meters records the method).
METHOD_WORDS = {
    "cpu_load": "CPU power modelled from load and TDP",
    "constant": "CPU at a constant share of TDP",
    "intel_rapl": "CPU from its RAPL counter",
    "intel_power_gadget": "CPU from Intel Power Gadget",
    "windows_emi": "CPU from its EMI counter",
    "apple_powermetrics": "CPU from powermetrics",
    "ram_model": "RAM power from the installed memory",
    "nvml": "GPU from its NVML counter",
}


def describe_source(source: str) -> str:
    """A record's energy source in words: 'codecarbon[cpu=cpu_load,ram=ram_model]' -> 'CodeCarbon: CPU power
    modelled from load and TDP, RAM power from the installed memory'; 'nvml' -> 'NVML energy counter'; an unknown source as it is."""
    source = str(source)
    replay = source.startswith("replay:")
    name = source.removeprefix("replay:")
    if name == "nvml":
        text = "NVML energy counter"
    elif name.startswith("codecarbon[") and name.endswith("]"):
        parts = [p.split("=", 1) for p in name[len("codecarbon[") : -1].split(",") if "=" in p]
        text = (
            "CodeCarbon: " + ", ".join(METHOD_WORDS.get(m, f"{c} from {m}") for c, m in parts)
            if parts
            else name
        )
    else:
        text = name
    return f"replayed log of {text}" if replay else text


def degree_bias_text(bias: pd.DataFrame) -> str:
    """One sentence (no final stop: a page goes on after it) on ``validation.signed_errors`` of the held-out degrees, per
    layout (mode and degree) and target: the calibration's ratio between degrees is per mode, so the modes of one
    degree can miss opposite ways and their mean would hide it."""
    if bias.empty:
        return "No parallel degree was held out in this build (too few degrees or runs)"
    parts = []
    for target in [t for t in ("time", "energy") if t in set(bias.target)]:
        rows = bias[bias.target == target].sort_values(["mode", "world_size"])
        words = [
            f"{MODE_WORDS.get(r.mode, r.mode)} of {int(r.world_size)} ranks {abs(r.mean_error_pct):.1f} % "
            f"{'over' if r.mean_error_pct >= 0 else 'under'}"
            for r in rows.itertuples()
        ]
        parts.append(f"{target}: {', '.join(words)}")
    return "Held out, the mean signed error of each layout's runs, " + "; ".join(parts)


def energy_label(df: pd.DataFrame) -> str:
    """'estimated energy (CodeCarbon: CPU power modelled from load and TDP, RAM power from the installed memory) on cpu' or
    'measured energy (NVML energy counter) on H100'."""
    parts = []
    for (device, measured), g in df.groupby(["device_name", "energy_measured"]):
        kind = "measured" if measured else "estimated"
        parts.append(
            f"{kind} energy ({'; '.join(describe_source(x) for x in sorted(set(g.energy_source)))}) on "
            + ("a CPU" if device == "cpu" else str(device))
        )
    return "; ".join(parts)


def energy_word(df: pd.DataFrame) -> str:
    """'measured' or 'estimated' (``fit.energy_kind``), or 'observed' for a frame that holds both kinds."""
    try:
        return energy_kind(df)
    except ConfigError:
        return "observed"


def time_word(df: pd.DataFrame) -> str:
    """How the step times a figure draws were obtained: 'measured', or 'host-speed-corrected' where some of its
    runs are expressed at their sweep's typical host speed (``companion.energy.tables.host_corrected``)."""
    corrected = "host_speed_factor" in df and df["host_speed_factor"].notna().any()
    return "host-speed-corrected" if corrected else "measured"


def _title(text: str, df: pd.DataFrame, time_only: bool = False) -> alt.TitleParams:
    """A figure's title; its subtitle says how the energy was obtained, or for a figure of time quantities
    alone (FLOP/s, eta, step time) that they come from wall-clock time, measured or host-speed-corrected."""
    if time_only:
        devices = ", ".join(sorted(set(df.device_name.astype(str)))) if "device_name" in df else "the device"
        return alt.TitleParams(
            text, subtitle=[f"from {time_word(df)} step times (wall clock) on {devices}; no energy shown"]
        )
    return alt.TitleParams(text, subtitle=[energy_label(df)])


def _mode_color(legend_sel):
    return alt.condition(
        legend_sel, alt.Color("mode:N", sort=MODE_ORDER, scale=MODE_SCALE, title="layout"), alt.value("#ddd")
    )


def _with_split_words(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with ``split_label``: each validation split in words ("size held out")."""
    return frame.assign(split_label=frame.split.map(lambda x: SPLIT_WORDS.get(x, str(x).replace("_", " "))))


def _log(title: str, fmt: str = SI, **scale) -> dict:
    return {"title": title, "scale": alt.Scale(type="log", **scale), "axis": alt.Axis(format=fmt)}


def _identity_line(lim: list[float], scale: alt.Scale | None = None) -> alt.Chart:
    """The dashed y = x line of a predicted-against-measured figure, over ``lim`` (on ``scale`` where given)."""
    x, y = (alt.X("x:Q", scale=scale), alt.Y("y:Q", scale=scale)) if scale is not None else ("x:Q", "y:Q")
    return (
        alt.Chart(pd.DataFrame({"x": lim, "y": lim}))
        .mark_line(color="#999", strokeDash=[4, 4])
        .encode(x=x, y=y)
    )


# -------------------------------------------------------------------------------------------- figures
def energy_vs_flops(df: pd.DataFrame) -> alt.Chart:
    """Energy per step (J) against FLOPs per step, log-log, coloured by layout (click the legend)."""
    sel = alt.selection_point(fields=["mode"], bind="legend")
    return (
        alt.Chart(
            df,
            width=WIDTH,
            height=HEIGHT,
            title=_title("Energy per step vs compute", df),
            description="Energy per step against FLOPs per step; at equal FLOPs, the gap between layouts "
            "is what parallelism adds or saves.",
        )
        .mark_circle(size=70, opacity=0.85)
        .encode(
            x=alt.X("flops_per_step:Q", **_log("FLOPs per step")),
            y=alt.Y("energy_per_step_j:Q", **_log("energy per step (J)")),
            color=_mode_color(sel),
            tooltip=[
                "run_id",
                "mode",
                "world_size",
                "layers",
                "hidden",
                "seq_len",
                "batch_size",
                alt.Tooltip("energy_per_step_j:Q", format=NUM, title="energy per step (J)"),
                alt.Tooltip("flops_per_step:Q", format=SI, title="FLOPs per step"),
                alt.Tooltip("step_s:Q", format=NUM, title="step (s)"),
            ],
        )
        .add_params(sel)
        .interactive()
    )


def roofline(df: pd.DataFrame) -> alt.Chart:
    """Achieved FLOP/s per rank against arithmetic intensity (FLOP/byte), under both roofs of the device.

    The memory roof (bandwidth × intensity) and the compute roof (peak FLOP/s) are drawn and labelled
    separately; they meet at the ridge point, peak / bandwidth.
    """
    peak, bw = float(df.peak_flops_per_s.iloc[0]), float(df.bandwidth_bytes_per_s.iloc[0])
    ridge = peak / bw
    lo = min(df.intensity_flops_per_byte.min() / 2, ridge / 8)
    hi = max(df.intensity_flops_per_byte.max() * 2, ridge * 8)
    mem = pd.DataFrame(
        {
            "intensity_flops_per_byte": [lo, ridge],
            "attainable": [lo * bw, peak],
            "roof": f"memory roof ({bw:.3g} B/s)",
        }
    )
    comp = pd.DataFrame(
        {
            "intensity_flops_per_byte": [ridge, hi],
            "attainable": [peak, peak],
            "roof": f"compute roof ({peak:.3g} FLOP/s)",
        }
    )
    roofs = pd.concat([mem, comp])
    points = df.assign(achieved_per_rank=df.flops_per_rank / df.step_s)
    sel = alt.selection_point(fields=["mode"], bind="legend")
    x = alt.X("intensity_flops_per_byte:Q", **_log("arithmetic intensity (FLOP/byte)"))
    y = alt.Y("attainable:Q", **_log("FLOP/s per rank"))
    line = (
        alt.Chart(roofs)
        .mark_line(color="#333", strokeWidth=2)
        .encode(
            x=x,
            y=y,
            strokeDash=alt.StrokeDash("roof:N", title="roofs", scale=alt.Scale(range=[[6, 3], [1, 0]])),
            tooltip=["roof", alt.Tooltip("attainable:Q", format=SI, title="attainable (FLOP/s)")],
        )
    )
    ridge_rule = (
        alt.Chart(pd.DataFrame({"x": [ridge], "label": [f"ridge {ridge:.3g} FLOP/byte"]}))
        .mark_rule(color="#999", strokeDash=[2, 2])
        .encode(x="x:Q", tooltip=["label"])
    )
    dots = (
        alt.Chart(points)
        .mark_circle(size=70)
        .encode(
            x=x,
            y=alt.Y("achieved_per_rank:Q", scale=alt.Scale(type="log")),
            color=_mode_color(sel),
            tooltip=[
                "run_id",
                alt.Tooltip("mfu:Q", format=".1%", title="MFU"),
                alt.Tooltip("intensity_flops_per_byte:Q", format=NUM, title="intensity (FLOP/byte)"),
                alt.Tooltip("achieved_per_rank:Q", format=SI, title="achieved FLOP/s per rank"),
            ],
        )
        .add_params(sel)
    )
    return (
        alt.layer(
            line,
            ridge_rule,
            dots,
            width=WIDTH,
            height=HEIGHT,
            title=_title(
                "Roofline: achieved FLOP/s per rank under the device's two roofs", df, time_only=True
            ),
            description="Each run under the compute and memory roofs; its distance below the roof is the "
            "utilisation it reached (hover for MFU).",
        )
        .resolve_scale(strokeDash="independent")
        .interactive()
    )


def eta_curves(df: pd.DataFrame, usl: list[dict]) -> alt.Chart:
    """Measured eta(p) per layout with the fitted USL curve and its 90 % band.

    Curves are solid over the degrees each layout was fitted on and dashed (labelled "extrapolated") beyond.
    """
    from companion.energy.efficiency import UslFit

    meas = df[df.world_size > 1]
    p_max = max(8, int(meas.world_size.max()) if len(meas) else 8)
    curves = []
    for u in usl:
        fit = UslFit.from_json(u)
        fitted_to = max(u.get("degrees") or [1])
        for segment, (a, b) in (("fitted", (1, fitted_to)), ("extrapolated", (fitted_to, p_max))):
            if b <= a:
                continue
            p = np.linspace(a, b, 30)
            lo, hi = fit.eta_interval(p)
            curves.append(
                pd.DataFrame(
                    {
                        "p": p,
                        "eta": fit.eta(p),
                        "lo": lo,
                        "hi": hi,
                        "mode": u["mode"],
                        "segment": segment,
                        "series": f"{u['mode']} {segment}",
                    }
                )
            )
    curves = (
        pd.concat(curves)
        if curves
        else pd.DataFrame(columns=["p", "eta", "lo", "hi", "mode", "segment", "series"])
    )
    color = alt.Color("mode:N", sort=MODE_ORDER, scale=MODE_SCALE, title="layout")
    sel = alt.selection_point(fields=["mode"], bind="legend")
    opacity = alt.condition(sel, alt.value(1.0), alt.value(0.15))
    band = (
        alt.Chart(curves)
        .transform_filter(alt.datum.segment == "fitted")
        .mark_area(opacity=0.15)
        .encode(x="p:Q", y="lo:Q", y2="hi:Q", color=color, detail="series:N")
    )
    line = (
        alt.Chart(curves)
        .mark_line()
        .encode(
            x=alt.X("p:Q", title="degree p (ranks)", axis=alt.Axis(tickMinStep=1, format="d")),
            y=alt.Y("eta:Q", title="η(p) = T₁ / (p·T_p)", axis=alt.Axis(format=".2~f")),
            color=color,
            opacity=opacity,
            detail="series:N",
            strokeDash=alt.StrokeDash(
                "segment:N",
                title="USL curve",
                scale=alt.Scale(domain=["fitted", "extrapolated"], range=[[1, 0], [5, 4]]),
            ),
            tooltip=["mode", "segment", alt.Tooltip("p:Q", format=".1f"), alt.Tooltip("eta:Q", format=".3f")],
        )
    )
    pts = (
        alt.Chart(meas)
        .mark_point(size=80, filled=True)
        .encode(
            x="world_size:Q",
            y="eta:Q",
            color=color,
            opacity=opacity,
            tooltip=["run_id", alt.Tooltip("eta:Q", format=".3f"), "eta_reference"],
        )
        .add_params(sel)
    )
    return alt.layer(
        band,
        line,
        pts,
        width=WIDTH,
        height=HEIGHT,
        title=_title("Efficiency factor η(p): measured points and fitted USL curves", df, time_only=True),
        description="Each layout's measured η(p) and fitted USL curve (band: 90 % interval; dashed: "
        "extrapolated).",
    )


def predicted_vs_measured(pred: pd.DataFrame, df: pd.DataFrame, law: str) -> alt.Chart:
    """Held-out predictions against measurements for one law: colour = layout, shape = split; y = x is perfect."""
    p = _with_split_words(pred[pred.law == law])
    lim = [
        float(min(p.measured_j.min(), p.predicted_j.min()) * 0.8),
        float(max(p.measured_j.max(), p.predicted_j.max()) * 1.25),
    ]
    diag = _identity_line(lim)
    sel = alt.selection_point(fields=["split_label"], bind="legend")
    scale = alt.Scale(type="log", domain=lim)
    color = alt.Color(
        "mode:N", sort=MODE_ORDER, scale=MODE_SCALE, title="layout", legend=alt.Legend(symbolOpacity=1)
    )
    errs = (
        alt.Chart(p)
        .mark_rule()
        .encode(
            x=alt.X("measured_j:Q", scale=scale),
            y="lo_j:Q",
            y2="hi_j:Q",
            color=color,
            opacity=alt.condition(sel, alt.value(0.35), alt.value(0.03)),
        )
    )
    dots = (
        alt.Chart(p)
        .mark_point(filled=True, size=60)
        .encode(
            x=alt.X(
                "measured_j:Q",
                scale=scale,
                title=f"{energy_word(df)} energy per step (J)",
                axis=alt.Axis(format=SI),
            ),
            y=alt.Y(
                "predicted_j:Q", scale=scale, title="predicted on held-out runs (J)", axis=alt.Axis(format=SI)
            ),
            color=color,
            shape=alt.Shape("split_label:N", title="held out"),
            opacity=alt.condition(sel, alt.value(0.9), alt.value(0.08)),
            tooltip=[
                "run_id",
                alt.Tooltip("split_label:N", title="split"),
                "fold",
                alt.Tooltip("ape_pct:Q", format=".1f", title="error (%)"),
                alt.Tooltip("lo_j:Q", format=NUM, title="interval low (J)"),
                alt.Tooltip("hi_j:Q", format=NUM, title="interval high (J)"),
            ],
        )
        .add_params(sel)
    )
    return alt.layer(
        diag,
        errs,
        dots,
        width=WIDTH,
        height=HEIGHT,
        title=_title(f"Held-out predictions: {MODEL_WORDS.get(law, law)} (bars: 90 % intervals)", df),
        description="Points on the dashed diagonal are predicted exactly; a bar that misses the "
        "diagonal is an interval that did not cover the run's recorded energy.",
    )


def residuals_by_group(pred: pd.DataFrame, df: pd.DataFrame, law: str) -> alt.Chart:
    """Signed held-out error (%) per fold (the group held out), one panel per split."""
    p = _with_split_words(pred[pred.law == law]).assign(
        error_pct=lambda d: (d.predicted_j / d.measured_j - 1) * 100
    )
    return (
        alt.Chart(
            p,
            title=_title(f"Held-out error by group: {MODEL_WORDS.get(law, law)}", df),
            description="Each tick is one held-out run; ticks right of zero are over-predicted. "
            "A group whose ticks sit together on one side is a bias, not noise.",
        )
        .mark_tick(thickness=2, size=14)
        .encode(
            x=alt.X("error_pct:Q", title="prediction error (%)", axis=alt.Axis(format="~s")),
            y=alt.Y("fold:N", title=None),
            color=alt.Color("mode:N", sort=MODE_ORDER, scale=MODE_SCALE, title="layout"),
            row=alt.Row(
                "split_label:N",
                title=None,
                header=alt.Header(labelOrient="top", labelAnchor="start", labelFontWeight="bold"),
            ),
            tooltip=["run_id", alt.Tooltip("error_pct:Q", format=".1f", title="error (%)")],
        )
        .properties(width=FACET_WIDTH + 60)
        .resolve_scale(y="independent")
    )


def coefficients(coef: pd.DataFrame, df: pd.DataFrame) -> alt.Chart:
    """Each fitted coefficient with its 90 % bootstrap interval, one panel per law and coefficient."""
    from companion.energy.models import UNITS

    what = {"energy_per_step_j": "", "step_s": " (step time)"}
    # exponents and log c have no unit a reader needs in the panel title; the TDP-time baseline's k is a share of
    # the TDP, or watts on a device without one (a CPU): its panel names the one that applies
    no_tdp = all(hardware.device_spec(d).get("tdp_w") is None for d in set(df.device_name))
    units = {**UNITS, "k": "W" if no_tdp else "fraction of TDP"}
    words = {**PARAM_WORDS, "k": "power" if no_tdp else PARAM_WORDS.get("k", "k")}
    unit = coef.param.map(lambda p: f", {units[p]}" if p in units and p not in UNITLESS else "")
    c = coef.assign(
        key=coef.law.map(lambda m: MODEL_WORDS.get(m, m))
        + ": "
        + coef.param.map(lambda p: words.get(p, p))
        + unit
        + (coef.target.map(lambda t: what.get(t, f" ({t})")) if "target" in coef else "")
    )
    base = alt.Chart(c).encode(y=alt.Y("param:N", title=None, axis=None))
    rules = base.mark_rule().encode(
        x=alt.X(
            "lo:Q",
            title="value, in the unit its panel names (90 % bootstrap interval)",
            scale=alt.Scale(zero=False),
            axis=alt.Axis(format=".4~g", tickCount=5),
        ),
        x2="hi:Q",
    )
    dots = base.mark_point(filled=True, size=60).encode(
        x="value:Q",
        tooltip=[
            "law",
            "target",
            "param",
            alt.Tooltip("value:Q", format=".4g"),
            alt.Tooltip("lo:Q", format=".4g"),
            alt.Tooltip("hi:Q", format=".4g"),
        ],
    )
    return (
        alt.layer(rules, dots)
        .properties(width=FACET_WIDTH + 100, height=40)
        .facet(
            row=alt.Row("key:N", title=None, header=alt.Header(labelOrient="top", labelAnchor="start")),
        )
        .resolve_scale(x="independent", y="independent")
        .properties(
            title=_title("Fitted coefficients", df),
            description="Each law's coefficients with 90 % bootstrap intervals; an interval spanning orders of "
            "magnitude, or zero, marks a coefficient these runs cannot identify.",
        )
    )


def baseline_comparison(summary: pd.DataFrame, df: pd.DataFrame) -> alt.Chart:
    """Held-out MAPE (%) of every law and baseline on every split (hover for all metrics)."""
    s = _with_split_words(summary).assign(
        kind=np.where(
            summary.uses_measured_time,
            KIND_ORDER[2],
            np.where(summary.baseline, KIND_ORDER[1], KIND_ORDER[0]),
        )
    )
    return (
        alt.Chart(
            s,
            title=_title("Held-out MAPE: laws and baselines", df),
            description="Shorter bars predict held-out runs better; compare the laws with the "
            "baselines split by split, not only pooled.",
        )
        .mark_bar()
        .encode(
            x=alt.X("mape_pct:Q", title="MAPE on held-out runs (%)"),
            y=alt.Y("label:N", title=None, sort="x", axis=alt.Axis(labelLimit=200)),
            color=alt.Color("kind:N", title="model", scale=KIND_SCALE, legend=alt.Legend(orient="bottom")),
            row=alt.Row(
                "split_label:N",
                title=None,
                header=alt.Header(labelOrient="top", labelAnchor="start", labelFontWeight="bold"),
            ),
            tooltip=[
                "label",
                alt.Tooltip("split_label:N", title="split"),
                "n",
                alt.Tooltip("mape_pct:Q", format=".1f", title="MAPE (%)"),
                alt.Tooltip("median_ape_pct:Q", format=".1f", title="median APE (%)"),
                alt.Tooltip("max_ape_pct:Q", format=".1f", title="max APE (%)"),
                alt.Tooltip("r2_log:Q", format=".3f", title="R² (log)"),
                alt.Tooltip(
                    "coverage_pct:Q",
                    format=".0f",
                    title="bootstrap interval's coverage (%; too narrow for held-out runs)",
                ),
            ],
        )
        .properties(width=FACET_WIDTH)
    )


def run_labels(run_ids: pd.Series) -> pd.Series:
    """Run ids as bar labels: without their content hash (".942a08") and, where every run shares them, their
    device and precision ("@cpu-fp32"), which tell nothing to a reader, the layout set apart by a space; a run
    keeps its full id where two runs would otherwise share a label (the full id stays in the tooltip)."""
    ids = pd.Series(run_ids, dtype=str)
    short = ids.str.replace(r"\.[0-9a-f]{6,}$", "", regex=True)
    where = short.str.extract(r"(@[\w.]+-(?:fp32|bf16|fp16))", expand=False)
    if where.notna().all() and where.nunique() == 1:
        short = short.str.replace(where.iloc[0], "", regex=False)
    short = short.str.replace("_", " ", regex=False)
    clash = short.map(short[~ids.duplicated()].value_counts()) > 1
    return short.where(~clash, ids)


def per_configuration(long: pd.DataFrame, part: str, value: str) -> pd.DataFrame:
    """``long`` (one row per run and ``part``, with its ``run_labels`` label in ``run``) as one row per
    configuration and part: its runs' ``value`` averaged (a model's terms depend on the configuration alone; a
    part that uses the measured time differs by a few per cent between replicates), labelled without the
    replicate, with how many runs it averages (``runs``)."""
    config = long.run.str.replace(r"-r\d+$", "", regex=True)
    return (
        long.assign(run=config)
        .groupby(["run", part], sort=False)
        .agg(
            **{value: (value, "mean")},
            mode=("mode", "first"),
            flops_per_step=("flops_per_step", "first"),
            runs=("run_id", "nunique"),
        )
        .reset_index()
    )


def _configuration_tooltip(part: str, value: alt.Tooltip) -> list:
    """The hover of a ``per_configuration`` bar: the configuration, how many runs it averages, its mode, the
    part and its value."""
    return [alt.Tooltip("run:N", title="configuration"), "runs", "mode", part, value]


def static_vs_dynamic(split: pd.DataFrame, df: pd.DataFrame) -> alt.Chart:
    """Energy per step split by the energy roofline into compute, memory and static (P0 x time) parts, one bar
    per configuration (``per_configuration``)."""
    long = split.melt(
        id_vars=["run_id", "mode", "flops_per_step"],
        value_vars=["compute_j", "memory_j", "static_j"],
        var_name="part",
        value_name="energy_j",
    )
    long["part"] = long.part.str.removesuffix("_j")
    long["run"] = run_labels(long.run_id)
    long = per_configuration(long, "part", "energy_j")
    order = alt.EncodingSortField(field="flops_per_step", order="ascending")
    return (
        alt.Chart(
            long,
            title=_title("Static vs dynamic energy (energy roofline decomposition)", df),
            description="Each configuration's modelled energy by part, ordered by FLOPs per step.",
        )
        .mark_bar()
        .encode(
            y=alt.Y("run:N", sort=order, title=None, axis=alt.Axis(labelLimit=240, labelFontSize=9)),
            x=alt.X(
                "energy_j:Q",
                stack="normalize",
                title="share of modelled energy per step",
                axis=alt.Axis(format="%"),
            ),
            color=alt.Color("part:N", title="part", scale=PART_SCALE, sort=PART_ORDER),
            tooltip=_configuration_tooltip("part", alt.Tooltip("energy_j:Q", format=NUM, title="energy (J)")),
        )
        .properties(width=WIDTH)
    )


def operator_time_breakdown(terms: pd.DataFrame, df: pd.DataFrame) -> alt.Chart:
    """Modelled step time split by operator class (fitted operator roofline), one bar per configuration.

    ``terms``: run_id, mode, flops_per_step and one column per time term (s), already multiplied by its
    fitted coefficient."""
    parts = [c for c in terms.columns if c.endswith("_s") and c != "step_s"]
    long = terms.melt(
        id_vars=["run_id", "mode", "flops_per_step"], value_vars=parts, var_name="term", value_name="time_s"
    )
    long["operator"] = long.term.map(lambda t: OPERATOR_WORDS.get(t, t.removesuffix("_s").replace("_", " ")))
    long["term_index"] = long.term.map({t: i for i, t in enumerate(parts)})
    long["run"] = run_labels(long.run_id)
    long = per_configuration(long, "operator", "time_s").merge(
        long[["operator", "term_index"]].drop_duplicates(), on="operator"
    )
    names = list(dict.fromkeys(long.sort_values("term_index").operator))
    colors = (OPERATOR_COLORS * (len(names) // len(OPERATOR_COLORS) + 1))[: len(names)]
    order = alt.EncodingSortField(field="flops_per_step", order="ascending")
    return (
        alt.Chart(long, title=_title("Where the step time goes (operator roofline)", df, time_only=True))
        .mark_bar()
        .encode(
            y=alt.Y("run:N", sort=order, title=None, axis=alt.Axis(labelLimit=260, labelFontSize=9)),
            x=alt.X(
                "time_s:Q", stack="normalize", title="share of modelled step time", axis=alt.Axis(format="%")
            ),
            color=alt.Color(
                "operator:N", title="operator class", sort=names, scale=alt.Scale(domain=names, range=colors)
            ),
            order=alt.Order("term_index:Q"),
            tooltip=_configuration_tooltip("operator", alt.Tooltip("time_s:Q", format=NUM, title="time (s)")),
        )
        .properties(
            width=WIDTH,
            description="Each configuration's modelled step time by operator class, ordered by FLOPs per step.",
        )
    )


def eta_model_vs_measured(eta: pd.DataFrame, df: pd.DataFrame) -> alt.Chart:
    """The efficiency factor the operator roofline implies against the measured one, per parallel run."""
    top = float(max(eta.eta_measured.max(), eta.eta_model.max(), 0.01)) * 1.1 if len(eta) else 1.0
    line = (
        alt.Chart(pd.DataFrame({"x": [0, top]}))
        .mark_line(color="#999", strokeDash=[4, 4])
        .encode(x="x:Q", y="x:Q")
    )
    dots = (
        alt.Chart(eta)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X("eta_measured:Q", title="measured η = T₁ / (p T_p)", scale=alt.Scale(domain=[0, top])),
            y=alt.Y("eta_model:Q", title="operator roofline η", scale=alt.Scale(domain=[0, top])),
            color=alt.Color("mode:N", sort=MODE_ORDER, scale=MODE_SCALE, title="layout"),
            shape=alt.Shape("world_size:N", title="ranks"),
            tooltip=[
                "run_id",
                alt.Tooltip("eta_measured:Q", format=".3f"),
                alt.Tooltip("eta_model:Q", format=".3f"),
            ],
        )
    )
    return alt.layer(
        line, dots, title=_title("η(p) is an output of the operator roofline", df, time_only=True)
    ).properties(
        width=HEIGHT,
        height=HEIGHT,
        description="Each parallel run's η(p), predicted by the operator roofline against measured; on the "
        "dashed diagonal they agree.",
    )


def model_comparison(scores: pd.DataFrame, df: pd.DataFrame) -> alt.Chart:
    """Held-out MAPE of every model for time and energy on every split, with its group-bootstrap interval.

    One row of panels per split (its name above it), time and energy side by side; bars coloured by the kind
    of model, the models in one fixed order, the primary model first."""
    if scores.empty:  # too few runs to hold out whole groups: say so instead of drawing empty axes
        note = pd.DataFrame({"text": ["too few runs in this build to hold out whole groups"]})
        return (
            alt.Chart(note, title=_title("Held-out MAPE: every model", df))
            .mark_text(align="left")
            .encode(text="text:N")
            .properties(
                width=WIDTH,
                height=40,
                description="Too few runs in this build to hold out whole groups, so no model is scored.",
            )
        )
    s = _with_split_words(scores).assign(
        label=scores.model.map(lambda m: MODEL_WORDS.get(m, str(m).replace("_", " "))),
        kind=scores.model.map(registry.kind),
        target_label=scores.target.map(lambda t: f"{t} per step"),
    )
    models = [MODEL_WORDS[m] for m in MODEL_WORDS if m in set(s.model)] + sorted(
        set(s.label) - {MODEL_WORDS[m] for m in MODEL_WORDS}
    )
    splits = [SPLIT_WORDS[x] for x in SPLIT_WORDS if x in set(s.split)] + sorted(
        set(s.split_label) - set(SPLIT_WORDS.values())
    )
    base = alt.Chart(s).encode(y=alt.Y("label:N", title=None, sort=models, axis=alt.Axis(labelLimit=130)))
    # errors span from a few % to several hundred: a log axis keeps the primary model and the laws legible
    top = float(np.nanmax(s[["mape_pct", "mape_hi_pct"]].to_numpy(float))) if len(s) else 100.0
    scale = alt.Scale(type="log", domain=[1, max(10.0, top * 1.2)], clamp=True)
    bars = base.mark_point(filled=True, size=55, opacity=0.95).encode(
        x=alt.X(
            "mape_pct:Q",
            title="MAPE on held-out runs (%, log scale)",
            scale=scale,
            axis=alt.Axis(values=[1, 2, 5, 10, 20, 50, 100, 200, 500], format="~g"),
        ),
        color=alt.Color("kind:N", title="model", scale=MODEL_KIND_SCALE, legend=alt.Legend(orient="bottom")),
        tooltip=[
            alt.Tooltip("label:N", title="model"),
            alt.Tooltip("split_label:N", title="split"),
            alt.Tooltip("target:N"),
            "n",
            alt.Tooltip("mape_pct:Q", format=".1f", title="MAPE (%)"),
            alt.Tooltip("mape_lo_pct:Q", format=".1f", title="interval low (%)"),
            alt.Tooltip("mape_hi_pct:Q", format=".1f", title="interval high (%)"),
            alt.Tooltip("coverage_pct:Q", format=".0f", title="interval coverage (%)"),
        ],
    )
    rules = base.mark_rule(color="#333").encode(x=alt.X("mape_lo_pct:Q", scale=scale), x2="mape_hi_pct:Q")
    return (
        alt.layer(rules, bars)
        .properties(width=COMPARISON_WIDTH, height=16 * len(models))
        .facet(
            row=alt.Row(
                "split_label:N",
                title=None,
                sort=splits,
                header=alt.Header(labelOrient="top", labelAnchor="start", labelFontWeight="bold"),
            ),
            column=alt.Column("target_label:N", title=None, sort=["time per step", "energy per step"]),
            spacing={"row": 8, "column": 16},
        )
        .properties(
            title=_title("Held-out MAPE: every model", df),
            description="Held-out MAPE of every model per split, time and energy apart, on a log axis; the black "
            "line is its interval from resampling whole groups.",
        )
    )


def coverage_across_sweeps(
    table: pd.DataFrame,
    pooled: pd.DataFrame,
    level: float,
    model: str = "operator_roofline",
    band=(85.0, 95.0),
) -> alt.Chart:
    """The coverage of ``model``'s nominal ``level`` intervals per group of held-out runs: a dot per coverage
    that stored builds showed (``companion.energy.stored.score_stored``'s rows; its area counts the builds),
    this build's own as an orange bar, their pool as a black diamond with its range from resampling builds
    (``pooled_coverage``), the band asked of every group shaded; time and energy side by side."""
    from companion.energy.stored import THIS_BUILD
    from companion.report.builds import GROUP_WORDS, group_order
    from companion.report.numbers import TARGETS

    t = table[(table.model == model) & table.coverage_pct.notna()]
    p = pooled[pooled.model == model]
    text = f"Coverage of the {level * 100:.0f} % intervals, build by build"
    how = t[["device_name", "energy_measured", "energy_source"]].dropna().drop_duplicates() if len(t) else t
    title = _title(text, how) if len(how) else alt.TitleParams(text, subtitle=["no stored builds"])
    if t.empty:
        note = pd.DataFrame({"text": ["no stored builds to score"]})
        return (
            alt.Chart(note, title=title)
            .mark_text(align="left")
            .encode(text="text:N")
            .properties(width=WIDTH, height=40, description="No stored build was scored.")
        )
    order = [GROUP_WORDS.get(g, g) for g in group_order(p.split)]
    scale, axis = (
        alt.Scale(domain=[60, 100], clamp=True),
        alt.Axis(values=[60, 70, 80, 85, 90, 95, 100], labelOverlap=True),
    )
    x = alt.X("coverage_pct:Q", title="coverage of held-out runs (%)", scale=scale, axis=axis)
    words = lambda f: f.assign(group=f.split.map(lambda s: GROUP_WORDS.get(s, s)))  # noqa: E731
    series = ["stored builds", *(["this build"] if (t.sweep == THIS_BUILD).any() else [])]
    panels = []
    for target in [x_ for x_ in TARGETS if x_ in set(t.target)]:
        rows = words(t[t.target == target].assign(coverage_pct=lambda f: f.coverage_pct.round(1)))
        stored_rows = rows[rows.sweep != THIS_BUILD]
        counts = (
            stored_rows.groupby(["group", "coverage_pct"])
            .agg(builds=("sweep", "count"), which=("sweep", lambda s: ", ".join(sorted(s))))
            .reset_index()
        )
        pool = words(p[p.target == target])
        y = alt.Y("group:N", title=None, sort=order, axis=alt.Axis(labelLimit=150) if not panels else None)
        color = alt.Color(
            "series:N",
            title=None,
            scale=alt.Scale(domain=series, range=["#4c78a8", "#f58518"][: len(series)]),
            legend=alt.Legend(orient="bottom") if not panels else None,
        )
        shade = (
            alt.Chart(pd.DataFrame({"lo": [band[0]], "hi": [band[1]]}))
            .mark_rect(color="#e8f1e4")
            .encode(x=alt.X("lo:Q", title="coverage of held-out runs (%)", scale=scale, axis=axis), x2="hi:Q")
        )
        dots = (
            alt.Chart(counts.assign(series=series[0]))
            .mark_circle(opacity=0.6)
            .encode(
                x=x,
                y=y,
                color=color,
                size=alt.Size("builds:Q", scale=alt.Scale(range=[15, 260]), legend=None),
                tooltip=[
                    alt.Tooltip("group:N", title="held out"),
                    alt.Tooltip("coverage_pct:Q", format=".1f", title="coverage (%)"),
                    alt.Tooltip("builds:Q", title="stored builds"),
                    alt.Tooltip("which:N", title="which"),
                ],
            )
        )
        layers = [shade, dots]
        own = rows[rows.sweep == THIS_BUILD]
        if len(own):
            layers.append(
                alt.Chart(own.assign(series=series[-1]))
                .mark_tick(thickness=3, size=18)
                .encode(
                    x=x,
                    y=y,
                    color=color,
                    tooltip=[
                        alt.Tooltip("group:N", title="held out"),
                        alt.Tooltip("coverage_pct:Q", format=".1f", title="this build's coverage (%)"),
                        alt.Tooltip("n:Q", title="runs"),
                    ],
                )
            )
        layers += [
            alt.Chart(pool)
            .mark_rule(color="#111", strokeWidth=2)
            .encode(x="coverage_lo_pct:Q", x2="coverage_hi_pct:Q", y=y),
            alt.Chart(pool)
            .mark_point(shape="diamond", filled=True, color="#111", size=70)
            .encode(
                x=x,
                y=y,
                tooltip=[
                    alt.Tooltip("group:N", title="held out"),
                    alt.Tooltip("coverage_pct:Q", format=".1f", title="pooled coverage (%)"),
                    alt.Tooltip("coverage_lo_pct:Q", format=".1f", title="range low (%)"),
                    alt.Tooltip("coverage_hi_pct:Q", format=".1f", title="range high (%)"),
                    alt.Tooltip("covered:Q"),
                    alt.Tooltip("n:Q", title="predictions"),
                    alt.Tooltip("sweeps:Q", title="builds"),
                ],
            ),
        ]
        panels.append(
            alt.layer(*layers).properties(
                width=COMPARISON_WIDTH, height=26 * len(order), title=f"{target} per step"
            )
        )
    own_words = " this build's own as an orange bar," if (t.sweep == THIS_BUILD).any() else ""
    span = f"{p.range_pct.iloc[0]:.0f} % range" if len(p) and "range_pct" in p else "range"
    return alt.hconcat(*panels, spacing=12).properties(
        title=title,
        description=f"Coverage of the {level * 100:.0f} % intervals of held-out runs per group: a blue "
        f"dot for each coverage the stored builds showed (its area: how many),{own_words} a black "
        f"diamond for all builds pooled with its {span} from resampling builds, the band "
        f"{band[0]:.0f}–{band[1]:.0f} % shaded.",
    )


# ------------------------------------------------------------------------------------------- a GPU's runs
# The operator model's three tiers, one colour each wherever a GPU figure shows them.
TIER_ORDER = ["prior", "calibrated", "fitted"]
TIER_WORDS = {
    "prior": "prior (datasheet)",
    "calibrated": "calibrated (no fit)",
    "fitted": "fitted (leave one out)",
}
TIER_SCALE = alt.Scale(domain=[TIER_WORDS[t] for t in TIER_ORDER], range=["#bab0ac", "#4c78a8", "#1b7f79"])


def gpu_predicted_vs_measured(scores: pd.DataFrame, device: str) -> alt.Chart:
    """A GPU's runs: each tier's prediction against the measurement, step time and energy side by side
    (``companion.energy.reference.score_reference``'s rows); y = x is perfect."""
    panels = []
    for target, what, unit in (("step_s", "step time", "s"), ("energy_per_step_j", "energy per step", "J")):
        f = scores.assign(
            tier_label=scores.tier.map(TIER_WORDS),
            measured=scores[f"{target}_measured"],
            predicted=scores[f"{target}_predicted"],
            ape=scores[f"{target}_ape"],
        )
        lim = [
            float(min(f.measured.min(), f.predicted.min()) * 0.8),
            float(max(f.measured.max(), f.predicted.max()) * 1.25),
        ]
        scale = alt.Scale(type="log", domain=lim)
        diag = _identity_line(lim, scale)
        measured_word = "measured (NVML)" if target == "energy_per_step_j" else "measured"
        dots = (
            alt.Chart(f)
            .mark_point(filled=True, size=60, opacity=0.85)
            .encode(
                x=alt.X(
                    "measured:Q",
                    scale=scale,
                    title=f"{measured_word} {what} ({unit})",
                    axis=alt.Axis(format=SI),
                ),
                y=alt.Y(
                    "predicted:Q", scale=scale, title=f"predicted {what} ({unit})", axis=alt.Axis(format=SI)
                ),
                color=alt.Color(
                    "tier_label:N",
                    scale=TIER_SCALE,
                    title="tier",
                    legend=alt.Legend(orient="bottom") if not panels else None,
                ),
                shape=alt.Shape(
                    "tier_label:N", scale=alt.Scale(domain=list(TIER_WORDS.values())), legend=None
                ),
                tooltip=[
                    alt.Tooltip("tier_label:N", title="tier"),
                    alt.Tooltip("layers:Q"),
                    alt.Tooltip("hidden:Q"),
                    alt.Tooltip("seq_len:Q", title="sequence length"),
                    alt.Tooltip("batch_size:Q", title="batch"),
                    alt.Tooltip("measured:Q", format=NUM, title=f"measured ({unit})"),
                    alt.Tooltip("predicted:Q", format=NUM, title=f"predicted ({unit})"),
                    alt.Tooltip("ape:Q", format=".1f", title="error (%)"),
                ],
            )
        )
        panels.append(alt.layer(diag, dots, width=COMPARISON_WIDTH, height=COMPARISON_WIDTH))
    return alt.hconcat(
        *panels,
        title=alt.TitleParams(
            f"{device}: predicted against measured, per tier",
            subtitle=[f"energy measured by the board's NVML energy counter on one {device}"],
        ),
        description=f"Each of the first {device} machine's {scores.run_id.nunique()} runs as each tier predicts it, step time "
        "(left) and energy per step (right); points on the dashed diagonal are predicted exactly.",
    )


def gpu_regimes(
    points: pd.DataFrame, floors: pd.DataFrame, roof_flops_per_s: float, device: str
) -> alt.Chart:
    """Step time against FLOPs per step on a GPU, log-log: the measured steps, the device roof
    (FLOPs ÷ peak: a compute-bound step lies on it) and the model's host floor per model depth (operators ×
    host cost per operator: a host-bound step lies on it, whatever its FLOPs)."""
    lo, hi = float(points.flops_per_step.min() / 3), float(points.flops_per_step.max() * 3)
    y_lo, y_hi = float(points.step_s.min() / 4), float(points.step_s.max() * 2)
    start = max(lo, y_lo * roof_flops_per_s)  # the roof drawn where it enters the plotted step times
    roof = pd.DataFrame(
        {
            "flops_per_step": [start, hi],
            "step_s": [start / roof_flops_per_s, hi / roof_flops_per_s],
            "line": "compute roof (bf16 peak)",
        }
    )
    x = alt.X("flops_per_step:Q", **_log("FLOPs per step", domain=[lo, hi]))
    y = alt.Y("step_s:Q", **_log("step time (s)", domain=[y_lo, y_hi]))
    roof_line = (
        alt.Chart(roof)
        .mark_line(color="#333", strokeWidth=2)
        .encode(x=x, y=y, strokeDash=alt.StrokeDash("line:N", title=None, legend=alt.Legend(orient="bottom")))
    )
    floor_word = "host floor (calibrated)"
    floor_rules = (
        alt.Chart(floors.assign(line=floor_word))
        .mark_rule(strokeWidth=2, strokeDash=[6, 3])
        .encode(
            x=alt.X("x0:Q", scale=alt.Scale(type="log", domain=[lo, hi])),
            x2="x1:Q",
            y=alt.Y("host_s:Q", scale=alt.Scale(type="log", domain=[y_lo, y_hi])),
            color=alt.Color(
                "line:N",
                title=None,
                scale=alt.Scale(domain=[floor_word], range=["#e45756"]),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=[
                alt.Tooltip("depth:N", title="host floor"),
                alt.Tooltip("host_s:Q", format=NUM, title="seconds"),
            ],
        )
    )
    floor_text = (
        alt.Chart(floors)
        .mark_text(align="left", dx=4, dy=-6, color="#e45756", fontSize=11)
        .encode(x="x1:Q", y="host_s:Q", text="depth:N")
    )
    dots = (
        alt.Chart(points)
        .mark_point(filled=True, size=70, opacity=0.9)
        .encode(
            x=x,
            y=y,
            color=alt.Color(
                "source:N",
                title=None,
                scale=alt.Scale(range=["#4c78a8", "#f58518"]),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=[
                alt.Tooltip("name:N", title="configuration"),
                alt.Tooltip("source:N", title="measured in"),
                alt.Tooltip("step_s:Q", format=NUM, title="step (s)"),
                alt.Tooltip("flops_per_step:Q", format=SI, title="FLOPs per step"),
                alt.Tooltip("mfu_pct:Q", format=".1f", title="MFU (%)"),
            ],
        )
    )
    return (
        alt.layer(roof_line, floor_rules, floor_text, dots, width=WIDTH, height=HEIGHT)
        .resolve_scale(strokeDash="independent", color="independent")
        .properties(
            title=alt.TitleParams(
                f"Two regimes on the {device}",
                subtitle=[f"from measured step times (wall clock) on {device}; no energy shown"],
            ),
            description="Small steps sit on the host floor whatever their FLOPs (the processor cannot issue kernels "
            "faster); only the largest approach the device roof. Dashed red: the model's host floor for "
            "each depth; black: the compute roof.",
        )
    )


def hero_predictions(pred: pd.DataFrame, df: pd.DataFrame, target: str = "energy") -> alt.Chart:
    """The book's first figure: each run's held-out prediction against its measurement, the primary model beside
    the paper's law (one panel each), from the split that predicts every run once (its size held out), with the
    off-grid validation runs and the test set marked; y = x is perfect."""
    keep = {"leave_one_size_out": "size held out", "holdout": "off-grid (validation)", "test": "test set"}
    models = {"operator_roofline": "operator roofline (fitted)", "roofline_power_law": "paper's law"}
    if not {"split", "model", "target", "measured", "predicted"} <= set(pred.columns):
        pred = pd.DataFrame(columns=["split", "model", "target", "measured", "predicted", "ape_pct"])
    p = pred[pred.split.isin(keep) & pred.model.isin(models) & (pred.target == target)].assign(
        group=lambda f: f.split.map(keep), model_label=lambda f: f.model.map(models)
    )
    if p.empty:
        note = pd.DataFrame({"text": ["no held-out predictions in this build"]})
        return (
            alt.Chart(note, title=_title("Held-out predictions", df))
            .mark_text(align="left")
            .encode(text="text:N")
            .properties(width=WIDTH, height=40, description="No held-out predictions to draw.")
        )
    lim = [
        float(min(p.measured.min(), p.predicted.min()) * 0.8),
        float(max(p.measured.max(), p.predicted.max()) * 1.25),
    ]
    scale = alt.Scale(type="log", domain=lim)
    unit = "J" if target == "energy" else "s"
    observed = energy_word(df) if target == "energy" else time_word(df)  # the axis and the hover say the same
    panels = []
    for key, label in models.items():
        g = p[p.model == key]
        diag = _identity_line(lim, scale)
        dots = (
            alt.Chart(g)
            .mark_point(filled=True, size=40, opacity=0.75)
            .encode(
                x=alt.X(
                    "measured:Q",
                    scale=scale,
                    title=f"{observed} {target} per step ({unit})",
                    axis=alt.Axis(format=SI),
                ),
                y=alt.Y(
                    "predicted:Q",
                    scale=scale,
                    title=f"predicted, held out ({unit})" if not panels else None,
                    axis=alt.Axis(format=SI),
                ),
                color=alt.Color(
                    "group:N",
                    title=None,
                    scale=alt.Scale(domain=list(keep.values()), range=["#1b7f79", "#f58518", "#b279a2"]),
                    legend=alt.Legend(orient="bottom") if not panels else None,
                ),
                shape=alt.Shape("group:N", scale=alt.Scale(domain=list(keep.values())), legend=None),
                tooltip=[
                    alt.Tooltip("group:N", title="held out as"),
                    alt.Tooltip("measured:Q", format=NUM, title=f"{observed} ({unit})"),
                    alt.Tooltip("predicted:Q", format=NUM, title=f"predicted ({unit})"),
                    alt.Tooltip("ape_pct:Q", format=".1f", title="error (%)"),
                ],
            )
        )
        panels.append(
            alt.layer(
                diag,
                dots,
                width=COMPARISON_WIDTH,
                height=COMPARISON_WIDTH,
                title=alt.TitleParams(label, fontSize=12),
            )
        )
    return alt.hconcat(
        *panels,
        title=_title(f"Runs never seen in the fit: predicted against {observed} {target}", df),
        description="Every run predicted by a fit that never saw its model size, and the off-grid "
        "validation and test runs by a fit on the whole sweep: the primary model (left) "
        "beside the paper's law (right); the dashed diagonal is a perfect prediction.",
    )
