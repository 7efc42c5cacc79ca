"""The loader judge: batches that repeat, judged against what the split can show."""

from signalchain.checks.loader import judge_loader


def ids(findings):
    return [(f.id, f.severity.value) for f in findings]


def test_repeats_are_judged_against_what_the_split_can_show():
    batches = [{"batch": str(i), "examples": [f"e{(4 * i + j) % 10}" for j in range(4)]} for i in range(8)]
    # 10 clips in 32 draws: a small set seen epoch after epoch repeats most draws, whatever the split lists
    assert ids(judge_loader({"batches": batches, "revisits": [], "train_size": 10})) == [("loader.repeats", "warning")]
    fresh = [{"batch": str(i), "examples": [f"e{4 * i + j}" for j in range(4)]} for i in range(8)]
    assert judge_loader({"batches": fresh, "revisits": [], "train_size": 100}) == []
    f = judge_loader({"batches": batches, "revisits": []})  # size unknown: 10 distinct in 32 draws
    assert ids(f) == [("loader.repeats", "warning")]
    cycling = [{"batch": str(i), "examples": [f"e{(4 * i + j) % 3}" for j in range(4)]} for i in range(8)]
    assert ids(judge_loader({"batches": cycling, "revisits": [], "train_size": 100})) == [("loader.repeats", "warning")]
