"""A training-free multi-codebook audio codec: residual vector quantisation of log spectra.

MusicGen's EnCodec turns audio into K parallel token streams; this numpy stand-in does the same
for 16 kHz mono, so the reference pipeline has real codec tokens to learn:

    audio [B, 1, T] -> STFT (hop 320 = 50 frames/s, window 1280) -> log power in D warped bands
    -> residual VQ: codebook 0 quantises the frame, codebook k the error left by codebooks < k
    -> codes [B, K, F]

Decoding sums the K code vectors, interpolates the bands back to STFT bins, and rebuilds phase
deterministically: a phase-locked vocoder start (each spectral peak advances by its own frequency
from frame to frame) refined by a few fast Griffin-Lim iterations.

Bands are one FFT bin wide below `break_hz` and log-spaced above: low notes keep their pitch
detail while the top octaves cost few dimensions. VQ errors are weighted towards each frame's loud
bands (`emphasis`), which keeps loudness and pitch through the round trip.

Silence is a fixed token pattern: a frame whose windowed RMS is below `silence_dbfs` encodes to
code 0 in every codebook (`silence_codes`), and code 0 is never chosen by codebook 0 for any other
frame; codes that are all 0 decode to exact digital silence. For codebooks k >= 1, code 0 is the
zero vector ("no correction") and any frame may pick it.

Frames: F = T // hop. Frame f describes samples [f * hop, (f + 1) * hop); its analysis window is
centred on that span. Trailing T % hop samples are dropped; decode returns F * hop samples.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import scipy.fft
import scipy.signal
import scipy.sparse

ASSET = Path(__file__).with_name("assets") / "codec_default.npz"


@dataclass(frozen=True)
class CodecConfig:
    sample_rate: int = 16000
    hop: int = 320  # 50 frames per second
    n_fft: int = 1280  # window = 4 hops: overlap-add by reshaping, and Griffin-Lim likes 75 %
    n_bands: int = 128
    break_hz: float = 400.0  # bands are one FFT bin wide below this, log-spaced above
    n_codebooks: int = 4
    cardinality: int = 256
    floor_db: float = -100.0  # band power floor (0 dB = a full-scale sine's peak bin)
    range_db: float = 50.0  # and no band below the frame's loudest minus this
    silence_dbfs: float = -70.0
    emphasis: float = 0.5  # VQ error weight per band: (band amplitude / frame peak) ** emphasis
    griffin_lim_iters: int = 3  # spectral convergence -7.6 dB at 0, -11.0 at 3, -12.3 at 10


def _warp(f: np.ndarray, break_hz: float) -> np.ndarray:
    """Hz -> band axis: identity below break_hz, logarithmic above, slope 1 at the join."""
    f = np.asarray(f, dtype=np.float64)
    return np.where(f < break_hz, f, break_hz * (1.0 + np.log(np.maximum(f, 1e-9) / break_hz)))


def _band_matrices(cfg: CodecConfig) -> tuple[np.ndarray, np.ndarray]:
    """Analysis filterbank [D, n_bins] (triangles, rows sum to 1: band power = mean bin power)
    and synthesis interpolation [D, n_bins] (linear in the warped axis, columns sum to 1)."""
    n_bins = cfg.n_fft // 2 + 1
    bins = _warp(np.arange(n_bins) * cfg.sample_rate / cfg.n_fft, cfg.break_hz)  # [n_bins]
    top = _warp(np.array(cfg.sample_rate / 2.0), cfg.break_hz)
    centres = np.linspace(0.0, float(top), cfg.n_bands)  # [D], in warped units
    spacing = centres[1] - centres[0]
    # A triangle of half-width `spacing` around each centre; interpolation uses the same hats.
    hats = np.maximum(0.0, 1.0 - np.abs(bins[None, :] - centres[:, None]) / spacing)  # [D, bins]
    analysis = hats / hats.sum(axis=1, keepdims=True)
    synthesis = hats / hats.sum(axis=0, keepdims=True)
    return analysis.astype(np.float32), synthesis.astype(np.float32)


class Codec:
    """Residual VQ codec over warped log-power bands. See the module docstring."""

    def __init__(self, codebooks: np.ndarray, config: CodecConfig | None = None) -> None:
        cfg = config or CodecConfig()
        shape = (cfg.n_codebooks, cfg.cardinality, cfg.n_bands)
        if codebooks.shape != shape:
            raise ValueError(f"codebooks have shape {codebooks.shape}; this config needs {shape}")
        self.config = cfg
        self.sample_rate = cfg.sample_rate
        self.hop = cfg.hop
        self.frame_rate = cfg.sample_rate / cfg.hop
        self.n_codebooks = cfg.n_codebooks
        self.cardinality = cfg.cardinality
        self.silence_codes = np.zeros(cfg.n_codebooks, dtype=np.int64)  # [K]
        self.codebooks = codebooks.astype(np.float32)  # [K, N, D]
        self._sq_codebooks = self.codebooks**2  # [K, N, D]
        self._analysis, self._synthesis = _band_matrices(cfg)
        self._window = scipy.signal.get_window("hann", cfg.n_fft).astype(np.float32)  # periodic
        self._scale = np.float32(self._window.sum() / 2.0)  # a full-scale sine's peak bin -> 1
        # (-1)^k moves each frame's time origin to the window centre (zero-phase framing): a
        # steady sinusoid then has one phase across its main lobe, which _locked_phase relies on.
        self._sign = ((-1.0) ** np.arange(cfg.n_fft // 2 + 1)).astype(np.float32)

    def frames(self, num_samples: int) -> int:
        return int(num_samples) // self.hop

    # ---- STFT on the frame grid ---------------------------------------------------------------

    def _frame(self, x: np.ndarray) -> np.ndarray:
        """[B, F * hop] -> windowed frames [B, F, n_fft]; frame f is centred on hop span f."""
        pad = (self.config.n_fft - self.hop) // 2
        padded = np.pad(x, ((0, 0), (pad, pad)))
        view = np.lib.stride_tricks.sliding_window_view(padded, self.config.n_fft, axis=-1)
        return view[:, :: self.hop] * self._window

    def _istft_raw(self, spec: np.ndarray, wss: np.ndarray) -> np.ndarray:
        """Raw rfft frames [B, F, n_bins] -> [B, F * hop] by least-squares overlap-add."""
        frames = scipy.fft.irfft(spec, self.config.n_fft, axis=-1) * self._window
        out = _overlap_add(frames, self.hop) / wss  # [B, (F + 3) * hop]
        pad = (self.config.n_fft - self.hop) // 2
        return out[:, pad : pad + spec.shape[1] * self.hop]

    def _reconstruct(self, magnitude: np.ndarray, phase: np.ndarray) -> np.ndarray:
        """Magnitude and initial phase [B, F, n_bins] (zero-phase framing) -> audio [B, F*hop].

        Griffin-Lim runs on raw rfft frames: the zero-phase sign and the scale only matter when
        going between them and the codec's spectra, so they are applied once, here."""
        F = magnitude.shape[1]
        raw_magnitude = magnitude * self._scale
        spec = (raw_magnitude * self._sign) * (np.cos(phase) + 1j * np.sin(phase))
        wss = _overlap_add(np.broadcast_to(self._window**2, (1, F, self.config.n_fft)), self.hop)
        wss = np.maximum(wss, 1e-6)  # >= 0.7 inside the span that is kept: n_fft = 4 hops
        previous = spec
        for _ in range(self.config.griffin_lim_iters):  # fast Griffin-Lim (Perraudin et al. 2013)
            rebuilt = scipy.fft.rfft(self._frame(self._istft_raw(spec, wss)), axis=-1)
            projected = raw_magnitude * _unit(rebuilt)
            spec = projected + 0.99 * (projected - previous)
            previous = projected
        return self._istft_raw(raw_magnitude * _unit(spec), wss)

    # ---- features -----------------------------------------------------------------------------

    def features(self, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """audio [B, T] -> band log power [B, F, D] (dB) and silent-frame mask [B, F]."""
        n = self.frames(audio.shape[-1]) * self.hop
        x = audio[:, :n].astype(np.float32)
        frames = self._frame(x)  # [B, F, n_fft]
        mean_square = (frames**2).sum(-1) / (self._window**2).sum()  # [B, F]
        silent = mean_square < 10.0 ** (self.config.silence_dbfs / 10.0)
        power = np.abs(scipy.fft.rfft(frames, axis=-1) / self._scale) ** 2  # [B, F, n_bins]
        bands = power @ self._analysis.T  # [B, F, D]
        db = 10.0 * np.log10(np.maximum(bands, 10.0 ** (self.config.floor_db / 10.0)))
        # Valleys far below the frame's peak are inaudible yet vary wildly; flattening them
        # keeps the codebooks' capacity for what a listener hears.
        db = np.maximum(db, db.max(-1, keepdims=True) - self.config.range_db)
        return db.astype(np.float32), silent

    def weights(self, feats: np.ndarray) -> np.ndarray:
        """Per-band VQ weights [..., D]: loud bands count more, so the peaks (what sets pitch,
        timbre and loudness) are matched before the quiet skirts between them."""
        relative = feats - feats.max(-1, keepdims=True)  # <= 0 dB
        return (10.0 ** (relative * (self.config.emphasis / 20.0))).astype(np.float32)

    # ---- encode / decode -----------------------------------------------------------------------

    def encode(self, audio: np.ndarray) -> np.ndarray:
        """float [B, 1, T] (or [1, T] or [T]) at 16 kHz -> int64 codes [B, K, T // hop]."""
        x = _as_batch(audio)  # [B, T]
        if not np.isfinite(x).all():
            raise ValueError("audio has non-finite samples (NaN or inf); clean it before encode")
        feats, silent = self.features(x)  # [B, F, D], [B, F]
        weight = self.weights(feats)  # [B, F, D]
        residual = feats.copy()
        codes = np.zeros((x.shape[0], self.n_codebooks, feats.shape[1]), dtype=np.int64)
        for k in range(self.n_codebooks):
            book = self.codebooks[k]  # [N, D]
            # Weighted error sum_d w_d (r_d - c_d)^2 less its constant term sum_d w_d r_d^2.
            dist = weight @ self._sq_codebooks[k].T - 2.0 * (weight * residual) @ book.T
            if k == 0:  # dist [B, F, N]
                dist[..., 0] = np.inf  # codebook 0's code 0 is reserved for silence
            code = dist.argmin(-1)  # [B, F]
            residual -= book[code]
            codes[:, k] = code
        return np.where(silent[:, None, :], self.silence_codes[None, :, None], codes)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """int codes [B, K, F] (or [K, F]) -> float32 audio [B, 1, F * hop]."""
        codes = np.asarray(codes)
        codes = codes[None] if codes.ndim == 2 else codes
        if codes.ndim != 3 or not np.issubdtype(codes.dtype, np.integer):
            raise ValueError(f"codes must be integers [B, K, F]; got {codes.dtype} {codes.shape}")
        if codes.shape[1] != self.n_codebooks:
            raise ValueError(f"codes have {codes.shape[1]} codebooks (shape {codes.shape}); "
                             f"this codec has K={self.n_codebooks}")
        bad = (codes < 0) | (codes >= self.cardinality)
        if bad.any():
            where = np.argwhere(bad)[:3].tolist()
            raise ValueError(f"codes must lie in [0, {self.cardinality - 1}]; found "
                             f"{sorted(set(codes[bad].tolist()))[:5]} at [b, k, f] = {where}")
        B, _, F = codes.shape
        if F == 0:
            return np.zeros((B, 1, 0), dtype=np.float32)
        db = sum(self.codebooks[k][codes[:, k]] for k in range(self.n_codebooks))  # [B, F, D]
        silent = (codes == self.silence_codes[None, :, None]).all(1)  # [B, F]
        # Bands at the flattened floor (range_db under the peak) stand for "nothing audible":
        # subtract twice the floor's power so they decode to silence, not to a noise bed.
        power = 10.0 ** (db / 10.0)  # [B, F, D]
        floor = 10.0 ** ((db.max(-1, keepdims=True) - self.config.range_db) / 10.0)
        power = np.maximum(power - 2.0 * floor, 0.0)
        # Interpolate power (not dB) so each band's energy is spread over its bins, not lost.
        magnitude = np.sqrt(power @ self._synthesis).astype(np.float32)  # [B, F, n_bins]
        magnitude[silent] = 0.0
        audio = self._reconstruct(magnitude, _locked_phase(magnitude, self.config))
        return audio[:, None, :].astype(np.float32)

    # ---- fitting --------------------------------------------------------------------------------

    @classmethod
    def fit(cls, audio: list[np.ndarray] | np.ndarray, seed: int = 0,
            config: CodecConfig | None = None, max_frames: int = 80000,
            iters: int = 25) -> Codec:
        """Fit the K codebooks by k-means on the residuals of the previous ones (16 kHz mono
        input: a list of [T] / [1, T] arrays or one [B, 1, T] array). Deterministic in seed."""
        cfg = config or CodecConfig()
        rng = np.random.default_rng(seed)
        empty = np.zeros((cfg.n_codebooks, cfg.cardinality, cfg.n_bands), dtype=np.float32)
        probe = cls(empty, cfg)
        clips = list(audio) if isinstance(audio, list) else list(_as_batch(audio))
        feats = []
        for clip in clips:
            f, silent = probe.features(_as_batch(clip))
            feats.append(f[~silent])  # silence has its fixed code; it does not shape codebooks
        x = np.concatenate(feats).astype(np.float32)  # [N, D]
        if x.shape[0] > max_frames:
            x = x[np.sort(rng.choice(x.shape[0], max_frames, replace=False))]
        w = probe.weights(x)  # [N, D], fixed by the input frame through every stage
        if x.shape[0] < cfg.cardinality:
            raise ValueError(f"fit needs at least {cfg.cardinality} non-silent frames, got "
                             f"{x.shape[0]}; pass more (or louder) audio")
        books = np.zeros((cfg.n_codebooks, cfg.cardinality, cfg.n_bands))
        books[0, 0] = cfg.floor_db  # code 0 of codebook 0: the silent floor; others stay zero
        residual = x
        for k in range(cfg.n_codebooks):
            books[k, 1:] = _kmeans(residual, w, cfg.cardinality - 1, rng, iters)
            candidates = books[k, 1:] if k == 0 else books[k]
            d = w @ (candidates**2).T - 2.0 * (w * residual) @ candidates.T
            residual = residual - candidates[d.argmin(-1)]
        return cls(books.astype(np.float32), cfg)

    def save(self, path: str | Path) -> None:
        np.savez_compressed(path, codebooks=self.codebooks,
                            config=np.array(list(asdict(self.config).items()), dtype=str))

    @classmethod
    def load(cls, path: str | Path) -> Codec:
        with np.load(path, allow_pickle=False) as f:
            fields = {name: value for name, value in f["config"]}
            types = {name: type(v) for name, v in asdict(CodecConfig()).items()}
            cfg = CodecConfig(**{n: types[n](v) for n, v in fields.items()})
            return cls(f["codebooks"], cfg)


# ---- helpers ------------------------------------------------------------------------------------


def _unit(z: np.ndarray) -> np.ndarray:
    """exp(i * angle(z)) without trigonometry (0 where z is 0: its magnitude is 0 there too)."""
    return z / np.maximum(np.abs(z), 1e-30)


def _as_batch(audio: np.ndarray) -> np.ndarray:
    """[T] / [1, T] / [B, 1, T] -> [B, T]."""
    a = np.asarray(audio)
    if a.ndim == 1:
        return a[None]
    if a.ndim == 2 and a.shape[0] == 1:
        return a
    if a.ndim == 3 and a.shape[1] == 1:
        return a[:, 0]
    raise ValueError(f"expected mono audio [B, 1, T], [1, T] or [T]; got shape {a.shape} "
                     "(downmix to mono first)")


def _overlap_add(frames: np.ndarray, hop: int) -> np.ndarray:
    """[B, F, n_fft] with n_fft = m * hop -> [B, (F + m - 1) * hop], by m shifted adds."""
    B, F, n = frames.shape
    m = n // hop
    parts = frames.reshape(B, F, m, hop)
    out = np.zeros((B, F + m - 1, hop), dtype=frames.dtype)
    for j in range(m):
        out[:, j : j + F] += parts[:, :, j]
    return out.reshape(B, -1)


def _locked_phase(magnitude: np.ndarray, cfg: CodecConfig) -> np.ndarray:
    """Phase-locked vocoder phase [B, F, n_bins]: every bin follows its nearest spectral peak,
    whose phase advances by its (parabolically interpolated) frequency times the hop."""
    B, F, nb = magnitude.shape
    # Bins on axis 0 ([nb, B * F]) so the running max/min below sweep whole rows at a time.
    db = np.ascontiguousarray((20.0 * np.log10(magnitude + 1e-9)).reshape(B * F, nb).T)
    left, mid, right = db[:-2], db[1:-1], db[2:]
    peak = np.zeros(db.shape, dtype=bool)
    peak[1:-1] = (mid > left) & (mid >= right) & (mid > db.max(0) - 60.0)
    curvature = np.minimum(left - 2.0 * mid + right, -1e-6)
    offset = np.zeros(db.shape, dtype=np.float32)  # peak position relative to its bin
    offset[1:-1] = np.clip(0.5 * (left - right) / curvature, -0.5, 0.5)
    idx = np.arange(nb, dtype=np.int32)[:, None]
    before = np.maximum.accumulate(np.where(peak, idx, -1), axis=0)
    after = np.minimum.accumulate(np.where(peak, idx, 2 * nb)[::-1], axis=0)[::-1]
    use_after = (after < nb) & ((before < 0) | (after - idx < idx - before))
    nearest = np.where(use_after, after, np.where(before >= 0, before, idx))  # [nb, B * F]
    freq = np.take_along_axis(idx + offset, nearest, axis=0)  # in bins
    advance = (2.0 * np.pi * cfg.hop / cfg.n_fft) * freq  # radians per frame
    # Frames depend on the previous one, so loop over F; rows of the batch go side by side.
    pointer = (nearest.reshape(nb, B, F) + (np.arange(B, dtype=np.int32) * nb)[None, :, None])
    pointer = pointer.transpose(2, 1, 0).reshape(F, B * nb)
    step = advance.reshape(nb, B, F).transpose(2, 1, 0).reshape(F, B * nb).astype(np.float64)
    phase = np.zeros((F, B * nb))
    for f in range(1, F):
        phase[f] = phase[f - 1][pointer[f]] + step[f]
    phase -= (2.0 * np.pi) * np.floor(phase / (2.0 * np.pi))  # wrap; np.mod is 5x slower
    return phase.reshape(F, B, nb).transpose(1, 0, 2).astype(np.float32)


def _kmeans(x: np.ndarray, w: np.ndarray, k: int, rng: np.random.Generator, iters: int,
            seed_points: int = 8192) -> np.ndarray:
    """Weighted Lloyd's k-means: minimise sum_i sum_d w_id (x_id - c_d)^2 over centres [k, D].
    k-means++ seeding runs on a random subset (it is sequential in k)."""
    n = x.shape[0]
    pool = rng.choice(n, min(n, seed_points), replace=False)
    px, pw = x[pool], w[pool]
    centres = np.empty((k, x.shape[1]), dtype=np.float64)
    centres[0] = px[rng.integers(px.shape[0])]
    nearest_sq = (pw * (px - centres[0]) ** 2).sum(-1)
    for j in range(1, k):
        centres[j] = px[rng.choice(px.shape[0], p=nearest_sq / nearest_sq.sum())]
        nearest_sq = np.minimum(nearest_sq, (pw * (px - centres[j]) ** 2).sum(-1))
    wx = w * x
    const = (wx * x).sum(-1)  # [N]
    for _ in range(iters):
        d = const[:, None] + w @ (centres**2).T - 2.0 * wx @ centres.T  # [N, k]
        assign = d.argmin(-1)
        onehot = scipy.sparse.csr_matrix((np.ones(n, x.dtype), (assign, np.arange(n))),
                                         shape=(k, n))
        counts = np.bincount(assign, minlength=k)
        num, den = onehot @ wx, onehot @ w  # [k, D] each: per-band weighted means
        centres = np.where(den > 0, num / np.maximum(den, 1e-12), centres)
        empty = np.flatnonzero(counts == 0)
        if empty.shape[0]:  # refill empty clusters with the worst-served points
            worst = np.argsort(-d[np.arange(n), assign])[: empty.shape[0]]
            centres[empty] = x[worst]
    return centres


# ---- the default codec --------------------------------------------------------------------------


FIT_DATA_SEED = 7919  # a clip collection disjoint from the pipeline's own (seeds 0, 1, ...)


def training_audio(n_clips: int = 400, seed: int = FIT_DATA_SEED) -> list[np.ndarray]:
    """Generated clips (data.py), downmixed to mono and resampled 32 kHz -> 16 kHz with soxr."""
    import soxr

    from .data import generate_clips

    clips = generate_clips(n_clips, seed=seed, sample_rate=32000)
    return [soxr.resample(c.audio.mean(0), 32000, 16000).astype(np.float32) for c in clips]


def build_default_codec(seed: int = 0) -> Codec:
    """400 clips (35 minutes, 103k sounding frames, 80k sampled) -> 4 x 256 codebooks (~25 s)."""
    return Codec.fit(training_audio(), seed=seed, max_frames=80000, iters=25)


def write_default_asset(path: str | Path = ASSET) -> Path:
    """Regenerate the shipped asset (deterministic up to BLAS rounding):
    python -c "from signalchain.reference.codec import write_default_asset; write_default_asset()"
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    build_default_codec().save(path)
    return path


@functools.lru_cache(maxsize=1)
def default_codec() -> Codec:
    """The reference pipeline's codec: the shipped asset, or (if absent) fitted here, same seed."""
    return Codec.load(ASSET) if ASSET.exists() else build_default_codec()
