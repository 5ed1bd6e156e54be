"""Paper B, Gemma: the TinyStories part-of-speech data set (contexts kept by the agreement filter).

Builds the data set of :mod:`ntkbook.gemma.pos_data` with Gemma-3-270M (:mod:`ntkbook.gemma.weights`)
and spaCy.  Each story is one checkpointed point (its drawn candidates and which passed the
filter), so an interrupted build resumes; the story order and the draw inside a story are seeded
(per story and class, so a resumed build draws the same candidates, and a smaller data set is a
prefix of a larger one).  The result holds the
``(N, context_len)`` token ids ordered by class, the labels of the model's word, the true words,
the decoded contexts, and per-class statistics (candidates tried, kept, stories used).
"""

from __future__ import annotations

import dataclasses
import random
import time

import numpy as np

from ntkbook.errors import ConfigError
from ntkbook.gemma.pos_data import CLASSES
from ntkbook import validate as v
from ntkbook.progress import Progress
from ntkbook.store import PointStore, Result

NAME = "gemma_pos_data"
VERSION = "2"


@dataclasses.dataclass(frozen=True)
class Config:
    """The part-of-speech data set: ``n_per_class`` contexts of ``context_len`` tokens for each of
    the eight classes, kept when Gemma's greedy continuation agrees with the story's next word.

    Presets: ``paper()`` 128 contexts per class (N = 1024; most of an hour on 2 CPU cores);
    ``smoke()`` 4 per class.
    """

    n_per_class: int = 128   # contexts kept per part of speech
    context_len: int = 64    # tokens per context (the last one precedes the word to predict)
    per_story: int = 3       # candidates drawn per class from one story (while the class needs more)
    gen_tokens: int = 3      # greedy tokens generated for the agreement filter
    batch: int = 8           # contexts per generation call
    seed: int = 0            # seed of the story order and of the draws inside a story

    @classmethod
    def smoke(cls) -> "Config":
        return cls(n_per_class=4)

    @classmethod
    def paper(cls) -> "Config":
        return cls()

    def __post_init__(self):
        for field in ("n_per_class", "context_len", "per_story", "gen_tokens", "batch"):
            v.positive_int(NAME, field, getattr(self, field))
        v.int_at_least(NAME, "seed", self.seed, 0, "a seed of Python's random")


def estimate_seconds(config: Config) -> float:
    """Measured at N = 32: about 3 candidates tried per kept context (the agreement rate is 17 % for
    PROPN, 80 % for NOUN), ~0.4 s per candidate (64-token forward + 2 cached decoding steps) on 2
    lightly loaded CPU cores (several times that on busy ones), plus ~30 s for loading."""
    return 30.0 + len(CLASSES) * config.n_per_class * 3 * 0.4


def run(config: Config, points: PointStore | None = None) -> Result:
    """Build the data set: walk the shuffled stories, draw candidates per class, keep those whose
    word Gemma predicts (its greedy continuation starts with the story's word, tagged by spaCy),
    until every class has ``n_per_class``; one checkpointed point per story."""
    from ntkbook.gemma import weights as gemma_weights  # noqa: PLC0415
    from ntkbook.gemma import pos_data  # noqa: PLC0415
    from ntkbook.gemma import model as gemma_model  # noqa: PLC0415

    points = points or PointStore(None)
    t0 = time.perf_counter()
    cfg, params, tok = gemma_weights.load()
    t_load = time.perf_counter() - t0
    nlp = pos_data.load_tagger()
    stories = pos_data.load_stories()
    order = list(range(len(stories)))
    random.Random(config.seed).shuffle(order)

    kept: dict[str, list[dict]] = {c: [] for c in CLASSES}
    tried = {c: 0 for c in CLASSES}
    stories_used: dict[str, set] = {c: set() for c in CLASSES}
    misaligned = 0
    words_seen = 0
    n_stories = 0
    target = config.n_per_class
    bar = Progress(len(CLASSES) * target, desc=f"{NAME} N={len(CLASSES) * target}")

    def need():
        return {c: target - len(kept[c]) for c in CLASSES}

    for s in order:
        if all(v <= 0 for v in need().values()):
            break
        n_stories += 1
        text = stories[s]

        def compute(s=s, text=text):
            return pos_data.label_story(
                text, s, tok=tok, nlp=nlp, context_len=config.context_len, batch=config.batch,
                draw_fn=lambda cands: pos_data.draw(cands, need(), config.per_story, config.seed),
                generate=lambda blk: gemma_model.greedy_generate(params, cfg, blk, config.gen_tokens))

        arrays, sc = points.cached(f"story={s}", compute)
        misaligned += sc["misaligned"]
        words_seen += sc["words"]
        for row, ctx in zip(sc["rows"], arrays["contexts"]):
            c = row["pos"]
            if len(kept[c]) >= target:
                continue
            tried[c] += 1
            if row["model_pos"] == c:
                kept[c].append({**row, "ids": np.asarray(ctx, np.int32)})
                stories_used[c].add(row["story"])
                bar.update(1)
        bar.set_postfix(stories=n_stories)
    bar.close()
    short = {c: target - len(kept[c]) for c in CLASSES if len(kept[c]) < target}
    if short:
        raise ConfigError(f"the TinyStories sample ran out of candidates: missing {short} contexts; "
                           f"raise per_story or lower n_per_class")
    rows = [r for c in CLASSES for r in kept[c]]
    stats = [{"class": c, "tried": tried[c], "kept": len(kept[c]), "agreement": len(kept[c]) / max(tried[c], 1),
              "stories": len(stories_used[c])} for c in CLASSES]
    return Result(
        name=NAME,
        config=dataclasses.asdict(config),
        arrays={"contexts": np.stack([r["ids"] for r in rows]),
                "label": np.array([CLASSES.index(r["model_pos"]) for r in rows]),
                "story": np.array([r["story"] for r in rows]),
                "token": np.array([r["token"] for r in rows])},
        scalars={"classes": list(CLASSES),
                 "morph": [r["model_morph"] for r in rows],
                 "model_word": [r["model_word"] for r in rows],
                 "true_word": [r["word"] for r in rows],
                 "true_morph": [r["morph"] for r in rows],
                 "continuation": [r["continuation"] for r in rows],
                 "context_text": [r["context_text"] for r in rows],
                 "stats": stats, "stories_read": n_stories, "stories_total": len(stories),
                 "misaligned": misaligned, "words_seen": words_seen,
                 "weights_load_s": t_load, "model_config": dataclasses.asdict(cfg)},
    )
