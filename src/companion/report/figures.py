"""One function per figure: a tidy frame in, an interactive Altair chart out, one shared theme.

Every chart's subtitle says on which hardware its energy was obtained and whether it was measured or
estimated (``energy_label``). Charts render offline: the ``companion`` renderer writes a div and calls
``window.vegaEmbed`` from the book's local bundle (``book/_static/vega-bundle.js``), never a CDN.
``export`` writes each chart as SVG and PNG for papers.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

WIDTH, HEIGHT = 520, 320
MODE_ORDER = ["single", "tp", "fsdp", "2d"]
MODE_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#b279a2"]
MODE_SCALE = alt.Scale(domain=MODE_ORDER, range=MODE_COLORS)  # the same colour per layout everywhere


# ------------------------------------------------------------------------------------------ rendering
def _offline_html(spec: dict, **_) -> dict:
    div = f"vis-{uuid.uuid4().hex[:12]}"
    html = f"""<div id="{div}" class="companion-chart"></div>
<script>(function() {{
  var spec = {json.dumps(spec)};
  function draw() {{
    var el = document.getElementById("{div}");
    if (!window.vegaEmbed) {{ el.innerHTML = '<p style="color:#b00">Chart unavailable: the local Vega bundle did not load.</p>'; return; }}
    window.vegaEmbed(el, spec, {{actions: false, renderer: "svg"}}).catch(function(err) {{
      el.innerHTML = '<p style="color:#b00">Chart error: ' + err + '</p>'; console.error(err); }});
  }}
  if (document.readyState === "complete") draw(); else window.addEventListener("load", draw);
}})();</script>"""
    return {"text/html": html}


def use_offline_renderer() -> None:
    """Make Altair charts in notebooks render through the book's local Vega bundle."""
    alt.renderers.register("companion", _offline_html)
    alt.renderers.enable("companion")
    alt.theme.register("companion", enable=True)(_theme)


def _theme() -> alt.theme.ThemeConfig:
    return {
        "config": {
            "view": {"stroke": None},
            "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridColor": "#eee"},
            "legend": {"labelFontSize": 11, "titleFontSize": 12},
            "title": {"fontSize": 14, "subtitleFontSize": 11, "subtitleColor": "#555", "anchor": "start"},
            "range": {"category": MODE_COLORS},
        }
    }


def export(chart: alt.Chart, folder: Path, name: str) -> list[Path]:
    """Write ``name.svg`` and ``name.png`` (for papers) and return their paths."""
    import vl_convert as vlc

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    spec = chart.to_dict()
    svg, png = folder / f"{name}.svg", folder / f"{name}.png"
    svg.write_text(vlc.vegalite_to_svg(spec))
    png.write_bytes(vlc.vegalite_to_png(spec, scale=2))
    return [svg, png]


def energy_label(df: pd.DataFrame) -> str:
    """'estimated energy (codecarbon[...]) on cpu' or 'measured energy (nvml) on H100'."""
    parts = []
    for (device, measured), g in df.groupby(["device_name", "energy_measured"]):
        kind = "measured" if measured else "estimated"
        parts.append(f"{kind} energy ({', '.join(sorted(set(g.energy_source)))}) on {device}")
    return "; ".join(parts)


def _title(text: str, df: pd.DataFrame) -> alt.TitleParams:
    return alt.TitleParams(text, subtitle=[energy_label(df)])


def _mode_color(legend_sel):
    return alt.condition(legend_sel, alt.Color("mode:N", sort=MODE_ORDER, scale=MODE_SCALE, title="layout"),
                         alt.value("#ddd"))


# -------------------------------------------------------------------------------------------- figures
def energy_vs_flops(df: pd.DataFrame) -> alt.Chart:
    """Energy per step against FLOPs per step, log-log, coloured by layout (click the legend)."""
    sel = alt.selection_point(fields=["mode"], bind="legend")
    return (
        alt.Chart(df, width=WIDTH, height=HEIGHT, title=_title("Energy per step vs compute", df))
        .mark_circle(size=70, opacity=0.85)
        .encode(
            x=alt.X("flops_per_step:Q", scale=alt.Scale(type="log"), title="FLOPs per step"),
            y=alt.Y("energy_per_step_j:Q", scale=alt.Scale(type="log"), title="energy per step (J)"),
            color=_mode_color(sel),
            tooltip=["run_id", "mode", "world_size", "layers", "hidden", "seq_len", "batch_size",
                     alt.Tooltip("energy_per_step_j:Q", format=".3g"), alt.Tooltip("flops_per_step:Q", format=".3g"),
                     alt.Tooltip("step_s:Q", format=".3g", title="step (s)")],
        )
        .add_params(sel)
        .interactive()
    )


def roofline(df: pd.DataFrame) -> alt.Chart:
    """Achieved FLOP/s per rank against arithmetic intensity, under the device's compute and memory roofs."""
    peak, bw = float(df.peak_flops_per_s.iloc[0]), float(df.bandwidth_bytes_per_s.iloc[0])
    ai = np.logspace(np.log10(df.intensity_flops_per_byte.min() / 4), np.log10(max(df.intensity_flops_per_byte.max() * 4, 2 * peak / bw)), 60)
    roof = pd.DataFrame({"intensity_flops_per_byte": ai, "attainable": np.minimum(peak, ai * bw)})
    points = df.assign(achieved_per_rank=df.flops_per_rank / df.step_s)
    sel = alt.selection_point(fields=["mode"], bind="legend")
    x = alt.X("intensity_flops_per_byte:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (FLOP/byte)")
    line = alt.Chart(roof).mark_line(color="#333").encode(
        x=x, y=alt.Y("attainable:Q", scale=alt.Scale(type="log"), title="FLOP/s per device"),
        tooltip=[alt.Tooltip("attainable:Q", format=".3g", title="roof (FLOP/s)")])
    dots = alt.Chart(points).mark_circle(size=70).encode(
        x=x, y=alt.Y("achieved_per_rank:Q", scale=alt.Scale(type="log")), color=_mode_color(sel),
        tooltip=["run_id", alt.Tooltip("mfu:Q", format=".1%", title="MFU"),
                 alt.Tooltip("intensity_flops_per_byte:Q", format=".3g"),
                 alt.Tooltip("achieved_per_rank:Q", format=".3g", title="achieved FLOP/s per rank")]).add_params(sel)
    return alt.layer(line, dots, width=WIDTH, height=HEIGHT,
                     title=_title(f"Roofline: peak {peak:.3g} FLOP/s, {bw:.3g} B/s", df)).interactive()


def eta_curves(df: pd.DataFrame, usl: list[dict]) -> alt.Chart:
    """Measured eta(p) per layout mode with the fitted USL curve and its 90 % band."""
    from companion.energy.efficiency import UslFit

    meas = df[df.world_size > 1]
    curves = []
    for u in usl:
        fit = UslFit.from_json(u)
        p = np.linspace(1, max(8, meas.world_size.max()), 50)
        lo, hi = fit.eta_interval(p)
        curves.append(pd.DataFrame({"p": p, "eta": fit.eta(p), "lo": lo, "hi": hi, "mode": u["mode"]}))
    curves = pd.concat(curves) if curves else pd.DataFrame(columns=["p", "eta", "lo", "hi", "mode"])
    color = alt.Color("mode:N", sort=MODE_ORDER, scale=MODE_SCALE, title="layout")
    quiet = alt.Color("mode:N", sort=MODE_ORDER, scale=MODE_SCALE, legend=None)
    sel = alt.selection_point(fields=["mode"], bind="legend")
    opacity = alt.condition(sel, alt.value(1.0), alt.value(0.15))
    band = alt.Chart(curves).mark_area(opacity=0.15).encode(x="p:Q", y="lo:Q", y2="hi:Q", color=quiet)
    line = alt.Chart(curves).mark_line().encode(x=alt.X("p:Q", title="degree p (ranks)"),
                                                 y=alt.Y("eta:Q", title="η(p) = T₁ / (p·T_p)"), color=quiet, opacity=opacity)
    pts = alt.Chart(meas).mark_point(size=80, filled=True).encode(
        x="world_size:Q", y="eta:Q", color=color, opacity=opacity,
        tooltip=["run_id", alt.Tooltip("eta:Q", format=".3f"), "eta_reference"]).add_params(sel)
    return alt.layer(band, line, pts, width=WIDTH, height=HEIGHT,
                     title=_title("Efficiency factor η(p) with fitted USL curves", df))


def predicted_vs_measured(pred: pd.DataFrame, df: pd.DataFrame, law: str) -> alt.Chart:
    """Held-out predictions against measurements for one law, one colour per split; y = x is perfect."""
    p = pred[pred.law == law]
    lim = [float(min(p.measured_j.min(), p.predicted_j.min()) * 0.8), float(max(p.measured_j.max(), p.predicted_j.max()) * 1.25)]
    diag = alt.Chart(pd.DataFrame({"x": lim, "y": lim})).mark_line(color="#999", strokeDash=[4, 4]).encode(x="x:Q", y="y:Q")
    sel = alt.selection_point(fields=["split"], bind="legend")
    scale = alt.Scale(type="log", domain=lim)
    errs = alt.Chart(p).mark_rule(opacity=0.35).encode(x=alt.X("measured_j:Q", scale=scale), y="lo_j:Q", y2="hi_j:Q",
                                                       color="split:N", opacity=alt.condition(sel, alt.value(0.35), alt.value(0.03)))
    dots = alt.Chart(p).mark_point(filled=True, size=60).encode(
        x=alt.X("measured_j:Q", scale=scale, title="measured energy per step (J)"),
        y=alt.Y("predicted_j:Q", scale=scale, title="predicted on held-out runs (J)"),
        color=alt.Color("split:N", title="held out by"), shape="mode:N",
        opacity=alt.condition(sel, alt.value(0.9), alt.value(0.08)),
        tooltip=["run_id", "split", "fold", alt.Tooltip("ape_pct:Q", format=".1f", title="error (%)"),
                 alt.Tooltip("lo_j:Q", format=".3g"), alt.Tooltip("hi_j:Q", format=".3g")]).add_params(sel)
    return alt.layer(diag, errs, dots, width=WIDTH, height=HEIGHT,
                     title=_title(f"Held-out predictions: {law} (bars: 90 % intervals)", df))


def residuals_by_group(pred: pd.DataFrame, df: pd.DataFrame, law: str) -> alt.Chart:
    """Signed held-out error per fold (the group held out), one row per split."""
    p = pred[pred.law == law].assign(error_pct=lambda d: (d.predicted_j / d.measured_j - 1) * 100)
    return alt.Chart(p, title=_title(f"Held-out error by group: {law}", df)).mark_tick(thickness=2, size=14).encode(
        x=alt.X("error_pct:Q", title="prediction error (%)"), y=alt.Y("fold:N", title=None),
        color=alt.Color("mode:N", sort=MODE_ORDER, scale=MODE_SCALE),
        row=alt.Row("split:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")),
        tooltip=["run_id", alt.Tooltip("error_pct:Q", format=".1f")]).properties(width=WIDTH - 80).resolve_scale(y="independent")


def coefficients(coef: pd.DataFrame, df: pd.DataFrame) -> alt.Chart:
    """Each fitted coefficient with its 90 % bootstrap interval, one panel per law (independent scales)."""
    c = coef.assign(key=coef.law + ": " + coef.param)
    base = alt.Chart(c).encode(y=alt.Y("param:N", title=None))
    rules = base.mark_rule().encode(x=alt.X("lo:Q", title="value (90 % bootstrap interval)", scale=alt.Scale(zero=False)), x2="hi:Q")
    dots = base.mark_point(filled=True, size=60).encode(x="value:Q", tooltip=["law", "target", "param",
                                                                             alt.Tooltip("value:Q", format=".4g"),
                                                                             alt.Tooltip("lo:Q", format=".4g"),
                                                                             alt.Tooltip("hi:Q", format=".4g")])
    return alt.layer(rules, dots).properties(width=WIDTH - 120, height=60).facet(
        row=alt.Row("key:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left", labelLimit=260)),
    ).resolve_scale(x="independent", y="independent").properties(title=_title("Fitted coefficients", df))


def baseline_comparison(summary: pd.DataFrame, df: pd.DataFrame) -> alt.Chart:
    """Held-out MAPE of every law and baseline on every split (hover for all metrics)."""
    s = summary.assign(kind=np.where(summary.uses_measured_time, "after the fact (measured time)",
                                     np.where(summary.baseline, "baseline", "law")))
    return alt.Chart(s, title=_title("Held-out MAPE: laws and baselines", df)).mark_bar().encode(
        x=alt.X("mape_pct:Q", title="MAPE on held-out runs (%)"), y=alt.Y("label:N", title=None, sort="x"),
        color=alt.Color("kind:N", title=None), row=alt.Row("split:N", title=None,
                                                          header=alt.Header(labelAngle=0, labelAlign="left")),
        tooltip=["label", "split", "n", alt.Tooltip("mape_pct:Q", format=".1f"),
                 alt.Tooltip("median_ape_pct:Q", format=".1f"), alt.Tooltip("max_ape_pct:Q", format=".1f"),
                 alt.Tooltip("r2_log:Q", format=".3f"), alt.Tooltip("coverage_pct:Q", format=".0f")],
    ).properties(width=WIDTH - 120)


def static_vs_dynamic(split: pd.DataFrame, df: pd.DataFrame) -> alt.Chart:
    """Energy per step split by the energy roofline into compute, memory and static (P0 x time) parts."""
    long = split.melt(id_vars=["run_id", "mode", "flops_per_step"], value_vars=["compute_j", "memory_j", "static_j"],
                      var_name="part", value_name="energy_j")
    order = alt.EncodingSortField(field="flops_per_step", order="ascending")
    return alt.Chart(long, title=_title("Static vs dynamic energy (energy roofline decomposition)", df)).mark_bar().encode(
        y=alt.Y("run_id:N", sort=order, title=None, axis=alt.Axis(labelLimit=260, labelFontSize=9)),
        x=alt.X("energy_j:Q", stack="normalize", title="share of modelled energy per step", axis=alt.Axis(format="%")),
        color=alt.Color("part:N", title=None, scale=alt.Scale(domain=["compute_j", "memory_j", "static_j"],
                                                              range=["#4c78a8", "#72b7b2", "#e45756"])),
        tooltip=["run_id", "mode", "part", alt.Tooltip("energy_j:Q", format=".3g")],
    ).properties(width=WIDTH - 120)


def operator_time_breakdown(terms: pd.DataFrame, df: pd.DataFrame) -> alt.Chart:
    """Modelled step time split by operator class (fitted operator roofline), one bar per run.

    ``terms``: run_id, mode, flops_per_step and one column per time term (s), already multiplied by its
    fitted coefficient."""
    parts = [c for c in terms.columns if c.endswith("_s") and c != "step_s"]
    long = terms.melt(id_vars=["run_id", "mode", "flops_per_step"], value_vars=parts, var_name="operator",
                      value_name="time_s")
    order = alt.EncodingSortField(field="flops_per_step", order="ascending")
    return alt.Chart(long, title=_title("Where the step time goes (operator roofline)", df)).mark_bar().encode(
        y=alt.Y("run_id:N", sort=order, title=None, axis=alt.Axis(labelLimit=260, labelFontSize=9)),
        x=alt.X("time_s:Q", stack="normalize", title="share of modelled step time", axis=alt.Axis(format="%")),
        color=alt.Color("operator:N", title=None, sort=parts),
        tooltip=["run_id", "mode", "operator", alt.Tooltip("time_s:Q", format=".3g")],
    ).properties(width=WIDTH - 120)


def eta_model_vs_measured(eta: pd.DataFrame, df: pd.DataFrame) -> alt.Chart:
    """The efficiency factor the operator roofline implies against the measured one, per parallel run."""
    top = float(max(eta.eta_measured.max(), eta.eta_model.max(), 0.01)) * 1.1 if len(eta) else 1.0
    line = alt.Chart(pd.DataFrame({"x": [0, top]})).mark_line(color="#999", strokeDash=[4, 4]).encode(x="x:Q", y="x:Q")
    dots = alt.Chart(eta).mark_point(filled=True, size=70).encode(
        x=alt.X("eta_measured:Q", title="measured η = T₁ / (p T_p)", scale=alt.Scale(domain=[0, top])),
        y=alt.Y("eta_model:Q", title="operator roofline η", scale=alt.Scale(domain=[0, top])),
        color=alt.Color("mode:N", sort=MODE_ORDER, scale=MODE_SCALE), shape="world_size:N",
        tooltip=["run_id", alt.Tooltip("eta_measured:Q", format=".3f"), alt.Tooltip("eta_model:Q", format=".3f")])
    return alt.layer(line, dots, title=_title("η(p) is an output of the operator roofline", df)).properties(
        width=HEIGHT, height=HEIGHT)


def model_comparison(scores: pd.DataFrame, df: pd.DataFrame) -> alt.Chart:
    """Held-out MAPE of every model for time and energy on every split, with its group-bootstrap interval."""
    if scores.empty:  # too few runs to hold out whole groups: say so instead of drawing empty axes
        note = pd.DataFrame({"text": ["too few runs in this build to hold out whole groups"]})
        return alt.Chart(note, title=_title("Held-out MAPE: every model", df)).mark_text(align="left").encode(
            text="text:N").properties(width=WIDTH - 120, height=40)
    base = alt.Chart(scores).encode(y=alt.Y("model:N", title=None, sort="x"))
    bars = base.mark_bar().encode(x=alt.X("mape_pct:Q", title="MAPE on held-out runs (%)"),
                                  color=alt.Color("target:N", title=None),
                                  tooltip=["model", "split", "target", "n", alt.Tooltip("mape_pct:Q", format=".1f"),
                                           alt.Tooltip("mape_lo_pct:Q", format=".1f"),
                                           alt.Tooltip("mape_hi_pct:Q", format=".1f"),
                                           alt.Tooltip("coverage_pct:Q", format=".0f")])
    rules = base.mark_rule(color="#333").encode(x="mape_lo_pct:Q", x2="mape_hi_pct:Q")
    return alt.layer(bars, rules).properties(width=WIDTH - 200, height=110).facet(
        row=alt.Row("split:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")),
        column=alt.Column("target:N", title=None)).properties(title=_title("Held-out MAPE: every model", df))
