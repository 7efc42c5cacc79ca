"""Pictures for reports: matplotlib (Agg) figures returned as PNG bytes. Render only, no verdicts."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from scipy import signal  # noqa: E402

__all__ = ["audio_figure", "waveform_limits", "codes_figure", "mask_figure", "histogram_figure", "line_figure",
           "bar_figure", "stack_figure"]

_DPI = 80
#: Colours of `line_figure`'s rugs, in the order given (red first: the marks that matter, such as a checkpoint pair).
RUG_COLOURS = ("#c44e52", "#4c72b0", "#9e9e9e", "#55a868")


def _plain(text: object) -> str:
    """User text (file names, caption words, stage names) drawn as written: a `$` pair would be
    parsed as mathtext (`$$` stops the figure), so each `$` is escaped. Matplotlib's own tick
    labels keep their mathtext (10^k on log axes)."""
    return str(text).replace("$", r"\$")


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


_MARGIN = 1.05  # the waveform's y-range past its largest value (full scale, or a peak beyond it)


def waveform_limits(audio: np.ndarray) -> tuple[float, float]:
    """The waveform's y-range: ±1.05 (full scale and a margin), or ±1.05 × the peak when finite samples
    lie beyond full scale, so that an overshoot is drawn where it is instead of cut at the frame."""
    with np.errstate(invalid="ignore"):
        a = np.abs(np.asarray(audio, dtype=np.float64))
    a = a[np.isfinite(a)]
    peak = float(a.max()) if a.size else 0.0
    top = _MARGIN * max(peak, 1.0)
    return -top, top


def audio_figure(audio: np.ndarray, sample_rate: int | None, title: str = "") -> bytes:
    """Waveform (every channel) above a log-magnitude spectrogram of the mono downmix. audio: [C, T].

    The waveform's y-range covers the peak (`waveform_limits`), with full scale (±1) marked: float
    audio beyond it is shown, not cut at the frame."""
    audio = np.nan_to_num(np.asarray(audio, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    if audio.ndim == 1:
        audio = audio[None]
    sr = sample_rate or 1
    fig, (ax_w, ax_s) = plt.subplots(2, 1, figsize=(7, 3.2), sharex=True,
                                     gridspec_kw={"height_ratios": [1, 1.4]})
    t = np.arange(audio.shape[1]) / sr
    for c in range(audio.shape[0]):
        ax_w.plot(t, audio[c], lw=0.5, alpha=0.8, label=f"ch{c}")
    if not audio.size:  # a file with no samples still gets its (empty) picture, and the page goes on
        ax_w.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax_w.transAxes)
    low, high = waveform_limits(audio)
    ax_w.set_ylim(low, high)
    over = high > _MARGIN
    for level in (-1.0, 1.0):  # full scale: where a 16-bit writer or a player clips
        ax_w.axhline(level, ls="--", lw=0.8 if over else 0.5, color="#c0392b" if over else "#999999",
                     label="full scale ±1" if level > 0 and over else None)
    ax_w.set_ylabel("amplitude")
    if audio.shape[0] > 1 or over:
        ax_w.legend(loc="upper right", fontsize=7)
    if title:
        ax_w.set_title(_plain(title), fontsize=9)
    mono = audio.mean(axis=0)
    nper = min(512, max(16, len(mono)))
    if len(mono) >= 16:
        f, tt, s = signal.spectrogram(mono, fs=sr, nperseg=nper, noverlap=nper // 2)
        db = 10 * np.log10(s + 1e-12)
        top = max(float(db.max()), -100.0)  # an 80 dB window under the loudest bin
        mesh = ax_s.pcolormesh(tt, f, db, shading="auto", vmin=top - 80, vmax=top, cmap="magma")
        # the colour bar sits in an inset right of the spectrogram, so both panels keep one time axis
        bar = fig.colorbar(mesh, cax=ax_s.inset_axes([1.015, 0.0, 0.025, 1.0]))
        bar.set_label("power (dB)", fontsize=8)
        bar.ax.tick_params(labelsize=7)
    ax_s.set_ylabel("Hz" if sample_rate else "bin")
    ax_s.set_xlabel("seconds" if sample_rate else "samples")
    return _png(fig)


def codes_figure(codes: np.ndarray, title: str = "", cardinality: int | None = None) -> bytes:
    """Token ids per codebook over time. codes: [K, T]."""
    codes = np.asarray(codes)
    if codes.ndim == 1:
        codes = codes[None]
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.35 * codes.shape[0]))
    im = ax.imshow(codes, aspect="auto", interpolation="nearest", cmap="viridis",
                   vmin=0, vmax=cardinality - 1 if cardinality else None)
    ax.set_ylabel("codebook")
    ax.set_xlabel("frame")
    fig.colorbar(im, ax=ax, pad=0.01).set_label("token id", fontsize=8)
    if title:
        ax.set_title(_plain(title), fontsize=9)
    return _png(fig)


def mask_figure(mask: np.ndarray, title: str = "", xlabel: str = "position", ylabel: str = "",
                meanings: tuple[str, str] = ("", "")) -> bytes:
    """A boolean mask as dark (1, true) and light (0, false) cells, with a legend saying so and how many
    of each. mask: [rows, T] or [T]. `meanings` adds what true and false mean for this stage
    ("counted in the loss", "not counted"), where its name settles it."""
    mask = np.asarray(mask, dtype=float)
    if mask.ndim == 1:
        mask = mask[None]
    mask = mask.reshape(-1, mask.shape[-1])
    fig, ax = plt.subplots(figsize=(7, 0.7 + 0.2 * mask.shape[0]))
    ax.imshow(mask, aspect="auto", interpolation="nearest", cmap="Greys", vmin=0, vmax=1)
    ax.set_xlabel(_plain(xlabel))
    if ylabel:
        ax.set_ylabel(_plain(ylabel))
    if mask.shape[0] == 1:
        ax.set_yticks([])
    if mask.shape[1] <= 32:  # a short axis (one cell per example): a tick per cell
        ax.set_xticks(range(mask.shape[1]))
    ones, total = int((mask > 0.5).sum()), mask.size
    said = [f" ({m})" if m else "" for m in meanings]
    handles = [Patch(facecolor="black", edgecolor="black", label=_plain(f"1 = true{said[0]}: {ones} of {total}")),
               Patch(facecolor="white", edgecolor="black", label=_plain(f"0 = false{said[1]}: {total - ones}"))]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    if title:
        ax.set_title(_plain(title), fontsize=9)
    return _png(fig)


def histogram_figure(values: np.ndarray, title: str = "") -> bytes:
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    fig, ax = plt.subplots(figsize=(5, 1.8))
    if v.size:
        ax.hist(v, bins=60, color="#4c72b0")
    ax.set_yscale("log")
    if title:
        ax.set_title(_plain(title), fontsize=9)
    return _png(fig)


def line_figure(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], title: str = "",
                xlabel: str = "", ylabel: str = "", logx: bool = False, logy: bool = False,
                vlines: Mapping[str, float] | None = None, ylim: tuple[float, float] | None = None,
                rug: Mapping[str, Sequence[float]] | None = None) -> bytes:
    """Several named curves on one axis (loss curves, LR sweeps, gradient norms). `rug` draws each name's
    x positions as ticks along the bottom edge (checkpoints on a step axis), the first name in the first
    rug colour; it widens the x range, never the y range."""
    fig, ax = plt.subplots(figsize=(7, 3))
    if ylim is not None:
        ax.set_ylim(*ylim)
    for name, (x, y) in series.items():
        ax.plot(np.asarray(x, dtype=float), np.asarray(y, dtype=float), lw=1.2, label=_plain(name))
    for (name, xs), colour in zip((rug or {}).items(), RUG_COLOURS):
        if len(xs):  # x in data units, y in axes fraction: a tick standing on the x axis whatever the y scale
            ax.plot(np.asarray(xs, dtype=float), np.zeros(len(xs)), transform=ax.get_xaxis_transform(),
                    ls="none", marker="|", ms=12, mew=2, color=colour, label=_plain(name), clip_on=False)
    for name, x in (vlines or {}).items():
        ax.axvline(x, ls="--", lw=0.8, color="grey")
        ax.text(x, ax.get_ylim()[1], _plain(name), rotation=90, va="top", fontsize=7)
    def positive(axis: int) -> bool:  # a log axis needs something above zero to show (all-zero norms: linear)
        return any(np.any(np.asarray(xy[axis], dtype=float) > 0) for xy in series.values())

    if logx and positive(0):
        ax.set_xscale("log")
    if logy and positive(1):
        ax.set_yscale("log")
    ax.set_xlabel(_plain(xlabel))
    ax.set_ylabel(_plain(ylabel))
    if title:
        ax.set_title(_plain(title), fontsize=9)
    if len(series) > 1 or any(len(xs) for xs in (rug or {}).values()):
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _png(fig)


def bar_figure(values: Mapping[str, float], title: str = "", xlabel: str = "", logx: bool = True,
               limit: int = 30) -> bytes:
    """Horizontal bars, largest first (per-layer update ratios, gradient norms)."""
    items = sorted(values.items(), key=lambda kv: -abs(kv[1]))[:limit]
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.22 * max(len(items), 1)))
    names = [k for k, _ in items][::-1]
    vals = [max(float(v), 1e-30) if logx else float(v) for _, v in items][::-1]
    ax.barh(range(len(vals)), vals, color="#4c72b0")
    ax.set_yticks(range(len(vals)))
    ax.set_yticklabels([_plain(n) for n in names], fontsize=7)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(_plain(xlabel))
    if title:
        ax.set_title(_plain(title), fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    return _png(fig)


#: Colours of a stacked bar's groups, in the order the figure names them (grey first: the figure's
#: own leading group, such as waiting, reads as background).
STACK_COLOURS = ("#9e9e9e", "#dd8452", "#4c72b0", "#8172b3", "#55a868", "#c44e52", "#937860", "#da8bc3")


def stack_figure(segments: Sequence[Sequence[object]], groups: Sequence[str], title: str = "", xlabel: str = "",
                 label_share: float = 0.025) -> bytes:
    """One horizontal bar of `segments` ([name, value, group]) end to end, in the given order; each
    group has its colour (the legend), white edges part neighbours, and a
    segment of at least `label_share` of the whole is named above the bar (on two staggered rows) and
    given its share inside it."""
    items = [(str(n), max(float(v), 0.0), str(g)) for n, v, g in segments]
    total = sum(v for _, v, _ in items) or 1.0
    colour = {g: STACK_COLOURS[i % len(STACK_COLOURS)] for i, g in enumerate(groups)}
    fig, ax = plt.subplots(figsize=(16, 2.6))
    left, row = 0.0, 0
    for name, value, group in items:
        ax.barh(0, value, left=left, height=0.6, color=colour.get(group, "#333333"), edgecolor="white", linewidth=0.8)
        share = value / total
        if share >= label_share:
            mid = left + value / 2
            y = 0.55 + 0.32 * row
            row = 1 - row
            ax.annotate(_plain(name), (mid, 0.3), (mid, y), ha="center", va="bottom", fontsize=9,
                        arrowprops={"arrowstyle": "-", "color": "#777777", "linewidth": 0.5})
            if share >= 0.05:
                ax.text(mid, 0, f"{share:.0%}", ha="center", va="center", fontsize=8, color="white")
        left += value
    ax.set_xlim(0, total)
    ax.set_ylim(-0.45, 1.25)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel(_plain(xlabel))
    if title:
        ax.set_title(_plain(title), fontsize=10)
    present = [g for g in groups if any(g == grp for _, _, grp in items)]
    ax.legend(handles=[Patch(color=colour[g], label=_plain(g)) for g in present], fontsize=9, ncol=len(present),
              loc="upper center", bbox_to_anchor=(0.5, -0.32), frameon=False)
    return _png(fig)
