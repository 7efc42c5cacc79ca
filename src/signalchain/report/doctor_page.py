"""The `doctor` page: findings first, then each family's measurements as pictures."""

from __future__ import annotations

import math
from typing import Any

from ..findings import Finding
from .html import HtmlReport, audio_player, esc, findings_table, image_tag, table
from .plots import bar_figure, line_figure

__all__ = ["render_doctor", "render_metric", "strip_audio"]


def _finite(xs: list[float]) -> list[float]:
    return [x if math.isfinite(x) else float("nan") for x in xs]


def _overfit(m: dict[str, Any]) -> str:
    losses = m.get("losses") or []
    if not losses:
        return '<p class="muted">no overfit run</p>'
    series = {"loss on the golden batch": (list(range(len(losses))), _finite(losses))}
    h = m.get("unigram_entropy")
    if h is not None:
        series["unigram entropy of the targets"] = ([0, len(losses) - 1], [h, h])
    parts = [image_tag(line_figure(series, "Overfit one batch (regularisation off)", "step", "cross-entropy (nats)"), "overfit")]
    norms = m.get("grad_norms") or []
    if norms:
        parts.append(image_tag(line_figure({"total gradient norm": (list(range(len(norms))), _finite(norms))},
                                           "Gradient norm during the overfit run", "step", "norm", logy=True), "grad norms"))
    return "".join(parts)


def _sweep(m: dict[str, Any]) -> str:
    lrs, losses = m.get("lrs") or [], m.get("losses") or []
    if not lrs:
        return ""
    finals = [min(ls[-2:]) if ls else float("nan") for ls in losses]
    lines = {"configured": m["configured"]}
    if m.get("best_lr"):
        lines["best"] = m["best_lr"]
    if m.get("diverge_lr"):
        lines["diverges"] = m["diverge_lr"]
    img = image_tag(line_figure({"loss after a few steps from the same start": (lrs, _finite(finals)),
                                 "start": ([lrs[0], lrs[-1]], [m["initial"], m["initial"]])},
                                "Learning-rate sweep (diverged runs above the top edge)", "learning rate", "loss",
                                logx=True, vlines=lines, ylim=(0.0, 1.5 * m["initial"])), "lr sweep")
    rows = [[f"{lr:.3g}", " → ".join(f"{x:.3f}" for x in ls)] for lr, ls in zip(lrs, losses)]
    probe = ""
    if m.get("probe_losses"):
        probe = image_tag(line_figure({"loss": (list(range(len(m["probe_losses"]))), _finite(m["probe_losses"])),
                                       "gradient norm": (list(range(len(m["probe_grad_norms"]))), _finite(m["probe_grad_norms"]))},
                                      f"Probe above the best rate (lr {m['probe_lr']:.3g})", "step", "", logy=True), "probe")
    return img + probe + table(rows, ["learning rate", "losses"])


def render_metric(m: dict[str, Any]) -> str:
    """A measurement declared with a "kind" (the convention every family uses for its pictures):

    curves: {"series": {name: [xs, ys]}, "x_label", "y_label", "logx", "logy"}
    bars:   {"values": {name: number}, "x_label", "logx"}
    table:  {"headers": [...], "rows": [[...]]}
    audio:  {"sample_rate": sr, "clips": [{"label": str, "audio": array [C, T] or [T], "note": str}]}
    text:   {"text": str}
    """
    kind, title = m.get("kind"), str(m.get("title", ""))
    if kind == "curves":
        series = {k: (list(v[0]), _finite([float(y) for y in v[1]])) for k, v in m["series"].items()}
        return image_tag(line_figure(series, title, m.get("x_label", ""), m.get("y_label", ""),
                                     logx=bool(m.get("logx")), logy=bool(m.get("logy"))), title)
    if kind == "bars":
        return image_tag(bar_figure(m["values"], title, m.get("x_label", ""), logx=m.get("logx", True)), title)
    if kind == "table":
        return f"<h3>{esc(title)}</h3>" + table(m["rows"], m["headers"])
    if kind == "audio":
        sr = int(m["sample_rate"])
        cards = []
        for clip in m.get("clips", []):
            note = f'<div class="muted">{esc(clip["note"])}</div>' if clip.get("note") else ""
            cards.append(f'<div class="example"><b>{esc(clip.get("label", ""))}</b>{note}'
                         f'{audio_player(clip["audio"], sr, clip.get("label", ""))}</div>')
        return f"<h3>{esc(title)}</h3>" + "".join(cards)
    if kind == "text":
        return f"<h3>{esc(title)}</h3><p>{esc(m.get('text', ''))}</p>"
    return ""


def strip_audio(metrics: dict[str, Any]) -> dict[str, Any]:
    """Metrics for JSON: audio clips are replaced by their labels (the HTML report holds the sound)."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, dict) and v.get("kind") == "audio":
            v = {**v, "clips": [{kk: vv for kk, vv in c.items() if kk != "audio"} for c in v.get("clips", [])]}
        out[k] = v
    return out


def render_doctor(findings: list[Finding], metrics: dict[str, Any], families: list[str], unavailable: list[str],
                  timings: dict[str, float], title: str) -> HtmlReport:
    report = HtmlReport(f"signalchain doctor · {title}",
                        f"families: {', '.join(families)}" + (f" · not available: {', '.join(unavailable)}" if unavailable else ""))
    report.section("Findings", findings_table(findings), "findings")
    if "overfit" in metrics:
        report.section("Overfit one batch", _overfit(metrics["overfit"]), "overfit")
    if "lr_sweep" in metrics:
        report.section("Learning rate", _sweep(metrics["lr_sweep"]), "lr")
    if metrics.get("update"):
        report.section("Parameter update", image_tag(bar_figure(metrics["update"], "Relative update |Δθ|/|θ| per module "
                                                                "after a few steps", "ratio"), "updates"), "update")
    if metrics.get("gradients"):
        report.section("Gradients", image_tag(bar_figure(metrics["gradients"], "Gradient norm per parameter (one backward)",
                                                         "norm"), "gradients"), "gradients")
    ta = metrics.get("token_audio")
    if ta:
        report.section("Tokens against their audio",
                       f"<p>decoded tokens vs the audio they encode (log-mel correlation): own {esc([round(x, 2) for x in ta['own']])}, "
                       f"other examples {ta['others_mean']:.2f}; best codebook order {esc(ta['best_perm'])} "
                       f"({ta['best_perm_score']:.2f} vs {ta['identity']:.2f} as given)</p>", "tokens")
    generic: dict[str, list[str]] = {}
    for key, m in metrics.items():
        if isinstance(m, dict) and "kind" in m:
            generic.setdefault(key.split(".", 1)[0], []).append(render_metric(m))
    for fam, parts in generic.items():
        report.section(f"{fam}: measurements", "".join(parts), f"m-{fam}")
    report.section("Time", table([[k, f"{v:.2f} s"] for k, v in timings.items()], ["part", "time"]), "time")
    return report
