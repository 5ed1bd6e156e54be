"""Paper B, Gemma: the part-of-speech data set with every context in its own stretch of its story.

The procedure of the retired ``gemma_pos_data`` experiment (its results archived in
``results/archive``: candidates, agreement filter, labels of the model's word; :mod:`ntkbook.gemma.pos_data`), with one change: the *windows* of the
contexts (the ``context_len`` tokens and the word they predict) never overlap.  Inside a story
the candidates are drawn by :func:`ntkbook.gemma.pos_data.draw_disjoint` (pairwise disjoint
windows, at most ``per_story`` per class, the class still expected to need the most candidates
first: its remaining need over its agreement rate so far), and the walk goes through as many of
the sample's 2,316 stories as it takes.  Every context carries its story, so that an evaluation
can keep each story on one side of a split (:func:`ntkbook.gemma.probe.story_splits`): then no
test context shares a token with a training context.

Each story is one checkpointed point, so an interrupted build resumes; the result holds the
``(N, context_len)`` token ids ordered by class, each context's story and word position, the
labels of the model's word, and per class the candidates tried, the contexts kept and the
stories they come from; ``max_shared_tokens`` (0 by construction) is measured on the result.
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

NAME = "gemma_pos_windows"
VERSION = "1"


@dataclasses.dataclass(frozen=True)
class Config:
    """The part-of-speech data set in disjoint windows: ``n_per_class`` contexts of
    ``context_len`` tokens for each of the eight classes, kept when Gemma's greedy continuation
    agrees with the story's next word, no two windows sharing a token of their story.

    Presets: ``paper()`` 128 contexts per class (N = 1024), one per class and story, so the
    contexts of a class come from 128 different stories; ``smoke()`` 4 per class.  Simulated from
    the candidates of every story and the agreement rates of the first data set: about 1,450 of the
    2,316 stories and 3,200 candidates through the agreement filter (PROPN, ADV and CCONJ need
    600-800 each), so 30-70 minutes on 2 CPU cores.
    """

    n_per_class: int = 128   # contexts kept per part of speech
    context_len: int = 64    # tokens per context (the last one precedes the word to predict)
    per_story: int = 1       # candidates drawn per class from one story (while the class needs more)
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
    """About 3.1 candidates tried per kept context (simulated, see :class:`Config`) at ~0.4 s each
    on 2 lightly loaded CPU cores (several times that on busy ones), spaCy and the tokenizer
    ~0.08 s per story read (~1.4 stories per kept context of a class), plus ~30 s for loading."""
    return 30.0 + config.n_per_class * (len(CLASSES) * 3.1 * 0.4 + 11.4 * 0.08)


def run(config: Config, points: PointStore | None = None) -> Result:
    """Build the data set: walk the shuffled stories, draw candidates in disjoint windows, keep
    those whose word Gemma predicts, until every class has ``n_per_class``; one checkpointed point
    per story."""
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
    misaligned = words_seen = n_stories = drawn_total = 0
    target = config.n_per_class
    bar = Progress(len(CLASSES) * target, desc=f"{NAME} N={len(CLASSES) * target}")

    def need():
        return {c: target - len(kept[c]) for c in CLASSES}

    def expected_candidates():
        # the candidates a class is still expected to need: its need over its agreement so far
        # (smoothed, so that a class not tried yet counts as agreeing half the time)
        return {c: need()[c] * (tried[c] + 2) / (len(kept[c]) + 1) for c in CLASSES}

    for s in order:
        if all(n <= 0 for n in need().values()):
            break
        n_stories += 1

        def compute(s=s):
            return pos_data.label_story(
                stories[s], s, tok=tok, nlp=nlp, context_len=config.context_len, batch=config.batch,
                draw_fn=lambda cands: pos_data.draw_disjoint(cands, need(), config.per_story, config.context_len,
                                                             config.seed, priority=expected_candidates()),
                generate=lambda blk: gemma_model.greedy_generate(params, cfg, blk, config.gen_tokens))

        arrays, sc = points.cached(f"story={s}", compute)
        misaligned += sc["misaligned"]
        words_seen += sc["words"]
        drawn_total += len(sc["rows"])
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
        raise ConfigError(f"the TinyStories sample ({len(stories)} stories) ran out of candidates in disjoint "
                          f"windows: missing {short} contexts; raise per_story or lower n_per_class")
    rows = [r for c in CLASSES for r in kept[c]]
    story = np.array([r["story"] for r in rows])
    token = np.array([r["token"] for r in rows])
    stats = [{"class": c, "tried": tried[c], "kept": len(kept[c]), "agreement": len(kept[c]) / max(tried[c], 1),
              "stories": len(stories_used[c])} for c in CLASSES]
    return Result(
        name=NAME,
        config=dataclasses.asdict(config),
        arrays={"contexts": np.stack([r["ids"] for r in rows]),
                "label": np.array([CLASSES.index(r["model_pos"]) for r in rows]),
                "story": story, "token": token},
        scalars={"classes": list(CLASSES),
                 "morph": [r["model_morph"] for r in rows],
                 "model_word": [r["model_word"] for r in rows],
                 "true_word": [r["word"] for r in rows],
                 "true_morph": [r["morph"] for r in rows],
                 "continuation": [r["continuation"] for r in rows],
                 "context_text": [r["context_text"] for r in rows],
                 "stats": stats, "stories_read": n_stories, "stories_total": len(stories),
                 "stories_used": len(set(story.tolist())), "candidates_drawn": drawn_total,
                 "max_shared_tokens": pos_data.max_shared_tokens(story, token, config.context_len,
                                                                 np.arange(len(rows))),
                 "misaligned": misaligned, "words_seen": words_seen,
                 "weights_load_s": t_load, "model_config": dataclasses.asdict(cfg)},
    )
