"""Judge the condition on the data side, stage by stage: metadata → caption → pairing with the audio
→ condition dropout → condition tokens (whether the captions say anything about the targets:
`conditioning_relationship`).

Every judge reads a `ConditionData` (the golden batch and some training batches, traced up to the
condition embedding) and returns findings; none trains or reads a file.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
from scipy.stats import binomtest

from ..findings import Finding
from ..records.conditioning import ConditionBatch, ConditionData, DeclaredGuidance
from .base import make
from .pieces import count_recordings

__all__ = ["words", "judge_empty", "judge_truncated", "judge_unknown_tokens", "judge_metadata", "judge_pairing",
           "judge_dropout", "judge_guidance_dropout", "judge_unseen_words", "CAPTION_CHECKS"]

CHECK = "checks.conditioning"
_PUNCTUATION = re.compile(r"[^\w\s]")


def words(text: str) -> list[str]:
    """Lower-case words without punctuation: how captions are compared here (not how they are tokenised)."""
    return _PUNCTUATION.sub(" ", str(text).lower()).split()


def _meta_texts(meta: dict) -> dict[str, str]:
    """The text-valued fields of one metadata record (lists of strings joined)."""
    out = {}
    for key, value in meta.items():
        if isinstance(value, str):
            out[key] = value
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            out[key] = " ".join(value)
    return out


def _record_key(meta: dict) -> str:
    return json.dumps(meta, sort_keys=True, default=str)


def _records(data: ConditionData) -> list[dict]:
    """The distinct metadata records of the batches (an example seen twice counts once)."""
    seen: dict[str, dict] = {}
    for b in data.batches:
        for m in b.metadata or []:
            if m:
                seen.setdefault(_record_key(m), m)
    return list(seen.values())


def _description_fields(data: ConditionData) -> dict[str, float]:
    """Metadata fields that read like a description: several words, different for most distinct records.
    Returns field -> mean word count."""
    values: dict[str, list[str]] = {}
    for m in _records(data):
        for k, v in _meta_texts(m).items():
            values.setdefault(k, []).append(v)
    return {k: float(np.mean([len(words(v)) for v in vs])) for k, vs in values.items()
            if len(vs) >= 4 and np.mean([len(words(v)) for v in vs]) >= 4 and len(set(vs)) >= 0.5 * len(vs)}


def _field_summary(records: list[dict], key: str, captions: set[str]) -> str:
    """What one metadata field holds over the records: absent / empty / not text / N distinct values."""
    n = len(records)
    present = [m[key] for m in records if key in m and m[key] is not None]
    texts = [_meta_texts({key: v}).get(key) for v in present]
    text = [t for t in texts if t is not None]
    parts = []
    if len(present) < n:
        parts.append(f"absent in {n - len(present)} of {n}")
    empty = sum(1 for t in text if not t.strip())
    if empty:
        parts.append(f"empty in {empty}")
    other = len(present) - len(text)
    if other:
        kinds = sorted({type(v).__name__ for v, t in zip(present, texts) if t is None})
        parts.append(f"not text in {other} ({', '.join(kinds)})")
    full = [t for t in text if t.strip()]
    if full:
        distinct = len(set(full))
        w = float(np.mean([len(words(t)) for t in full]))
        same = " (the captions themselves)" if set(full) <= captions else ""
        parts.append(
            f"{distinct} distinct value{'s' if distinct != 1 else ''} of {w:.0f} word{'s' if round(w) != 1 else ''}"
            f"{same}"
        )
    return f"{key!r}: " + ", ".join(parts or ["no values"])


def _kept_rows(b: ConditionBatch) -> list[int]:
    """Rows that condition dropout did not replace by the null condition."""
    return [i for i in range(len(b.captions)) if b.dropped is None or i >= len(b.dropped) or not b.dropped[i]]


def judge_empty(data: ConditionData) -> list[Finding]:
    """Captions that are empty, or non-empty captions whose condition tokens are all padding."""
    caps = data.captions
    if not caps:
        return []
    empty = sum(1 for c in caps if not c.strip())
    if empty / len(caps) > 0.1:
        fields = _description_fields(data)
        where = (
            f"; metadata field {max(fields, key=fields.get)!r} holds {max(fields.values()):.0f}-word texts"
            if fields
            else ""
        )
        return [make("caption.empty", "error" if empty / len(caps) >= 0.5 else "warning", "caption",
                     f"{empty} of {len(caps)} captions are empty before condition dropout{where}: those examples "
                     "train as the unconditional (null) condition", CHECK,
                     hint="check which metadata key the caption is read from (e.g. info.get('caption', '') when the "
                          "sidecar says 'description'); fail loudly on a missing key instead of defaulting to ''",
                     empty=empty, total=len(caps), description_fields=sorted(fields))]
    blank, considered = 0, 0
    for b in data.batches:
        if b.mask is None:
            continue
        for i in _kept_rows(b):
            if b.captions[i].strip() and i < len(b.mask):
                considered += 1
                blank += int(not b.mask[i].any())
    if considered and blank / considered > 0.1:
        return [make("caption.empty", "error" if blank / considered >= 0.5 else "warning", "condition.tokens",
                     f"{blank} of {considered} non-empty captions become condition tokens with no real token "
                     "(an all-False condition mask)", CHECK,
                     hint="run the tokenizer on one caption and print ids and mask; a wrong text field, a lower-"
                          "casing or normalisation step that empties the text, or an inverted mask",
                     blank=blank, considered=considered)]
    return []


def judge_truncated(data: ConditionData) -> list[Finding]:
    """Captions that lose words on the way to the condition tokens: more words than token slots (a
    max length), or far fewer real tokens than words (the text was cut before tokenising). Subword
    tokenizers give at least one token per word, so fewer tokens than words means words were lost."""
    full, short, considered, lengths, tokens, example = 0, 0, 0, [], [], ""
    slots = 0
    for b in data.batches:
        if b.mask is None:
            continue
        L = int(b.max_len or b.mask.shape[1])
        slots = max(slots, L)
        for i in _kept_rows(b):
            n_words, n_tokens = len(words(b.captions[i])), int(b.mask[i].sum()) if i < len(b.mask) else 0
            if n_words == 0 or i >= len(b.mask):
                continue
            considered += 1
            at_limit = n_tokens >= L and n_words > L
            lost = n_tokens < 0.75 * n_words and n_words - n_tokens >= 2
            if at_limit or lost:
                full += at_limit
                short += not at_limit
                lengths.append(n_words)
                tokens.append(n_tokens)
                example = example or f"{n_tokens} tokens for {b.captions[i]!r}"
    cut = full + short
    if not considered or cut / considered < 0.1:
        return []
    why = (f"fill all {slots} condition token slots" if full >= short else
           f"keep only {min(tokens)}-{max(tokens)} real condition tokens")
    return [make("caption.truncated", "error" if cut / considered >= 0.5 else "warning", "condition.tokens",
                 f"{cut} of {considered} captions {why} while having {min(lengths)}-{max(lengths)} words (median "
                 f"{int(np.median(lengths))}): only part of each caption reaches the encoder (e.g. {example})", CHECK,
                 hint=(f"raise the tokenizer's max length above the longest caption (now {slots}); check it is not a "
                       "setting copied from a tag-conditioning config") if full >= short else
                      "the caption is cut before tokenising (a character limit, a split on the first comma, a "
                      "display helper); tokenise the whole caption",
                 truncated=cut, considered=considered, max_len=slots, words_min=min(lengths), words_max=max(lengths))]


def judge_unknown_tokens(data: ConditionData) -> list[Finding]:
    """Many different words that all become one id: the vocabulary lookup fails (every word is <unk>)."""
    ids, vocab = [], set()
    for b in data.batches:
        if b.ids is None:
            continue
        mask = b.mask if b.mask is not None else b.ids != 0
        for i in _kept_rows(b):
            if i < len(b.ids):
                ids += b.ids[i][mask[i]].tolist()
                vocab |= set(words(b.captions[i]))
    if len(ids) < 20 or len(vocab) < 3:
        return []
    top, count = Counter(ids).most_common(1)[0]
    share, distinct = count / len(ids), len(set(ids))
    if share < 0.5 or distinct >= max(2.0, 0.2 * len(vocab)):
        return []
    return [
        make(
            "condition.tokens_unknown",
            "error" if share >= 0.9 else "warning",
            "condition.tokens",
            f"{100 * share:.0f}% of the {len(ids)} real condition tokens are the same id {top}, while the captions "
            f"use {len(vocab)} different words ({distinct} distinct ids in all): the words are not found in the "
            "vocabulary and become the unknown token",
            CHECK,
            hint="check the vocabulary file is the word -> id table (not id -> word), matches this tokenizer, and "
            "that words are normalised (case, punctuation) as when the vocabulary was built",
            top_id=int(top),
            share=share,
            distinct_ids=distinct,
            distinct_words=len(vocab),
        )
    ]


def judge_metadata(data: ConditionData) -> list[Finding]:
    """Captions that carry almost no information (a handful of distinct values for many distinct
    examples), and what the metadata offers instead."""
    rows = [(c, m) for b in data.batches for c, m in zip(b.captions, b.metadata or [{}] * len(b.captions)) if c.strip()]
    records = _records(data)
    # Examples seen more than once (a small set, many batches) repeat their captions rightly: count each once.
    examples = len(records) if records else len(rows)
    if len(rows) < 16 or examples < 16:
        return []
    distinct = len({c for c, _ in rows})
    if distinct > 0.25 * examples:
        return []
    told = f"{len(rows)} captions of {examples} distinct examples take only {distinct} distinct values"
    recordings = count_recordings(rows)
    if recordings is not None and recordings < examples and (recordings < 16 or distinct > 0.25 * recordings):
        # Segments of a file (AudioCraft's MusicInfo + seek_time) or chunks of one take each keep their
        # recording's caption: few captions for many pieces, none missing.
        return [make("condition.metadata_missing", "info", "caption",
                     f"{told}, but the examples are pieces of {recordings} recordings (their records name the same "
                     "source id or file), each piece keeping its recording's caption", CHECK,
                     hint="nothing to change: segments and chunks of one recording share its description",
                     distinct=distinct, examples=examples, rows=len(rows), recordings=recordings)]
    mean_words = float(np.mean([len(words(c)) for c, _ in rows]))
    copies = Counter(k for c, m in rows for k, v in _meta_texts(m).items() if words(v) == words(c))
    source = copies.most_common(1)[0][0] if copies and copies.most_common(1)[0][1] >= 0.8 * len(rows) else None
    fields = _description_fields(data)
    keys = sorted({k for _, m in rows for k in m})
    copied = f", copied from metadata field {source!r}" if source else ""
    ev = {"distinct": distinct, "examples": examples, "rows": len(rows)}
    if fields:
        best = max(fields, key=fields.get)
        return [
            make(
                "condition.metadata_missing",
                "warning",
                "caption",
                f"{told} ({mean_words:.1f} words on average{copied}) although metadata field {best!r} holds "
                f"{fields[best]:.0f}-word descriptions that differ between examples",
                CHECK,
                hint=f"build the caption from {best!r}; the model cannot follow attributes its captions never name",
                source_field=source,
                description_fields=sorted(fields),
                **ev,
            )
        ]
    if not keys:
        return [make("condition.metadata_missing", "warning", "caption",
                     f"{told} ({mean_words:.1f} words on average) and no metadata is tapped to tell where they come "
                     "from", CHECK,
                     hint="tap('metadata', records) beside the captions; a caption this generic cannot carry the "
                          "attributes a prompt asks for", **ev)]
    caps = {c for c, _ in rows}
    held = [_field_summary(records or [m for _, m in rows], k, caps) for k in keys]
    return [make("condition.metadata_missing", "warning", "metadata",
                 f"{told} ({mean_words:.1f} words on average{copied}), and no metadata field holds a text that differs "
                 f"between examples as a description would: {'; '.join(held[:10])}"
                 + (f"; and {len(held) - 10} more fields" if len(held) > 10 else ""), CHECK,
                 hint="the intended condition is not in the metadata: check the sidecar reader keeps every field (an "
                      "old schema, a whitelist of keys) and fills the description from the right source (not from the "
                      "caption, not a default), or regenerate the metadata with descriptions",
                 source_field=source, fields=keys, held=held, **ev)]


def judge_pairing(data: ConditionData) -> list[Finding]:
    """Within a batch each caption should agree with its own example's metadata better than with another's."""
    bad, considered, example = 0, 0, ""
    for b in data.batches:
        if not b.metadata or len(b.metadata) != len(b.captions):
            continue
        meta_words = [set(words(" ".join(_meta_texts(m).values()))) for m in b.metadata]
        for i, caption in enumerate(b.captions):
            w = set(words(caption))
            if not w:
                continue
            score = [len(w & mw) / len(w) for mw in meta_words]
            others = max((s for j, s in enumerate(score) if j != i), default=0.0)
            considered += 1
            if others >= score[i] + 0.2:
                bad += 1
                example = example or (
                    f"{b.source} row {i}: {caption!r} matches row {int(np.argmax(score))}'s metadata "
                    f"({100 * max(score):.0f}% of its words) better than its own ({100 * score[i]:.0f}%)"
                )
    if bad < 2 or bad / max(considered, 1) < 0.2:
        return []
    return [make("caption.mismatch", "error" if bad / considered >= 0.3 else "warning", "caption",
                 f"{bad} of {considered} captions match another example's metadata better than their own: captions "
                 f"and examples are paired wrongly ({example})", CHECK,
                 hint=f"a sort, shuffle or filter applied to the {_examples(data)} and metadata but not to the caption "
                      "list (or the reverse); build captions from each example's own record inside __getitem__",
                 mismatched=bad, considered=considered)]


def _examples(data: ConditionData) -> str:
    """What the captions describe: the audio, or (a symbolic pipeline's batches carry no audio) the pieces."""
    return "audio" if any(getattr(b, "audio_features", None) is not None for b in data.batches) else "pieces"


def judge_dropout(data: ConditionData) -> list[Finding]:
    """The share of conditions dropped over many batches against the configured rate (binomial test)."""
    flags = [b.dropped for b in data.batches if b.dropped is not None]
    rates = [b.rate for b in data.batches if b.rate is not None]
    if not flags:
        return []
    n, k = sum(len(f) for f in flags), int(sum(int(f.sum()) for f in flags))
    if n < 16:
        return []
    if not rates:
        if k / n <= 0.5:
            return []
        return [make("condition.dropout_rate", "warning", "condition.dropped",
                     f"condition dropout removed {k} of {n} captions ({100 * k / n:.0f}%): most examples train "
                     "unconditionally", CHECK, hint="classifier-free guidance usually drops 10-20%; tap "
                     "`condition.dropped` with rate= to have it compared", dropped=k, total=n)]
    rate = float(rates[0])
    if not 0.0 <= rate <= 1.0:  # a percentage, or a keep-count, where a probability belongs
        return [make("condition.dropout_rate", "error", "condition.dropped",
                     f"the configured condition dropout rate is {rate:g}, not a probability in [0, 1]; it removed "
                     f"{k} of {n} captions ({100 * k / n:.0f}%)", CHECK,
                     hint=f"give the rate as a probability ({rate / 100:g} if {rate:g} was meant in percent)",
                     dropped=k, total=n, configured=rate, observed=k / n)]
    pvalue = float(binomtest(k, n, rate).pvalue)
    if pvalue >= 1e-3 or abs(k / n - rate) <= 0.05:
        return []
    more = k / n > rate
    return [
        make(
            "condition.dropout_rate",
            "error" if more else "warning",
            "condition.dropped",
            f"condition dropout removed {k} of {n} captions ({100 * k / n:.0f}%) but is configured at "
            f"{100 * rate:.0f}% (binomial p = {pvalue:.1e})",
            CHECK,
            hint="check the comparison draws `rng.random() < p` (an inverted `>` keeps only p), that the rate "
            "is not applied twice (dataset and model), and that it is the probability of dropping, not of keeping"
            if more
            else "dropout applies less than configured: the unconditional branch guidance needs is "
            "barely trained; check the rate reaches the code that drops",
            dropped=k,
            total=n,
            configured=rate,
            observed=k / n,
            pvalue=pvalue,
        )
    ]


#: Captions observed without one dropped before "never dropped" is read: at the usual 10 % rate, 64
#: captions without a drop happen by chance with probability 0.9**64 ≈ 0.1 %.
NEVER_DROPPED = 64


def judge_guidance_dropout(declared: DeclaredGuidance | None, data: ConditionData | None) -> list[Finding]:
    """Generation guides (cfg_coef > 1, as the pipeline's generate reports it) while training drops no
    condition: the unconditional branch that guidance extrapolates away from is never trained."""
    if declared is None or declared.cfg_coef is None or declared.cfg_coef <= 1.0 or data is None:
        return []
    flags = [b.dropped for b in data.batches if b.dropped is not None]
    rates = [b.rate for b in data.batches if b.rate is not None]
    n, k = sum(len(f) for f in flags), int(sum(int(f.sum()) for f in flags))
    configured = float(rates[0]) if rates else None
    if not flags or k > 0 or (configured is not None and configured > 0):
        return []  # some dropped, or a configured rate the binomial judge compares
    if configured is None and n < NEVER_DROPPED:
        return []  # no rate declared, and too few conditions seen to call it never
    said = f"configured at rate {configured:g} and " if configured is not None else ""
    return [make("generation.guidance_untrained", "warning", "condition.dropped",
                 f"generate applies classifier-free guidance (cfg_coef {declared.cfg_coef:g}) but condition dropout "
                 f"is {said}dropped none of {n} conditions in training: the unconditional prediction guidance "
                 "subtracts is never trained, so the guided logits extrapolate from an untrained branch", CHECK,
                 hint="drop ~10-20 % of the conditions during training (the null/empty caption, AudioCraft's "
                      "`classifier_free_guidance.training_dropout`, a `cond_dropout` that reaches the code that "
                      "drops), or generate with guidance 1", cfg_coef=declared.cfg_coef, dropped=k, total=n,
                 configured=configured)]


def judge_unseen_words(data: ConditionData) -> list[Finding]:
    """Prompt words that never occur in the training captions ask for what was never trained."""
    if len(data.training_captions) < 16 or not data.prompts:
        return []
    seen = {w for c in data.training_captions for w in words(c)}
    prompt_words = [w for c in data.prompts for w in words(c) if not w.isdigit()]  # numbers are values, not words
    unseen = [w for w in prompt_words if w not in seen]
    distinct = sorted(set(unseen))
    if not prompt_words or len(distinct) < 2 or len(unseen) / len(prompt_words) < 0.05:
        return []
    return [
        make(
            "condition.unseen_words",
            "warning",
            "condition.tokens",
            f"{len(unseen)} of {len(prompt_words)} prompt words ({100 * len(unseen) / len(prompt_words):.0f}%) never "
            f"occur in {len(data.training_captions)} training captions (from {data.training_source}): "
            f"{', '.join(repr(w) for w in distinct[:12])}",
            CHECK,
            hint="the model was never trained to represent these attributes; caption the training data with them "
            "(same captioner and vocabulary as the prompts) or drop them from the prompts",
            unseen=distinct,
            unseen_share=len(unseen) / len(prompt_words),
            training_captions=len(data.training_captions),
        )
    ]


CAPTION_CHECKS = (judge_empty, judge_truncated, judge_unknown_tokens, judge_metadata, judge_pairing, judge_dropout,
                  judge_unseen_words)

