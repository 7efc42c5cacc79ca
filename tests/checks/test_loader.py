"""The loader judge: batches that repeat, judged against what the split's size and the draws imply."""

from signalchain.checks.loader import judge_loader


def ids(findings):
    return [(f.id, f.severity.value) for f in findings]


def epochs(n_clips, batch=4, batches=8):
    """An epoch sampler over `n_clips` (drop_last): every clip once per epoch, shuffled anew."""
    import numpy as np

    rng = np.random.default_rng(0)
    out, order = [], []
    while len(out) < batches:
        if len(order) < batch:
            order = list(rng.permutation(n_clips))
        out.append({"batch": str(len(out)), "examples": [f"e{order.pop()}" for _ in range(batch)]})
    return out


def test_a_small_split_drawn_for_several_epochs_is_info():
    """Ten clips drawn 32 times (a small fine-tune): every clip comes back, as the split's size implies."""
    batches = epochs(10)
    assert len({e for b in batches for e in b["examples"]}) == 10
    f = judge_loader({"batches": batches, "revisits": [], "train_size": 10})
    assert ids(f) == [("loader.repeats", "info")] and "epochs of a small split" in f[0].message
    fresh = [{"batch": str(i), "examples": [f"e{4 * i + j}" for j in range(4)]} for i in range(8)]
    assert judge_loader({"batches": fresh, "revisits": [], "train_size": 100}) == []


def test_without_the_split_size_repeats_are_not_judged():
    f = judge_loader({"batches": epochs(10), "revisits": []})
    assert ids(f) == [("loader.repeats", "info")] and "cannot be told" in f[0].message


def test_a_sampler_cycling_over_part_of_the_split_warns():
    cycling = [{"batch": str(i), "examples": [f"e{(4 * i + j) % 3}" for j in range(4)]} for i in range(8)]
    f = judge_loader({"batches": cycling, "revisits": [], "train_size": 100})
    assert ids(f) == [("loader.repeats", "warning")] and f[0].evidence["distinct"] == 3
    # a split listing 30 rows of 3 clips (copies concatenated): the rows promise more than the loader shows
    copies = [{"batch": str(i), "examples": [f"e{(i + j) % 3}" for j in range(4)]} for i in range(8)]
    assert ids(judge_loader({"batches": copies, "revisits": [], "train_size": 30})) == [("loader.repeats", "warning")]


def test_every_batch_holding_the_same_examples_warns():
    """A batch that covers the split: each update sees one set of clips, reordered (a debug subset of 8)."""
    same = [{"batch": str(i), "examples": [f"e{(j + i) % 8}" for j in range(8)]} for i in range(8)]
    f = judge_loader({"batches": same, "revisits": [], "train_size": 8})
    assert ids(f) == [("loader.repeats", "warning")] and f[0].evidence["same_set"] == 8
    assert ids(judge_loader({"batches": same, "revisits": []})) == [("loader.repeats", "warning")]


def test_the_same_batch_again_is_an_error():
    again = [{"batch": "x", "examples": ["a", "b"]} for _ in range(3)]
    assert ids(judge_loader({"batches": again, "revisits": [], "train_size": 10})) == [("loader.repeats", "error")]


def _same(pattern):
    return [{"batch": b, "examples": []} for b in pattern]


def test_identical_batches_in_runs_of_the_worker_count_name_worker_seeding():
    for pattern, k in ((["a", "a", "b", "b"], 2), (["a", "a", "a", "b", "b", "b", "c"], 3)):
        f = judge_loader({"batches": _same(pattern), "revisits": []})
        assert ids(f) == [("loader.repeats", "error")] and f[0].evidence["period"] == k
        assert "worker_init_fn" in f[0].hint and f"runs of {k}" in f[0].message


def test_one_batch_over_and_over_is_a_re_created_iterator():
    for pattern in (["a"] * 4, ["a", "b", "b", "c"], ["a", "a", "b", "c"]):
        f = judge_loader({"batches": _same(pattern), "revisits": []})
        assert ids(f) == [("loader.repeats", "error")] and f[0].evidence["period"] is None
        assert "re-created" in f[0].hint
