"""MIDI audit benchmarks, measured in one run (DESIGN §7):

    .venv/bin/python benchmarks/bench_midi_audit.py [--pieces 100000] [--threads 1]

1. throughput: note fingerprints per second, and MIDI files read and fingerprinted per second;
2. recall and precision on the planted set (symbolic.random_pieces.planted_set): transposed
   (±1…6 semitones), tempo-event (±10 %), time-stretched (±10 %) and re-voiced copies of training
   pieces among unrelated pieces and other tunes over a training piece's chords, through the real
   path (faiss search + note comparison);
3. search at --pieces pieces (90 % train, 10 % test; 1 % of the test pieces are planted transposed
   or tempo-changed copies): the faiss index the audit builds against brute force (numpy exact
   all-pairs cosine over every test × train pair, in chunks), both timed in full, their ratio, and
   the recall of each on the planted copies; then the whole cross-split search as the audit runs it.

Every piece is generated and fingerprinted for real (no synthetic vectors). `--music21 N` adds real
music: N Bach pieces of music21's corpus (slow to parse: ~2 s each), the closest pairs the corpus
itself holds (it keeps several editions and keys of some chorales), and transposed + stretched
copies of each verified against its source.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from signalchain.audit import midi_search
from signalchain.audit.leakage import Entry
from signalchain.audit.midi_read import parse_midi
from signalchain.audit.midi_search import find_note_matches
from signalchain.audit.search import WindowIndex, neighbours
from signalchain.symbolic.fingerprint import fingerprint_notes
from signalchain.symbolic.notes import score_to_midi_bytes, to_score
from signalchain.symbolic.random_pieces import planted_set, random_piece, stretched, transposed


def throughput(n: int) -> None:
    rng = np.random.default_rng(0)
    pieces = [random_piece(rng) for _ in range(n)]
    notes = sum(len(r) for r, _ in pieces)
    t = time.perf_counter()
    for rows, tempo in pieces:
        fingerprint_notes(rows, tempo)
    t_fp = time.perf_counter() - t
    files = [score_to_midi_bytes(to_score(r, tempo)) for r, tempo in pieces[: n // 4]]
    t = time.perf_counter()
    for data in files:
        p = parse_midi(data)
        fingerprint_notes(p.notes, p.tempo)
    t_file = time.perf_counter() - t
    print(f"throughput, one process ({n} pieces, {notes / n:.0f} notes a piece on average):")
    print(f"  note fingerprints              {n / t_fp:8.0f} pieces/s  ({notes / t_fp:,.0f} notes/s)")
    print(f"  MIDI bytes read + fingerprint  {len(files) / t_file:8.0f} files/s")


def _entries(splits: dict[str, list[tuple[np.ndarray, float]]]) -> tuple[list[Entry], list]:
    entries, fps = [], []
    for split, pieces in splits.items():
        for i, (rows, tempo) in enumerate(pieces):
            fp = fingerprint_notes(rows, tempo)
            entries.append(Entry(split, f"{split}/{i}.mid", f"{split}/{i}.mid", fp.exact))
            fps.append(fp)
    return entries, fps


def recall_precision(train: int, per_kind: int, distractors: int) -> None:
    splits, truth = planted_set(np.random.default_rng(16), train, per_kind, distractors)
    entries, fps = _entries(splits)
    matches, stats = find_note_matches(entries, fps)
    found = {m.a - train: m for m in matches}
    print(f"\nrecall / precision on the planted set ({per_kind} copies of each kind among {train} training "
          f"pieces, plus {distractors} pieces that are no copy, half of them other tunes over a training "
          f"piece's chords; search + note comparison):")
    print(f"  {'copy':34s} {'recall':>7s} {'kind right':>10s}")
    names = ("transposed ±1…6 semitones", "tempo event ±10 %", "time-stretch ±10 %", "re-voiced")
    for k, name in enumerate(names):
        js = [j for j in truth if j % 4 == k]
        hit = [j for j in js if j in found and found[j].b == truth[j][0]]
        right = sum(found[j].kind == truth[j][1] for j in hit)
        print(f"  {name:34s} {len(hit) / len(js):7.3f} {right:>5d}/{len(hit)}")
    right = [j for j in truth if j in found and found[j].b == truth[j][0] and found[j].kind == truth[j][1]]
    shifts = [found[j].shift for j in right if truth[j][1] == "transposed"]
    print(f"  all: recall {len(right) / len(truth):.3f}, precision {len(right) / max(len(found), 1):.3f} "
          f"({len(found)} flagged, {int(stats['candidates'])} candidates compared); shifts named: "
          f"{sorted(set(shifts))}")


def _scale_set(pieces: int, rng: np.random.Generator) -> tuple[dict[str, list], dict[int, int]]:
    n_test = max(10, pieces // 10)
    train = [random_piece(rng) for _ in range(pieces - n_test)]
    test = [random_piece(rng) for _ in range(n_test)]
    planted = rng.choice(n_test, size=max(1, n_test // 100), replace=False)
    truth = {}
    for n, j in enumerate(planted):
        src = int(rng.integers(len(train)))
        rows, tempo = train[src]
        factor = float(rng.choice([0.9, 0.93, 1.07, 1.1]))
        shift = int(rng.choice([s for s in range(-6, 7) if s]))
        test[int(j)] = ((transposed(rows, shift), tempo), (rows.copy(), tempo * factor),
                        (stretched(rows, factor), tempo))[n % 3]
        truth[int(j)] = src
    return {"train": train, "test": test}, truth


def _brute(test: np.ndarray, train: np.ndarray, k: int, threshold: float, chunk: int = 512) -> set[tuple[int, int]]:
    """Exact cosine of every (test, train) pair in numpy; the top k above the threshold per test piece."""
    out = set()
    for lo in range(0, len(test), chunk):
        sims = test[lo : lo + chunk] @ train.T
        top = np.argpartition(-sims, k, axis=1)[:, :k]
        for q, cols in enumerate(top):
            out |= {(lo + q, int(c)) for c in cols if sims[q, c] >= threshold}
    return out


def search_scale(pieces: int, threads: int) -> None:
    rng = np.random.default_rng(1)
    t = time.perf_counter()
    splits, truth = _scale_set(pieces, rng)
    t_gen = time.perf_counter() - t
    t = time.perf_counter()
    entries, fps = _entries(splits)
    t_fp = time.perf_counter() - t
    n_train = len(splits["train"])
    train_v = np.stack([f.vector for f in fps[:n_train]])
    test_v = np.stack([f.vector for f in fps[n_train:]])
    k, threshold = midi_search.NEIGHBOURS, midi_search.CANDIDATE_SIMILARITY
    print(f"\nsearch at {pieces:,} pieces ({n_train:,} train, {len(test_v):,} test, {len(truth)} planted copies: "
          f"transposed, tempo event, time-stretch), {threads} thread(s):")
    print(f"  generated in {t_gen:.0f} s; fingerprinted in {t_fp:.0f} s ({pieces / t_fp:.0f} pieces/s)")
    t = time.perf_counter()
    index = WindowIndex.build(train_v, np.arange(n_train), threads)
    t_build = time.perf_counter() - t
    t = time.perf_counter()
    found = neighbours(index, test_v, np.arange(n_train, n_train + len(test_v)), k, threshold)
    t_query = time.perf_counter() - t
    t = time.perf_counter()
    brute = _brute(test_v, train_v, k, threshold)
    t_brute = time.perf_counter() - t
    r_index = np.mean([(n_train + j, src) in found for j, src in truth.items()])
    r_brute = np.mean([(j, src) in brute for j, src in truth.items()])
    agree = len({(a - n_train, b) for a, b in found} & brute) / max(len(brute), 1)
    print(f"  {'method':34s} {'seconds':>8s} {'recall':>7s}")
    print(f"  {'faiss ' + ('IVF' if not index.exact else 'flat') + ' (build + search)':34s} {t_build + t_query:8.2f} "
          f"{r_index:7.3f}   (build {t_build:.2f} s, search {t_query:.2f} s)")
    print(f"  {'numpy brute force, all pairs':34s} {t_brute:8.2f} {r_brute:7.3f}")
    print(f"  speed-up {t_brute / (t_build + t_query):.1f}× over brute force; the index returns "
          f"{agree:.3f} of brute force's candidate pairs")
    t = time.perf_counter()
    matches, stats = find_note_matches(entries, fps, threads=threads)
    t_audit = time.perf_counter() - t
    hit = {m.a - n_train for m in matches if truth.get(m.a - n_train) == m.b}
    print(f"  the audit's whole cross-split search: {t_audit:.2f} s, {int(stats['candidates'])} candidates compared, "
          f"{len(matches)} pairs flagged, recall {len(hit) / len(truth):.3f}, precision "
          f"{len(hit) / max(len(matches), 1):.3f}")


def corpus_check(n: int) -> None:
    from music21 import corpus
    from music21.midi import translate

    from signalchain.symbolic.fingerprint import compare

    pieces = []
    for path in corpus.getComposer("bach")[:n]:
        try:
            p = parse_midi(translate.streamToMidiFile(corpus.parse(path)).writestr())
        except Exception:  # a corpus file music21 cannot write as MIDI
            continue
        if len(p.notes):
            pieces.append((str(path).rsplit("/", 1)[-1], p))
    fps = [fingerprint_notes(p.notes, p.tempo) for _, p in pieces]
    v = np.stack([f.vector for f in fps])
    sims = v @ v.T
    np.fill_diagonal(sims, 0.0)
    print(f"\nmusic21's corpus, {len(pieces)} Bach pieces: pairs it holds (cosine ≥ {midi_search.CANDIDATE_SIMILARITY}"
          f" and note agreement ≥ {midi_search.SAME_AGREEMENT}):")
    seen = set()
    for i, j in zip(*np.nonzero(np.triu(sims) >= midi_search.CANDIDATE_SIMILARITY)):
        c = compare(fps[i], fps[j])
        if 0.5 * (c.agreement + c.melody) >= midi_search.SAME_AGREEMENT and (i, j) not in seen:
            seen.add((i, j))
            print(f"  {pieces[i][0]:20s} ~ {pieces[j][0]:20s} cosine {sims[i, j]:.3f} agreement "
                  f"{0.5 * (c.agreement + c.melody):.2f} shift {c.shift:+d}")
    rng, ok = np.random.default_rng(0), 0
    for fp, (_, p) in zip(fps, pieces):
        shift, factor = int(rng.choice([-6, -4, -2, -1, 1, 3, 5, 6])), float(rng.choice([0.9, 1.1]))
        copy = fingerprint_notes(stretched(transposed(p.notes, shift), factor), p.tempo)
        c = compare(fp, copy)
        ok += c.shift == shift and 0.5 * (c.agreement + c.melody) >= midi_search.SAME_AGREEMENT and float(
            fp.vector @ copy.vector) >= midi_search.CANDIDATE_SIMILARITY
    print(f"  transposed (±1…6) and stretched (±10 %) copies verified with the right shift: {ok}/{len(pieces)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pieces", type=int, default=100_000, help="pieces in the search at scale")
    ap.add_argument("--threads", type=int, default=1, help="faiss threads")
    ap.add_argument("--quick", action="store_true", help="smaller sets (a smoke run)")
    ap.add_argument("--music21", type=int, default=0, metavar="N", help="also check N pieces of music21's corpus")
    args = ap.parse_args()
    throughput(200 if args.quick else 2000)
    recall_precision(*((300, 15, 60) if args.quick else (2000, 50, 400)))
    search_scale(2_000 if args.quick else args.pieces, args.threads)
    if args.music21:
        corpus_check(args.music21)


if __name__ == "__main__":
    main()
