"""The reproduction scorecard: every claim of both papers, the paper's number, ours, a verdict.

:data:`CATALOGUE` lists each claim once (its id, the paper, the claim, the number the paper
reports, the chapter that measures it and the label of the section that does). Measured rows come
from the verdict rules of :mod:`ntkbook.claims`, computed from the **stored paper-scale results**
(``results/``; nothing is computed here): a module there that defines ``EXPERIMENTS`` (the
experiments it reads), optionally ``FALLBACKS`` (name -> reduced configs to read while the paper
preset is not stored), and

    def scorecard(results: Mapping[str, Result]) -> list[dict]:
        # results: name -> stored result, the ones stored; one dict per claim measured:
        # {"claim": "<claim id>", "ours": "<formatted number(s)>",
        #  "verdict": "reproduces" | "partly" | "does not", "note": "<one short sentence>"}

contributes rows: verdict rules there can change without touching an experiment's code hash. (An
experiment module that still carries an older ``scorecard(result)`` of its own, with optional
``SCORECARD_FALLBACKS``, contributes its rows too, unless a claims module names it in
``SUPERSEDES``.) A row may also say
:data:`NOT_TESTED` ("not tested": the model the claim is about did not train), which is not a
verdict on the claim. :func:`collect` calls every such function, checks its rows, and returns one :class:`Row` per
catalogued claim; a claim no stored result measures says "not yet measured". :func:`markdown`
renders the rows as the tables of the book's scorecard page, linking each claim to its section
only when that label exists in a chapter of ``_toc.yml`` (a broken reference would fail the build).

The section measuring claim ``X.y.z`` carries the label ``sec-x-y-z`` (:func:`section_label`:
lower case, dots and underscores become hyphens), e.g. ``(sec-b-mlp-grokking)=``; a catalogue
entry may also name the chapter's own label of the section (``Claim.label``), used when the
``sec-x-y-z`` label does not exist.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ntkbook.claims import NOT_TESTED, ROW_VERDICTS

__all__ = ["Claim", "Row", "CATALOGUE", "NOT_MEASURED", "NOT_TESTED", "section_label", "collect",
           "claim_modules",
           "rows_from", "chapter_rows", "book_labels", "markdown", "verdict_counts",
           "headline", "verdict_line", "chapter_verdicts", "verdict_text", "claim_line", "card_label"]

NOT_MEASURED = "not yet measured"


@dataclass(frozen=True)
class Claim:
    """One claim of a paper, as catalogued (nothing measured)."""

    id: str
    paper: str  # "A", "B", or "background" (a result both papers build on)
    claim: str  # Markdown, one or two sentences
    reported: str  # the paper's number or statement, as reported
    chapter: str  # book/<chapter>.md measures it
    label: str = ""  # the chapter's own section label, where it is not section_label(id)

    @property
    def section(self) -> str:
        return section_label(self.id)

    def link_target(self, labels: set[str]) -> str | None:
        """The label to link to: ``sec-<id>`` if the book has it, else the catalogued section
        label if the book has that, else None (no link)."""
        for cand in (self.section, self.label):
            if cand and cand in labels:
                return cand
        return None


def section_label(claim_id: str) -> str:
    """The label of the section that measures ``claim_id``: ``B.mlp.first_cliff`` ->
    ``sec-b-mlp-first-cliff``."""
    return "sec-" + re.sub(r"[._]+", "-", claim_id.lower())


_C = Claim
#: Every claim of Paper A (Miñoza et al., arXiv 2603.13085) and Paper B (Lin, arXiv 2510.00468),
#: from the project's notes on the papers, plus the background results the book checks first.
CATALOGUE: tuple[Claim, ...] = (
    # ------------------------------------------------------------------ background
    _C("F.entk_convergence", "background",
       "The empirical NTK of a width-$m$ network approaches the analytic (infinite-width) NTK, "
       "with fluctuations that shrink like $m^{-1/2}$.",
       "error $\\propto m^{-1/2}$ (log-log slope $-1/2$)", "entk_lanczos"),
    # ------------------------------------------------------------------ Paper A
    _C("A.gram_cube", "A",
       "The Gram matrix of the linear-attention output $XX^\\top X$ is the cube of the input Gram "
       "matrix $G = XX^\\top$, so its condition number is $\\kappa(G)^3$.",
       "exact identity", "attention_width"),
    _C("A.kappa", "A", "For natural images the condition number of the Gram matrix is about $10^3$.",
       "$\\kappa(G) \\approx 10^3$", "attention_width"),
    _C("A.width_bound", "A",
       "MLP-Attn needs width $m = \\Omega(\\kappa(G)^6)$ to stay near its NTK, about $10^{18}$ for "
       "natural images (v2: $\\Omega(\\kappa_d(G)^6\\, n \\log n)$).",
       "$m \\approx 10^{18}$", "attention_width"),
    _C("A.width_threshold", "A", "v2: MLP-Attn needs width $m = \\Omega(\\kappa_d(G)^6\\, n \\log n)$, "
       "with $\\kappa_d$ the effective condition number of the rank-$\\min(n,d)$ truncation of the "
       "input Gram matrix: $m \\gg 10^{24}$ for MNIST and $10^{29}$ for CIFAR-10.",
       "$10^{24}$ (MNIST), $10^{29}$ (CIFAR-10)", "attention_width", "sec-a-width-bound"),
    _C("A.distance.relu", "A", "The NTK distance $\\lVert f_m - f_{\\mathrm{NTK}} \\rVert$ of the "
       "two-layer ReLU network decreases with width.",
       "MNIST 45.1 → 39.2; CIFAR-10 246.2 / 101.7 / 56.9 ($m$ = 16, 1024, 4096)", "attention_width"),
    _C("A.distance.attn", "A", "The NTK distance of MLP-Attn increases or oscillates with width.",
       "MNIST 10.3 → 43.4; CIFAR-10 3.7 / 10.4 / 12.6 ($m$ = 16, 1024, 4096)", "attention_width"),
    _C("A.flip.mnist10", "A", "Adversarial perturbation of the training data flips the sign of many "
       "more of MLP-Attn's top-10% influence scores than of 2L-ReLU's on MNIST (10 classes).",
       "at ε = 0.3, PGD 28.9% vs 2L-ReLU 3.3% (8.8×); FGSM 34.6 / 4.1%, MIM 21.9 / 3.4% (secondary notes of the paper)",
       "influence", "sec-influence-map"),
    _C("A.flip.cifar10", "A", "The same on CIFAR-10 (10 classes).",
       "at ε = 0.3, PGD 19.1% vs 3.1% (6.2×); FGSM 26.4 / 3.3%, MIM 20.5 / 3.2% (secondary notes)", "influence",
       "sec-influence-map"),
    _C("A.flip.mnist38", "A", "The same on the binary task MNIST 3 vs 8.",
       "at ε = 0.3, PGD 41.0% vs 8.4% (4.9×); FGSM 25.9 / 8.4%, MIM 40.5 / 8.6% (secondary notes)", "influence",
       "sec-influence-map"),
    _C("A.flip.cifar_auto_air", "A", "On the binary task CIFAR-10 automobile vs airplane the paper's "
       "own table shows no gap: both models are about equally malleable.",
       "at ε = 0.3, PGD 14.0% vs 15.5% (0.9×); FGSM 14.3 / 15.2%, MIM 14.8 / 15.3% (secondary notes)", "influence",
       "sec-influence-map"),
    _C("A.flip.ratio", "A", "Across data sets, attention's influence scores are several times more "
       "malleable (flip rate) than the ReLU network's, the gap depending on the data set's condition "
       "number and the task.", "v1: 6–9×; v2: 2–9×", "influence", "sec-influence-map"),
    _C("A.advtrain", "A", "Adversarial training makes the ReLU network malleable too: its PGD flip "
       "rate approaches attention's.", "3.3% → 43.4%", "influence", "sec-influence-advtrain"),
    _C("A.landscape", "A", "MLP-Attn finds wider, flatter minima than the two-layer ReLU network "
       "(loss slices, top Hessian eigenvalue).", "flatter (qualitative)", "influence",
       "sec-influence-landscape"),
    # ------------------------------------------------------------------ Paper B
    _C("B.lanczos", "B", "Lanczos with full reorthogonalisation finds the top-$k$ eigenvectors of the "
       "eNTK matrix-free from about $2k$ products, as a dense eigensolver would.",
       "top-$k$ from about $2k$ products", "entk_lanczos"),
    _C("B.mlp.grokking", "B", "The one-hidden-layer $x^2$ MLP on addition modulo 29 groks: its test "
       "accuracy rises from about 10% to about 95% late in training.", "around epochs 75–100",
       "modular_mlp"),
    _C("B.mlp.first_cliff", "B", "The class-mean eNTK spectrum has a first cliff of "
       "$4\\lfloor p/2 \\rfloor$ eigenvalues that spans the Fourier features of $a$ and $b$.",
       "56 eigenvectors ($p$ = 29), spanning the $a$, $b$ features", "modular_mlp"),
    _C("B.mlp.second_cliff_sum", "B", "The second cliff (eigenvectors 57–112) aligns with the Fourier "
       "features of $a + b$.", "26.5/28", "modular_mlp"),
    _C("B.mlp.second_cliff_diff", "B", "The second cliff aligns with the Fourier features of $a - b$.",
       "25.2/28", "modular_mlp"),
    _C("B.mlp.dynamics", "B", "The second cliff's overlap with the sum features is low at "
       "initialisation and grows smoothly; its derivative peaks near the onset of grokking.",
       "peak near grokking onset (qualitative)", "modular_mlp"),
    _C("B.tf.grokking", "B", "The one-layer transformer on addition modulo 29 groks.",
       "between about epochs 150 and 1900", "modular_transformer"),
    _C("B.tf.key_freqs", "B", "Unlike the MLP, the transformer uses a sparse, seed-dependent set of "
       "key frequencies $\\omega_k$.", "a few key frequencies (seed-dependent)", "modular_transformer"),
    _C("B.tf.attn_axis_sum", "B", "Layer-wise eNTK eigenvectors of the attention block and the MLP "
       "input align with $\\cos(\\omega_k a) + \\cos(\\omega_k b)$ (axis sum) at the key frequencies.",
       "aligned (qualitative)", "modular_transformer"),
    _C("B.tf.out_sum", "B", "Those of the MLP output and the unembedding align with "
       "$\\cos(\\omega_k (a + b))$ (sum features).", "aligned (qualitative)", "modular_transformer"),
    _C("B.tf.replay", "B", "Replaying the author's notebook: the unembedding's eigenvectors 0–4 overlap "
       "with the sum features, and its eigenvectors 5–8 with the axis-sum features.",
       "3.9647/4 and 3.9399/4", "modular_transformer"),
    _C("B.tf.dynamics", "B", "The alignment with the sum features rises during training, fastest near "
       "grokking.", "fastest near grokking (qualitative)", "modular_transformer"),
    _C("B.gemma.spectrum_identity", "B", "For Gemma-3-270M the reduced operator "
       "$S^{1/2} K_r S^{1/2}$ in $d_{\\mathrm{model}}$ space has the same nonzero eigenvalues as the "
       "full output eNTK.", "exact identity", "gemma", "sec-gemma-identity"),
    _C("B.gemma.pos_vs_pca", "B", "eNTK eigenvectors (top 25, best layer) beat PCA of the activations "
       "at predicting the next word's part of speech.", "better on 8 of 8 parts of speech", "gemma",
       "sec-gemma-pos"),
    _C("B.gemma.morph_vs_pca", "B", "They also beat PCA on morphological features.",
       "better on all but one", "gemma", "sec-gemma-morph"),
    _C("B.gemma.top_contexts", "B", "The top-activating contexts of single eigenvectors read as "
       "coherent grammatical features (e.g. infinitive, past tense).", "coherent (qualitative)",
       "gemma", "sec-gemma-contexts"),
)

_BY_ID = {c.id: c for c in CATALOGUE}
assert len(_BY_ID) == len(CATALOGUE), "duplicate claim id in the catalogue"


@dataclass
class Row:
    """A claim with what we measured (or ``NOT_MEASURED``)."""

    claim: Claim
    verdict: str = NOT_MEASURED
    ours: str = ""
    note: str = ""
    source: str = ""  # "paper scale, NVIDIA H200, 2026-11-30"
    experiments: list[str] = field(default_factory=list)


def _source(result) -> str:
    from ntkbook.book.report import device_label, preset_of
    from ntkbook.freshness import freshness

    prov = result.provenance or {}
    scale, changed = preset_of(result)
    what = f"{scale} scale" + (" (changed: " + ", ".join(changed) + ")" if changed else "")
    return (f"`{result.name}`, {what}, {device_label(prov)}, {str(prov.get('date') or '')[:10]}, "
            f"{freshness(result).short()}")


def _check(rows: Any, module: str) -> list[dict]:
    """Validate what a ``scorecard`` function returned; a clear error names the module."""
    if not isinstance(rows, list):
        raise TypeError(f"{module}.scorecard must return a list of dicts, got {type(rows).__name__}")
    for r in rows:
        if not isinstance(r, Mapping) or not {"claim", "ours", "verdict"} <= set(r):
            raise ValueError(f"{module}.scorecard: each row needs 'claim', 'ours', 'verdict'; got {r!r}")
        if r["claim"] not in _BY_ID:
            raise ValueError(f"{module}.scorecard: unknown claim id {r['claim']!r}; catalogued ids: "
                             f"{', '.join(_BY_ID)}")
        if r["verdict"] not in ROW_VERDICTS:
            raise ValueError(f"{module}.scorecard: verdict of {r['claim']} must be one of {ROW_VERDICTS}, "
                             f"got {r['verdict']!r}")
    return list(rows)


def _join(parts: Iterable[str], sep: str = "; ") -> str:
    """Join sentences of several rows without stray punctuation: a part's closing full stop is
    dropped before the separator (not "decreasing.; network ...")."""
    kept = [str(p).strip() for p in parts if str(p).strip()]
    return sep.join([p[:-1] if p.endswith(".") and not p.endswith("...") else p for p in kept[:-1]]
                    + kept[-1:])


def _join_new(note: str, more: str) -> str:
    """``note`` with the parts of ``more`` (split at top-level semicolons) that it does not hold
    yet: two rows judged by one rule state it once."""
    have = {p.strip().rstrip(".") for p in split_top_level(note)}
    fresh = [p for p in split_top_level(more) if p.strip().rstrip(".") not in have]
    return _join([note, "; ".join(p.strip() for p in fresh)])


def _credited(results: list, named) -> list:
    """The results a row's source line credits: every result given when the row has no ``"from"``;
    else those of the experiments it names, and any result object it lists itself (an entry the
    claims module loaded in place of the one given, e.g. a run with more seeds)."""
    if named is None:
        return list(results)
    names = {n for n in named if isinstance(n, str)}
    return [x for x in named if not isinstance(x, str)] + [res for res in results if res.name in names]


def rows_from(measured: Iterable[tuple[Any, list[dict]]]) -> list[Row]:
    """One :class:`Row` per catalogued claim from ``(result or results, scorecard rows)`` pairs (a
    row's optional ``"from"`` names the results its source line credits: :func:`_credited`).
    Several rows for one claim (e.g. from several experiments) are joined; their verdict is the
    common one, or "partly" when they differ (a row that tested nothing, :data:`NOT_TESTED`, gives
    way to one that did)."""
    table = {c.id: Row(c) for c in CATALOGUE}
    for results, rows in measured:
        results = list(results) if isinstance(results, (list, tuple)) else [results]
        for r in rows:
            row = table[r["claim"]]
            first = row.verdict == NOT_MEASURED
            if first or row.verdict == NOT_TESTED:
                row.verdict = r["verdict"]
            elif r["verdict"] != NOT_TESTED and row.verdict != r["verdict"]:
                row.verdict = "partly"
            row.ours = r["ours"] if first else _join([row.ours, r["ours"]])
            note = str(r.get("note", "")).strip()
            row.note = note if first else _join_new(row.note, note)
            for result in _credited(results, r.get("from")):
                src = _source(result)
                if src not in row.source:
                    row.source = src if not row.source else f"{row.source}; {src}"
                if result.name not in row.experiments:
                    row.experiments.append(result.name)
    return list(table.values())


def superseded() -> set[str]:
    """Experiments whose own ``scorecard(result)`` a claims module replaces (its ``SUPERSEDES``):
    the experiment module still carries an older verdict rule, which is no longer called."""
    return {name for module in claim_modules() for name in getattr(module, "SUPERSEDES", ())}


def claim_modules() -> list[Any]:
    """The modules of :mod:`ntkbook.claims` that judge claims: each defines ``EXPERIMENTS`` (the
    experiments whose stored results it reads) and ``scorecard(results)``, and may name in
    ``SUPERSEDES`` experiments whose own ``scorecard`` it replaces."""
    import pkgutil

    import ntkbook.claims

    found = []
    for info in sorted(pkgutil.iter_modules(ntkbook.claims.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"ntkbook.claims.{info.name}")
        if hasattr(module, "scorecard"):
            if not getattr(module, "EXPERIMENTS", None):
                raise ValueError(f"{module.__name__} defines scorecard() but no EXPERIMENTS (the "
                                 "experiments whose stored results it reads): add them")
            found.append(module)
    return found


def _claim_rows(module: Any, results: Mapping[str, Any]) -> tuple[list[Any], list[dict]] | None:
    """The rows of a claims module over the ``results`` it reads (None when it reads none)."""
    used = {n: results[n] for n in module.EXPERIMENTS if n in results}
    if not used:
        return None
    return list(used.values()), _check(module.scorecard(used), module.__name__)


def collect(experiments: Iterable[str] | None = None) -> list[Row]:
    """Rows for every catalogued claim, measured ones from the **stored** paper-scale results read
    by each claims module's ``scorecard(results)`` (and by an experiment's own, not superseded
    ``scorecard(result)``, where one is left); nothing is computed, and a missing result leaves
    its claims "not yet measured". Where the paper preset is not stored, a claims module's
    ``FALLBACKS`` (an experiment's ``SCORECARD_FALLBACKS``: config overrides, e.g. a smaller N the
    CPU could afford) are tried in order; the row then names the changed fields."""
    from ntkbook.experiments import EXPERIMENTS, make_config
    from ntkbook.paths import results_dir
    from ntkbook.store import Store

    store = Store(results_dir())
    measured = []
    replaced = superseded()
    for name in sorted(experiments if experiments is not None else EXPERIMENTS):
        module = importlib.import_module(EXPERIMENTS[name])
        fn = getattr(module, "scorecard", None)
        if fn is None or name in replaced:
            continue
        # the paper preset, else the reduced configs the module names as stand-ins (their
        # changed fields are shown in the row's source, so a reduced scale is never hidden)
        for overrides in ({}, *getattr(module, "SCORECARD_FALLBACKS", ())):
            config = make_config(name, "paper", **overrides)
            if store.has(name, module.VERSION, config):
                break
        else:
            continue
        result = store.load(name, module.VERSION, config)
        measured.append((result, _check(fn(result), module.__name__)))
    for module in claim_modules():
        stored = {}
        for name in module.EXPERIMENTS:
            if experiments is not None and name not in experiments:
                continue
            exp = importlib.import_module(EXPERIMENTS[name])
            # the paper preset, else the reduced configs the claims module names (FALLBACKS); a
            # reduced config shows in the row's source
            for overrides in ({}, *getattr(module, "FALLBACKS", {}).get(name, ())):
                config = make_config(name, "paper", **overrides)
                if store.has(name, exp.VERSION, config):
                    stored[name] = store.load(name, exp.VERSION, config)
                    break
        got = _claim_rows(module, stored)
        if got is not None:
            measured.append(got)
    return rows_from(measured)


_LABEL = re.compile(r"^\(([^()\s]+)\)=\s*$", re.M)


def book_labels(repo: Path | None = None) -> set[str]:
    """Labels ``(name)=`` defined in the chapters of ``_toc.yml`` (the ones the build will know)."""
    from ntkbook.book.build import REPO, toc_chapters

    repo = repo or REPO
    labels: set[str] = set()
    for chapter in toc_chapters(repo):
        path = repo / chapter
        if path.exists():
            labels.update(m.lower() for m in _LABEL.findall(path.read_text(encoding="utf-8")))
    return labels


def verdict_counts(rows: Iterable[Row]) -> dict[str, int]:
    counts = {v: 0 for v in (*ROW_VERDICTS, NOT_MEASURED)}
    for r in rows:
        counts[r.verdict] += 1
    return counts


def headline(rows: Iterable[Row]) -> str:
    """The scorecard's counts in one sentence (Markdown), e.g. "29 claims: 13 reproduce, 9
    partly, 7 do not"; claims no stored result measures are counted when there are any."""
    rows = list(rows)
    c = verdict_counts(rows)
    parts = [f"{c['reproduces']} reproduce", f"{c['partly']} partly", f"{c['does not']} do not"]
    if c[NOT_TESTED]:
        parts.append(f"{c[NOT_TESTED]} not tested")
    if c[NOT_MEASURED]:
        parts.append(f"{c[NOT_MEASURED]} not yet measured")
    return f"{len(rows)} claims: " + ", ".join(parts)


def chapter_rows(chapter: str, results: Iterable[Any]) -> list[Row]:
    """The measured rows of the claims ``book/<chapter>.md`` measures, from the ``scorecard``
    functions of :mod:`ntkbook.claims` over ``results`` (the results the chapter loaded, at the
    page's scale; joined as on the scorecard page)."""
    from ntkbook.experiments import EXPERIMENTS

    results = list(results)
    measured = []
    replaced = superseded()
    for result in results:
        fn = getattr(importlib.import_module(EXPERIMENTS[result.name]), "scorecard", None)
        if fn is not None and result.name not in replaced:
            measured.append((result, _check(fn(result), EXPERIMENTS[result.name])))
    by_name = {r.name: r for r in results}
    for module in claim_modules():
        got = _claim_rows(module, by_name)
        if got is not None:
            measured.append(got)
    return [r for r in rows_from(measured) if r.claim.chapter == chapter and r.verdict != NOT_MEASURED]


def verdict_line(rows: Iterable[Row], labels: set[str] | None = None) -> str:
    """A chapter's verdicts in one line (Markdown) for its "In this chapter" box, grouped by
    verdict, each claim linked to the section that measures it: "3 reproduce (B.mlp.grokking,
    ...); 1 partly (...)". Generated from the rows, never typed."""
    labels = book_labels() if labels is None else labels
    rows = list(rows)
    if not rows:
        return "none: this chapter measures no claim of the papers."
    words = {"reproduces": ("reproduces", "reproduce"), "partly": ("partly", "partly"),
             "does not": ("does not", "do not"), NOT_TESTED: ("not tested", "not tested")}
    parts = []
    for verdict, (one, many) in words.items():
        sel = [r for r in rows if r.verdict == verdict]
        if sel:
            ids = ", ".join(_claim_ref(r.claim, labels) for r in sel)
            parts.append(f"**{len(sel)} {one if len(sel) == 1 else many}** ({ids})")
    return "; ".join(parts) + "."


def chapter_verdicts(chapter: str, results: Iterable[Any]):
    """The verdict line of a chapter's "In this chapter" box (Markdown): its claims' verdicts from
    the results it loaded (:func:`chapter_rows`, :func:`verdict_line`), saying so when they are
    not the paper-scale results (a smoke build's verdicts are the smoke runs')."""
    from ntkbook.book.report import MarkdownText, preset_of

    results = list(results)
    line = verdict_line(chapter_rows(chapter, results))
    if not results:
        return MarkdownText(f"**Verdicts:** {line}")
    scales = {preset_of(r)[0] for r in results}
    where = ("computed from this page's paper-scale results" if scales == {"paper"}
             else "computed from this page's **" + "/".join(sorted(scales)) + "-scale** results, "
             "not the paper-scale ones")
    return MarkdownText(f"**Verdicts** ({where}; details in {{doc}}`scorecard`): {line}")


def _claim_ref(c: Claim, labels: set[str]) -> str:
    target = c.link_target(labels)
    return f"{{ref}}`{c.id} <{target}>`" if target else c.id


_PAPERS = {"background": "Background both papers build on",
           "A": "Paper A: influence malleability in linearised attention",
           "B": "Paper B: feature identification via the empirical NTK"}
_MARK = {"reproduces": "**reproduces**", "partly": "**partly**", "does not": "**does not**",
         NOT_TESTED: "not tested here", NOT_MEASURED: "not yet measured"}
#: short names of the chapters, for the scorecard's "where" column (narrow on a phone)
_CHAPTER_SHORT = {"entk_lanczos": "eNTK and Lanczos", "attention_width": "Attention width",
                  "influence": "Influence", "modular_mlp": "Modular MLP",
                  "modular_transformer": "Transformer", "gemma": "Gemma"}


def card_label(claim_id: str) -> str:
    """The label of a claim's details on the scorecard page: ``A.kappa`` -> ``sc-a-kappa``."""
    return "sc-" + section_label(claim_id).removeprefix("sec-")


def _cell(text: str) -> str:
    from ntkbook.book.report import _table_cell

    return _table_cell(text)


def split_top_level(text: str, sep: str = ";") -> list[str]:
    """``text`` split at ``sep`` outside parentheses and brackets, parts stripped: the parts of an
    "ours" joined from several measurements, each shown on its own line."""
    parts, depth, cur = [], 0, []
    for ch in str(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == sep and depth <= 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_RULE = re.compile(r"^(?:verdict:\s*|reproduces(?::\s*|\s+(?=when\b|if\b)))", re.I)


def rule_and_notes(note: str) -> tuple[list[str], list[str]]:
    """A scorecard note split into the verdict's rules ("reproduces when the slope is within 0.05
    of −1/2" -> "the slope is within 0.05 of −1/2" is the condition for "reproduces"; "verdict:
    ratio and levels within 2×") and the other remarks, each :func:`typeset`."""
    from ntkbook.book.report import typeset

    rules, notes = [], []
    for part in split_top_level(note):
        part = typeset(part.rstrip("."))
        m = _RULE.match(part)
        if m:
            rules.append(part[m.end():].removeprefix("when ").removeprefix("if ").strip())
        else:
            notes.append(part)
    return rules, notes


def verdict_text(verdict: str, note: str) -> str:
    """"**Verdict: partly** (threshold to reproduce: ...). Notes: ..." from a verdict and its
    scorecard note: the rule stated once, not "reproduces (reproduces when ...)"."""
    rules, notes = rule_and_notes(note)
    text = f"**Verdict: {verdict}**"
    if rules:
        which = "threshold" if verdict == "reproduces" else "threshold to reproduce"
        text += f" ({which}: {'; '.join(rules)})"
    text += "."
    if notes:
        text += " Notes: " + "; ".join(notes) + "."
    return text


def markdown(rows: list[Row], labels: set[str] | None = None, heading_level: int = 2) -> str:
    """The scorecard as MyST Markdown, in two parts. First one compact table of every claim
    (claim, verdict, where it is measured), which reads on a phone; then, per paper, the details
    of each claim as a dropdown (the claim, the paper's number, ours, the verdict's rule and notes,
    the stored result it comes from and whether today's code computed it), labelled
    :func:`card_label` so the table links to them. Claims link to their sections only where the
    label exists in ``labels``. All text built from results is :func:`~ntkbook.book.report.typeset`."""
    from ntkbook.book.report import typeset

    labels = book_labels() if labels is None else labels
    h = "#" * heading_level
    out = [f"{h} At a glance", "",
           "| claim | verdict | measured in |", "|---|---|---|"]
    for r in rows:
        c = r.claim
        target = c.link_target(labels)
        where = (f"{{ref}}`{_CHAPTER_SHORT.get(c.chapter, c.chapter)} <{target}>`" if target
                 else f"{{doc}}`{c.chapter}`")
        out.append(f"| {{ref}}`{c.id} <{card_label(c.id)}>`: {_cell(c.claim)} | {_MARK[r.verdict]} "
                   f"| {where} |")
    out.append("")
    for paper, title in _PAPERS.items():
        sel = [r for r in rows if r.claim.paper == paper]
        if not sel:
            continue
        out += [f"{h} {title}", ""]
        for r in sel:
            out += _card(r, labels, typeset)
    return "\n".join(out)


def _card(r: Row, labels: set[str], typeset) -> list[str]:
    c = r.claim
    target = c.link_target(labels)
    ident = f"{{ref}}`{c.id} <{target}>`" if target else f"**{c.id}**"
    lines = [f"````{{dropdown}} {c.id}: {r.verdict}", f":name: {card_label(c.id)}",
             ":class-container: scorecard-claim", "",
             f"{ident}: {c.claim}", "", f"**The paper:** {typeset(c.reported)}.", ""]
    if r.verdict == NOT_MEASURED:
        return lines + [f"**Ours:** not yet measured (chapter {{doc}}`{c.chapter}`).", "````", ""]
    ours = split_top_level(r.ours)
    if len(ours) == 1:
        lines += [f"**Ours:** {typeset(ours[0])}.", ""]
    else:
        lines += ["**Ours:**", ""] + [f"- {typeset(o)}" for o in ours] + [""]
    lines.append(verdict_text(r.verdict, r.note))
    lines += ["", "**From the stored result" + ("s" if len(r.experiments) > 1 else "") + ":** "
              + "; ".join(split_top_level(r.source)) + ".", "````", ""]
    return lines


def as_dicts(rows: Iterable[Row]) -> list[dict]:
    """Plain dicts (for JSON or tests)."""
    return [{**dataclasses.asdict(r.claim), "section": r.claim.section, "verdict": r.verdict,
             "ours": r.ours, "note": r.note, "source": r.source} for r in rows]


def claim_line(claim_id: str, rows: list[dict], *, chapter: str | None = None):
    """The closing line of a section that measures ``claim_id``: the paper's number beside ours and
    the verdict with its rule, from scorecard rows (those of a claims module's ``scorecard``;
    Markdown, :func:`~ntkbook.book.report.typeset`)::

        claim_line("B.mlp.grokking", claims_mm.scorecard({"modular_mlp": res}))
        # **Paper B:** around epochs 75–100. **Ours:** 10% → 90% ... **Verdict: reproduces**
        # (threshold: every seed ends ≥ 95% and ...).

    ``chapter``: the chapter showing the line. Where the claim is catalogued under another
    chapter, the line says that these rows are this chapter's part of the claim and that the
    scorecard joins them with that chapter's (so a verdict that differs from the scorecard's is
    explained where it is shown).
    """
    from ntkbook.book.report import MarkdownText, typeset

    c = _BY_ID[claim_id]
    paper = {"A": "Paper A", "B": "Paper B"}.get(c.paper, "Expected")
    mine = [r for r in rows if r["claim"] == claim_id]
    if not mine:
        return MarkdownText(f"**{paper}:** {typeset(c.reported)}. **Ours:** not measured in this run.")
    ours = typeset(_join(r["ours"] for r in mine))
    verdicts = {r["verdict"] for r in mine}
    verdict = verdicts.pop() if len(verdicts) == 1 else "partly"
    text = (f"**{paper}:** {typeset(c.reported)}. **Ours:** {ours}. "
            + verdict_text(verdict, functools.reduce(_join_new, (str(r.get("note", "")) for r in mine))))
    if chapter is not None and chapter != c.chapter:
        text += (f" These are this chapter's measurements of `{claim_id}`; the scorecard "
                 f"({{doc}}`scorecard`) joins them with those of {{doc}}`{c.chapter}`, and its verdict "
                 "is theirs when they agree, *partly* when they differ.")
    return MarkdownText(text)
