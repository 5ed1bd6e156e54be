"""Data loaders: MNIST, Fashion-MNIST, a CIFAR-10 subset, a TinyStories sample, 8x8 digits, and the
recorded transformer run.

Where files are looked for, in order:

1. the ``data_dir`` argument,
2. the environment variable ``NTKBOOK_DATA``,
3. the user cache ``$XDG_CACHE_HOME/ntkbook`` (``~/.cache/ntkbook``),
4. the repository's own ``data/`` folder (it ships the transformer replay only),
5. for Fashion-MNIST, Debian's ``/usr/share/datasets/fashion-mnist`` (package
   ``dataset-fashion-mnist``).

Within a data directory each data set has its folder (``mnist/``, ``fashion-mnist/``,
``cifar10/``, ``tinystories/``, ``mi-ntk/``). Every file has a route from its canonical source,
listed with its checksum in :data:`ntkbook.data.fetch.FILES` (``make data`` fetches them all).
When a file is found nowhere, it is fetched by that route into the user cache (unless
``NTKBOOK_OFFLINE=1``); when that fails too, :class:`DataNotFoundError` names the data set, every
place searched and how to provide the file. Every file read is checked against the checksum of its
content (the lossless CIFAR-10 subset, whose checksum is not recorded yet, against its layout), so
a corrupt or different file raises :class:`ChecksumError` instead of silently changing results.

Images come back as float arrays in [0, 1], shape ``(N, H, W)`` (grey) or ``(N, H, W, 3)``
(colour), with integer labels.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ntkbook.data import fetch
from ntkbook.data.fetch import ChecksumError, DataNotFoundError, DownloadError
from ntkbook.errors import InputError

__all__ = [
    "Dataset",
    "DataNotFoundError",
    "ChecksumError",
    "DownloadError",
    "load_mnist",
    "load_fashion_mnist",
    "load_cifar10",
    "load_digits",
    "load_tinystories",
    "load_transformer_replay",
    "TransformerReplay",
    "load",
    "class_subset",
    "mnist_unit_norm",
    "search_dirs",
    "CIFAR10_CLASSES",
    "CIFAR10_VARIANTS",
    "FASHION_MNIST_CLASSES",
]


@dataclass(frozen=True)
class Dataset:
    """A labelled image data set split into train and test.

    ``x_*``: float32 in [0, 1], ``(N, H, W)`` or ``(N, H, W, C)``; ``y_*``: int64 ``(N,)``.
    ``source`` says exactly what was loaded (which variant, from which folder).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: tuple[str, ...]
    source: str


CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)
FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
    "Ankle boot",
)

_HOWTO = {
    "mnist": "the four IDX .gz files of MNIST (train/t10k images/labels)",
    "fashion-mnist": "the four IDX .gz files of Fashion-MNIST, or install Debian's dataset-fashion-mnist",
    "cifar10": ("cifar10-jpeg-q75-10k-2k.npz (the subset the stored results were computed from) or "
                "cifar10-lossless-10k-2k.npz (built from the canonical archive by `make data`)"),
    "tinystories": "tinystories_train_head_2MiB.txt (the first 2 MiB of TinyStories-train.txt)",
    "mi-ntk": ("transformer_p29_seed2_init_and_order.npz (shipped with the book in data/mi-ntk/: "
               "restore it with `git checkout -- data/`)"),
}


def search_dirs(dataset: str, data_dir: str | os.PathLike | None = None) -> list[Path]:
    """The folders searched for ``dataset``'s files, in order."""
    roots: list[Path] = []
    if data_dir is not None:
        roots.append(Path(data_dir))
    if os.environ.get("NTKBOOK_DATA"):
        roots.append(Path(os.environ["NTKBOOK_DATA"]))
    roots += [fetch.user_cache(), fetch.shipped_dir()]
    dirs = [r / dataset for r in roots]
    if dataset == "fashion-mnist":
        dirs.append(Path("/usr/share/datasets/fashion-mnist"))
    return dirs


def _look(path: str, data_dir) -> Path | None:
    """``path`` (``"<data set>/<file>"``) in the first search folder that has it, else None."""
    dataset, filename = path.split("/", 1)
    for d in search_dirs(dataset, data_dir):
        if (d / filename).is_file():
            return d / filename
    return None


def _find(path: str, data_dir, *, also: str | None = None) -> Path:
    """Path of ``path`` (``"<data set>/<file>"``): found in the search folders, or fetched into the
    user cache by its route (:func:`ntkbook.data.fetch.fetch_file`). ``also``: a file looked for
    before this one, named in the error."""
    found = _look(path, data_dir)
    if found is not None:
        return found
    entry = fetch.data_file(path)
    dataset, filename = path.split("/", 1)
    dirs = search_dirs(dataset, data_dir)
    tried = [str(d / name) for name in ([also.split("/", 1)[1]] if also else []) + [filename] for d in dirs]
    if entry.derive in ("none", "shipped"):
        why = "it has no download"
    elif os.environ.get("NTKBOOK_OFFLINE") == "1":
        why = "downloads are off (NTKBOOK_OFFLINE=1)"
    else:
        try:
            return fetch.fetch_file(entry, fetch.user_cache())
        except DownloadError as exc:
            why = f"fetching it failed: {exc}"
    raise DataNotFoundError(
        f"{dataset}: file {filename!r} not found. Searched, in order:\n  "
        + "\n  ".join(tried)
        + f"\nand {why}\nProvide {_HOWTO[dataset]} in a folder '{dataset}/' under a data "
        "directory, then pass data_dir=... or set NTKBOOK_DATA to that directory; "
        f"`make data` (python -m ntkbook.data fetch --only {dataset}) fetches what has a route."
    )


def _read_idx(path: Path, entry: fetch.DataFile) -> np.ndarray:
    """The array of an IDX ``.gz`` file, after checking its decoded content's sha256."""
    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ChecksumError(f"{entry.dataset}: {path} is not a readable gzip file ({exc}); replace it") from exc
    got = hashlib.sha256(raw).hexdigest()
    if got != entry.sha256:
        raise ChecksumError(
            f"{entry.dataset}: checksum mismatch for {path}: the decoded content has sha256 {got}, "
            f"expected {entry.sha256}. The file is corrupt or is another data set; replace it."
        )
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _load_idx_dataset(dataset: str, classes: Sequence[str], data_dir) -> Dataset:
    arrays = {}
    paths = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        for kind, stem in (("x", "images-idx3-ubyte.gz"), ("y", "labels-idx1-ubyte.gz")):
            name = f"{prefix}-{stem}"
            paths[name] = _find(f"{dataset}/{name}", data_dir)
            arrays[f"{kind}_{split}"] = _read_idx(paths[name], fetch.data_file(f"{dataset}/{name}"))
    folder = paths["train-images-idx3-ubyte.gz"].parent
    return Dataset(
        name=dataset,
        x_train=arrays["x_train"].astype(np.float32) / 255.0,
        y_train=arrays["y_train"].astype(np.int64),
        x_test=arrays["x_test"].astype(np.float32) / 255.0,
        y_test=arrays["y_test"].astype(np.int64),
        class_names=tuple(classes),
        source=f"{dataset} IDX files from {folder}",
    )


def load_mnist(data_dir: str | os.PathLike | None = None) -> Dataset:
    """Full MNIST: 60,000 train / 10,000 test, ``(N, 28, 28)`` in [0, 1]."""
    return _load_idx_dataset("mnist", [str(i) for i in range(10)], data_dir)


def load_fashion_mnist(data_dir: str | os.PathLike | None = None) -> Dataset:
    """Full Fashion-MNIST: 60,000 train / 10,000 test, ``(N, 28, 28)`` in [0, 1]."""
    return _load_idx_dataset("fashion-mnist", FASHION_MNIST_CLASSES, data_dir)


def _verified_file(path: str, data_dir, *, also: str | None = None) -> Path:
    """:func:`_find`, then the file checked against its entry in :data:`ntkbook.data.fetch.FILES`."""
    found = _find(path, data_dir, also=also)
    fetch.verify_file(fetch.data_file(path), found)
    return found


#: the CIFAR-10 subsets: variant -> (file, what Dataset.source calls it)
CIFAR10_VARIANTS = {
    "jpeg-q75": (fetch.CIFAR10_JPEG, "CIFAR-10 JPEG-q75 subset (10k/2k; the stored results' data)"),
    "lossless": (fetch.CIFAR10_LOSSLESS, "CIFAR-10 lossless subset (10k/2k, built from the canonical archive)"),
}


def load_cifar10(data_dir: str | os.PathLike | None = None, variant: str | None = None) -> Dataset:
    """The book's CIFAR-10 subset: 10,000 train / 2,000 test, ``(N, 32, 32, 3)`` in [0, 1].

    Two variants with the same images, order and layout (classes interleaved, so any prefix is
    class-balanced):

    - ``"jpeg-q75"``: decoded from a JPEG (quality 75) re-encoding of CIFAR-10, not the lossless
      originals (channel means match CIFAR-10, the standard deviation is slightly lower). The stored
      results were computed from it; it has no public download.
    - ``"lossless"``: the archive's own pixels, built by ``make data`` from the canonical
      ``cifar-10-python.tar.gz`` (:func:`ntkbook.data.fetch.build_cifar10_subset`).

    ``variant=None`` takes the first search folder (:func:`search_dirs`) that holds either, the JPEG
    file where a folder holds both; where none does, the lossless one is fetched (unless offline).
    ``Dataset.source`` says which one was read and from where.
    """
    if variant is not None and variant not in CIFAR10_VARIANTS:
        raise ValueError(f"unknown CIFAR-10 variant {variant!r}; choose one of {sorted(CIFAR10_VARIANTS)}")
    if variant is None:  # the first search folder holding either; the JPEG one where both are
        variant = "lossless"
        for d in search_dirs("cifar10", data_dir):
            if (d / fetch.data_file(fetch.CIFAR10_JPEG).name).is_file():
                variant = "jpeg-q75"
                break
            if (d / fetch.data_file(fetch.CIFAR10_LOSSLESS).name).is_file():
                break
    path_in_dir, what = CIFAR10_VARIANTS[variant]
    also = fetch.CIFAR10_JPEG if variant == "lossless" else None
    path = _verified_file(path_in_dir, data_dir, also=also)
    with np.load(path, allow_pickle=False) as z:
        return Dataset(
            name="cifar10",
            x_train=z["x_train"].astype(np.float32) / 255.0,
            y_train=z["y_train"].astype(np.int64).reshape(-1),
            x_test=z["x_test"].astype(np.float32) / 255.0,
            y_test=z["y_test"].astype(np.int64).reshape(-1),
            class_names=tuple(str(c) for c in z["class_names"]),
            source=f"{what} from {path}",
        )


def load_digits() -> Dataset:
    """scikit-learn's bundled 8x8 digits (1,797 images), split 1,437 train / 360 test."""
    from sklearn.datasets import load_digits as _sk_digits

    d = _sk_digits()
    x = (d.images / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    return Dataset(
        name="digits", x_train=x[:1437], y_train=y[:1437], x_test=x[1437:], y_test=y[1437:],
        class_names=tuple(str(i) for i in range(10)), source="scikit-learn load_digits",
    )


def load_tinystories(data_dir: str | os.PathLike | None = None) -> list[str]:
    """The TinyStories sample: a list of 2,316 complete stories (strings), from the first 2 MiB of
    TinyStories' train text."""
    path = _verified_file(fetch.TINYSTORIES, data_dir)
    text = path.read_text(encoding="utf-8")
    parts = text.split("<|endoftext|>")
    # The sample was cut at 2 MiB: what follows the last separator is an unfinished story.
    return [s.strip() for s in parts[:-1] if s.strip()]


@dataclass(frozen=True)
class TransformerReplay:
    """The author's one-layer-transformer run (Paper B), as recorded for an exact replay.

    ``params``: the initial weights under the author's torch parameter names without the module
    prefixes (``W_E`` (30, 64), ``W_pos`` (3, 64), ``W_Q``/``W_K``/``W_V`` (4, 16, 64), ``W_O``
    (64, 64), ``W_in`` (64, 256), ``W_out`` (256, 64), ``W_U`` (64, 30)), float32 as drawn by torch;
    ``perms`` (epochs, 420) int64: the order of the training examples in each epoch (mini-batches
    of 64, the last one of 36 kept); ``train_x`` (420, 3), ``test_x`` (421, 3) int64 token
    triples ``(a, b, 29)`` of the author's 50% split.
    """

    params: dict
    perms: np.ndarray
    train_x: np.ndarray
    test_x: np.ndarray
    source: str


#: torch parameter names in the recorded file -> the short names of ntkbook.models.transformer
_REPLAY_NAMES = {
    "embed.W_E": "W_E", "pos_embed.W_pos": "W_pos",
    "transformer_block.attn.W_Q": "W_Q", "transformer_block.attn.W_K": "W_K",
    "transformer_block.attn.W_V": "W_V", "transformer_block.attn.W_O": "W_O",
    "transformer_block.mlp.W_in": "W_in", "transformer_block.mlp.W_out": "W_out",
    "unembed.W_U": "W_U",
}


def load_transformer_replay(data_dir: str | os.PathLike | None = None) -> TransformerReplay:
    """The initial weights, per-epoch batch order and split of the author's transformer run.

    Reads ``mi-ntk/transformer_p29_seed2_init_and_order.npz`` from the data directories (see
    :func:`search_dirs`; the repository ships it in ``data/mi-ntk/``, with its provenance),
    checked against its sha256. A missing file raises :class:`DataNotFoundError` naming every
    place searched.
    """
    path = _verified_file(fetch.TRANSFORMER_REPLAY, data_dir)
    with np.load(path, allow_pickle=False) as z:
        params = {short: np.asarray(z[f"init/{name}"]) for name, short in _REPLAY_NAMES.items()}
        return TransformerReplay(
            params=params,
            perms=z["perms"].astype(np.int64),
            train_x=z["train_x"].astype(np.int64),
            test_x=z["test_x"].astype(np.int64),
            source=f"Paper B transformer run (torch seed 2) recorded in {path}",
        )


_LOADERS = {
    "mnist": load_mnist,
    "fashion-mnist": load_fashion_mnist,
    "cifar10": load_cifar10,
}


def load(name: str, data_dir: str | os.PathLike | None = None) -> Dataset:
    """Load an image data set by name: ``"mnist"``, ``"fashion-mnist"``, ``"cifar10"``, ``"digits"``."""
    if name == "digits":
        return load_digits()
    if name not in _LOADERS:
        raise InputError(f"unknown data set {name!r}; choose one of {sorted(_LOADERS) + ['digits']}")
    return _LOADERS[name](data_dir)


def _class_index(ds: Dataset, c: int | str) -> int:
    if isinstance(c, str):
        if c not in ds.class_names:
            raise InputError(f"{ds.name} has no class {c!r}; classes: {ds.class_names}")
        return ds.class_names.index(c)
    if not 0 <= int(c) < len(ds.class_names):
        raise InputError(f"{ds.name} class index {c} out of range 0..{len(ds.class_names) - 1}")
    return int(c)


def class_subset(
    ds: Dataset,
    classes: Sequence[int | str],
    n_per_class: int,
    *,
    split: str = "train",
    seed: int = 0,
    flatten: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """A balanced, seeded subset of some classes, e.g. MNIST 3 vs 8.

    Returns ``(x, y)``: ``x`` float64 in [0, 1], flattened to ``(n, D)`` unless ``flatten=False``;
    ``y`` int64 in ``0..len(classes)-1`` (the position of the class in ``classes``), with exactly
    ``n_per_class`` examples of each class, in an interleaved order (class 0, class 1, ...).
    The same ``(classes, n_per_class, split, seed)`` always gives the same examples.
    """
    if split not in ("train", "test"):
        raise InputError(f"split must be 'train' or 'test', got {split!r}")
    x_all = ds.x_train if split == "train" else ds.x_test
    y_all = ds.y_train if split == "train" else ds.y_test
    idx = [_class_index(ds, c) for c in classes]
    if len(set(idx)) != len(idx):
        raise InputError(f"classes must be distinct, got {classes}")
    rng = np.random.default_rng(seed)
    picks = []
    for c in idx:
        pool = np.flatnonzero(y_all == c)
        if n_per_class > pool.size:
            raise InputError(
                f"{ds.name} {split} has only {pool.size} examples of class {ds.class_names[c]!r}, "
                f"{n_per_class} requested"
            )
        picks.append(np.sort(rng.choice(pool, size=n_per_class, replace=False)))
    order = np.stack(picks, axis=1).reshape(-1)  # interleave classes
    x = x_all[order].astype(np.float64)
    y = np.tile(np.arange(len(idx), dtype=np.int64), n_per_class)
    if flatten:
        x = x.reshape(x.shape[0], -1)
    return x, y


def mnist_unit_norm(n_per_class: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: ``n_per_class`` MNIST training images of each digit (:func:`class_subset` with
    ``seed``), flattened to 784 pixels and scaled to unit Euclidean norm (the inputs of the eNTK
    chapter's experiments)."""
    x, y = class_subset(load_mnist(), list(range(10)), n_per_class, seed=seed)
    return x / np.linalg.norm(x, axis=1, keepdims=True), y
