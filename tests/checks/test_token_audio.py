"""Tokens against the audio they came from, judged on this codec's own baseline: a wrong pairing of
decode and audio is the chance level; the pairings that beat every wrong one show the fresh level."""

import numpy as np

from signalchain.checks.token_audio import judge_token_audio, resolution


def measured(sims, best=None, best_sims=None):
    sims = np.asarray(sims, dtype=float)
    n = len(sims)
    own = np.diag(sims).tolist()
    k = list(range(4))
    out = {
        "own": own,
        "sims": sims.tolist(),
        "examples": list(range(n)),
        "identity": float(np.mean(own)),
        "others_mean": float(sims[~np.eye(n, dtype=bool)].mean()),
        "best_perm": k,
        "best_perm_score": float(np.mean(own)),
        "best_perm_own": own,
        "best_perm_sims": sims.tolist(),
    }
    if best is not None:
        b = np.asarray(best_sims, dtype=float)
        out.update(best_perm=best, best_perm_score=float(np.diag(b).mean()), best_perm_own=np.diag(b).tolist(),
                   best_perm_sims=b.tolist())
    return out


def matrix(own, n=8, seed=0, spread=0.1, level=0.0):
    rng = np.random.default_rng(seed)
    s = level + spread * rng.standard_normal((n, n))
    s[np.diag_indices(n)] = own
    return s


def ids(findings):
    return [(f.id, f.severity.value) for f in findings]


def test_fresh_codes_of_a_good_codec_are_silent():
    assert judge_token_audio(measured(matrix([0.8] * 8))) == []


def test_a_good_codec_that_is_poorer_than_the_reference_is_judged_on_its_own_level():
    # fresh codes of this codec score ~0.35 (the reference's ~0.8 would call every one stale)
    assert judge_token_audio(measured(matrix([0.35, 0.36, 0.34, 0.37, 0.35, 0.33, 0.36, 0.35], spread=0.03))) == []


def test_tokens_that_match_their_audio_no_better_than_another_examples_are_stale():
    own = [0.02, -0.1, 0.0, 0.8, 0.05, 0.03, 0.04, 0.85]  # two fresh (crop at 0), the rest from another crop
    f = judge_token_audio(measured(matrix(own)))
    assert ids(f) == [("loader.stale_cache", "error")]
    assert f[0].evidence["fresh_level"] > 0.7 and f[0].stage == "tokens"


def test_a_codec_that_cannot_tell_examples_apart_is_not_judged():
    rng = np.random.default_rng(3)
    for seed in range(20):  # own pairings drawn like the wrong ones: a random toy codec
        s = 0.2 * np.random.default_rng(seed).standard_normal((4, 4))
        assert ids(judge_token_audio(measured(s))) in ([("tokens.audio_unjudged", "info")], [])
    assert resolution([0.0, 0.1, -0.1, 0.0], 0.2 * rng.standard_normal((4, 4)))["resolves"] is False


def test_codebooks_in_the_wrong_order_decode_well_only_reordered():
    given = matrix([0.05, 0.1, 0.0, 0.02, 0.08, 0.0, 0.03, 0.1], spread=0.05)
    reordered = matrix([0.8] * 8, seed=1)
    f = judge_token_audio(measured(given, best=[3, 2, 1, 0], best_sims=reordered))
    assert ids(f) == [("tokens.codebook_order", "error")]


def test_a_reordering_that_wins_by_noise_on_a_poor_codec_is_not_a_codebook_order():
    given = 0.2 * np.random.default_rng(5).standard_normal((4, 4))
    noise = given + 0.25  # better on average, but resolving nothing
    np.fill_diagonal(noise, np.diag(given) + 0.25)
    f = judge_token_audio(measured(given, best=[1, 0, 2, 3], best_sims=noise))
    assert "tokens.codebook_order" not in [i for i, _ in ids(f)]
