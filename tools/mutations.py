"""Mutation testing of ``lib/ntkbook``: does the test suite notice when the code is wrong?

Each mutation below is a small, deliberate bug (a threshold loosened, a check removed, an index
off by one, two writes swapped). For each, the script copies ``lib/`` and ``tests/`` (from the
working tree, or from a git commit with ``--ref``) into a temporary folder, applies the mutation
to the copy, runs the tests that should notice it and reports the mutation *killed* (a test
failed) or *survived* (every test passed: the bug would go unnoticed). The unmutated copy is run
first on the same tests; a mutation whose tests already fail unmutated is reported ``baseline``.

    python tools/mutations.py                 # every mutation, tests of the working tree
    python tools/mutations.py --ref 0036384   # the same mutations against an older commit
    python tools/mutations.py --only E2 S1    # some of them
    python tools/mutations.py --list          # what they are

A mutation's text may have changed between commits: each lists one or more (old, new) pairs, and
the first whose ``old`` occurs exactly once in the file is applied (``n/a`` if none does). It
runs on the CPU, one pytest process per mutation (``-x``: it stops at the first failing test), so a
full run takes about half an hour on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Mutation:
    id: str
    file: str  # relative to lib/ntkbook
    what: str
    edits: tuple[tuple[str, str], ...]  # alternatives: the first that applies is used
    tests: tuple[str, ...]  # test files (relative to the repository) that should kill it


def M(id, file, what, edits, tests):
    if isinstance(edits[0], str):
        edits = (edits,)
    return Mutation(id, file, what, tuple(edits), tuple(tests))


EIG = ("tests/test_eig.py",)
FEAT = ("tests/test_features.py",)
GRAM = ("tests/test_gram.py", "tests/test_key_numbers.py")
STORE = ("tests/test_store.py", "tests/test_faults.py")
ENTK = ("tests/test_entk.py",)
TRAIN = ("tests/test_train.py",)
MOD = ("tests/test_modular.py", "tests/test_key_numbers.py")
VALID = ("tests/test_config_validation.py",)
GUARDS = ("tests/test_numeric_guards.py",)

MUTATIONS = [
    # -- layout: the house and its documentation (tests/test_layout.py) -------------------------
    M("L1", "ntk/kernels.py", "the engine imports an experiment (an import running back up)",
      ("from __future__ import annotations\n",
       "from __future__ import annotations\n\nfrom ntkbook.experiments import make_config  # noqa: F401\n"),
      ("tests/test_layout.py",)),
    M("L2", "experiments/demo_sweep.py", "a Config field without its comment",
      ("    repeats: int = 200  # independent estimates per n", "    repeats: int = 200"), ("tests/test_layout.py",)),
    # -- codehash: the code an experiment runs (tests/test_codehash.py) -------------------------
    M("C1", "codehash.py", "legacy hash sees only module-level imports",
      ("for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):",
       "for node in ast.parse(path.read_text(), filename=str(path)).body:"), ("tests/test_codehash.py",)),
    M("C2", "codehash.py", "function-level imports not followed (Library.uses)",
      ("                    if isinstance(node, (ast.Import, ast.ImportFrom)) and node is not stmt:\n                        for bound",
       "                    if False:\n                        for bound"), ("tests/test_codehash.py",)),
    M("C3", "codehash.py", "attribute chains not followed past the first module",
      ("        first, rest = attrs[0], attrs[1:]", "        first, rest = attrs[0], []"), ("tests/test_codehash.py",)),
    M("C4", "codehash.py", "module top-level statements not hashed",
      ("            if mod.executable:\n", "            if False:\n"), ("tests/test_codehash.py",)),
    M("C5", "codehash.py", "default arguments not followed (_chains)",
      ("        for d in (*args.defaults, *[d for d in args.kw_defaults if d is not None]):\n            visit(d, scopes)",
       "        for d in ():\n            visit(d, scopes)"), ("tests/test_codehash.py",)),
    M("C6", "codehash.py", "parameters renamed like locals",
      ("            excluded.update(x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg,\n                                            a.kwarg) if x is not None)",
       "            pass"), ("tests/test_codehash.py",)),
    M("C7", "codehash.py", "ClassVar annotations dropped like any other",
      ("        if in_class_body and _field_marker(node.annotation):", "        if False:"), ("tests/test_codehash.py",)),
    M("C8", "codehash.py", "a comprehension's first iterable read in the comprehension's scope",
      ("            visit(gens[0].iter, scopes)  # the first iterable runs in the enclosing scope",
       "            visit(gens[0].iter, scopes + ({n.id for g in gens for n in ast.walk(g.target) if isinstance(n, ast.Name)},))"),
      ("tests/test_codehash.py",)),
    M("C9", "codehash.py", "the cache keyed by file sizes, not contents",
      ("            digest.update(str(path.relative_to(root)).encode() + b\"\\0\" + path.read_bytes() + b\"\\0\")",
       "            digest.update(str(path.relative_to(root)).encode() + str(path.stat().st_size).encode())"),
      ("tests/test_codehash.py",)),
    M("C10", "codehash.py", "the names a class body (its methods) uses not followed",
      ("            for child in (*node.decorator_list, *node.bases, *node.keywords, *node.body):",
       "            for child in (*node.decorator_list, *node.bases, *node.keywords):"), ("tests/test_codehash.py",)),
    M("C11", "codehash.py", "base classes not followed",
      ("            for child in (*node.decorator_list, *node.bases, *node.keywords, *node.body):",
       "            for child in (*node.decorator_list, *node.keywords, *node.body):"), ("tests/test_codehash.py",)),
    M("C12", "codehash.py", "class attributes of a reached class not hashed (its methods only)",
      ("        self.function_depth = 0  # methods are functions of their own\n",
       "        self.function_depth = 0  # methods are functions of their own\n"
       "        node.body = [s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))] or [ast.Pass()]\n"),
      ("tests/test_codehash.py",)),
    M("C13", "codehash.py", "methods of a reached class not hashed (but dunders and attributes)",
      ("        self.function_depth = 0  # methods are functions of their own\n",
       "        self.function_depth = 0  # methods are functions of their own\n"
       "        node.body = [s for s in node.body if not isinstance(s, ast.FunctionDef) or s.name.startswith('__')] or [ast.Pass()]\n"),
      ("tests/test_codehash.py",)),
    M("C14", "codehash.py", "whole() fallback removed: a name not found in a module imported from is dropped",
      ("            if name not in mod.external:\n                self.whole(base)", "            if False:\n                self.whole(base)"),
      ("tests/test_codehash.py",)),
    M("C15", "codehash.py", "whole() fallback removed: an attribute not found in a module is dropped",
      ("        elif first not in mod.external:\n            self.whole(name)", "        elif False:\n            self.whole(name)"),
      ("tests/test_codehash.py",)),
    M("C16", "codehash.py", "comprehension variables taken as the enclosing function's locals",
      ("        if isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):\n            continue",
       "        if isinstance(node, ast.Lambda):\n            continue"), ("tests/test_codehash.py",)),
    M("C17", "codehash.py", "the on-disk hashes not keyed by the sources' digest (an edit reads old hashes)",
      ('return folder / f"{SCHEME}-py{sys.version_info[0]}.{sys.version_info[1]}-{stamp[:32]}.json"',
       'return folder / f"{SCHEME}-py{sys.version_info[0]}.{sys.version_info[1]}.json"'), ("tests/test_codehash.py",)),
    M("C18", "codehash.py", "every class method left out as a preset, not only smoke() and paper()",
      ("    return (isinstance(stmt, ast.FunctionDef) and stmt.name in PRESETS\n",
       "    return (isinstance(stmt, ast.FunctionDef)\n"), ("tests/test_codehash.py",)),
    M("C19", "codehash.py", "presets left out even where the reached code reads one",
      ("    if not presets and any(_reads_a_preset(stmts) for stmts in walker.units.values()):",
       "    if False:"), ("tests/test_codehash.py",)),
    M("C20", "codehash.py", "getattr(x, \"paper\") not seen as reading a preset",
      ('                    and node.func.id in ("getattr", "hasattr") and len(node.args) > 1',
       '                    and node.func.id in () and len(node.args) > 1'), ("tests/test_codehash.py",)),
    M("C21", "codehash.py", "scheme ast-1 computed without the presets (an old hash not recognised)",
      ('    walker, units = _walk(name, library, presets=(scheme == "ast-1"))',
       '    walker, units = _walk(name, library, presets=False)'), ("tests/test_rekey.py",)),
    # -- eig: Lanczos and dense eigensolvers ---------------------------------------------------
    M("E1", "ntk/eig.py", "one re-orthogonalisation pass instead of two (default)",
      ("    reorthogonalize: int = 2,\n    seed: int = 0,", "    reorthogonalize: int = 1,\n    seed: int = 0,"), EIG),
    M("E2", "ntk/eig.py", "Ritz residual estimate from the first row of S instead of the last",
      ("res = np.abs(betas[m - 1] * S[m - 1, :])", "res = np.abs(betas[m - 1] * S[0, :])"), EIG),
    M("E3", "ntk/eig.py", "breakdown detection off",
      ("if b <= eps ** (2.0 / 3.0) * max(anorm, np.finfo(float).tiny):", "if False:"), EIG),
    M("E4", "ntk/eig.py", "Lanczos symmetry check 10^6 times looser",
      ("rtol=1e-8 if jnp.finfo(dtype).bits >= 64 else 1e-3)", "rtol=1e-2 if jnp.finfo(dtype).bits >= 64 else 1e3)"), EIG),
    M("E5", "ntk/eig.py", "Lanczos non-finite check off",
      ("if not (np.isfinite(a) and np.isfinite(b)):", "if False:"), EIG),
    M("E6", "ntk/eig.py", "dense_topk returns the smallest eigenpairs",
      ("w, V = w[::-1][:k], V[:, ::-1][:, :k]", "w, V = w[:k], V[:, :k]"), EIG),
    M("E7", "ntk/eig.py", "dense_topk symmetry check off",
      ("    if asym > rtol * size:\n", "    if False:\n"), EIG),
    M("E8", "ntk/eig.py", "HVP returns the gradient, not the Hessian product",
      ("return jax.jvp(grad, (th,), (v,))[1]", "return jax.jvp(grad, (th,), (v,))[0]"), EIG),
    M("E9", "ntk/eig.py", "Lanczos orthogonal restart after breakdown off (restart with the raw vector)",
      ("            r = _orthogonalize(Q, r, 2)\n", "            pass\n"), EIG),
    # -- features: Fourier bases, overlaps, chance levels, cliffs ------------------------------
    M("F1", "ntk/features.py", "chance-level variance formula: (n - 1) -> n",
      ("(n * n * (n - 1) * (n + 2))", "(n * n * n * (n + 2))"), FEAT),
    M("F2", "ntk/features.py", "rank cut-off of orthonormal_basis 1e-8 -> 1e-3",
      ("def orthonormal_basis(F, center: bool = True, rtol: float = 1e-8)",
       "def orthonormal_basis(F, center: bool = True, rtol: float = 1e-3)"), FEAT),
    M("F3", "ntk/features.py", "cliff detector rel_drop 10 -> 3",
      ("    rel_drop: float = 10.0,", "    rel_drop: float = 3.0,"), FEAT + MOD),
    M("F4", "ntk/features.py", "cliff detector frac_of_max 0.2 -> 0.02",
      ("    frac_of_max: float = 0.2,", "    frac_of_max: float = 0.02,"), FEAT + MOD),
    M("F5", "ntk/features.py", "cliff detector ignores max_index",
      ("        keep = min(keep, int(max_index))", "        keep = keep"), FEAT + MOD),
    M("F6", "ntk/features.py", "cliff blocks may be single eigenvalues (min_size check off)",
      ("if np.all(np.diff([0] + trial) >= min_size):", "if True:"), FEAT + MOD),
    M("F7", "ntk/features.py", "subspace overlap sums |cos| instead of cos^2",
      ("return float(np.sum((Q.T @ F) ** 2))", "return float(np.sum(np.abs(Q.T @ F)))"), FEAT),
    M("F8", "ntk/features.py", "orthonormal_basis does not centre",
      ("    if center:\n        F = F - F.mean(axis=0, keepdims=True)\n", "    pass\n"), FEAT + MOD),
    # -- gram: spectra, thresholds, widths (Paper A) -------------------------------------------
    M("G1", "ntk/gram.py", "null-space threshold of a factor 10^4 times looser",
      ("tol = (max(F.shape) * EPS * (s[0] if s.size else 0.0)) ** 2",
       "tol = (max(F.shape) * 1e4 * EPS * (s[0] if s.size else 0.0)) ** 2"), GRAM),
    M("G2", "ntk/gram.py", "nonzero() default threshold 10^3 times looser",
      ("tol = (n or eigs.size) * EPS * max(eigs[0], 0.0)", "tol = (n or eigs.size) * 1e3 * EPS * max(eigs[0], 0.0)"), GRAM),
    M("G3", "ntk/gram.py", "max_verifiable_d off by one",
      ("return int(np.flatnonzero(ok)[-1] + 1) if ok.any() else 0", "return int(np.flatnonzero(ok)[-1]) if ok.any() else 0"), GRAM),
    M("G4", "ntk/gram.py", "Ostrowski interval with N instead of N^2",
      ("d2 = np.asarray(diag, dtype=np.float64) ** 2", "d2 = np.abs(np.asarray(diag, dtype=np.float64))"), GRAM),
    M("G5", "ntk/gram.py", "effective condition number kappa_d uses lambda_{d+1}",
      ("    if lam[d - 1] <= 0:\n        return math.inf\n    return float(lam[0] / lam[d - 1])",
       "    if lam[min(d, lam.size - 1)] <= 0:\n        return math.inf\n    return float(lam[0] / lam[min(d, lam.size - 1)])"), GRAM),
    M("G6", "ntk/gram.py", "ridge condition number without the ridge on top",
      ("return float((lam[0] + eps) / (lam[-1] + eps))", "return float(lam[0] / (lam[-1] + eps))"), GRAM),
    M("G7", "ntk/gram.py", "Hoeffding width: union bound over n, not n^2, entries",
      ("math.log(2.0 * n**2 / delta)", "math.log(2.0 * n / delta)"), GRAM),
    M("G8", "ntk/gram.py", "max_verifiable_d boundary: <= becomes <",
      ("ok = pos & (power * log_kappa <= math.log(limit))", "ok = pos & (power * log_kappa < math.log(limit))"), GRAM),
    # -- entk -----------------------------------------------------------------------------------
    M("N1", "ntk/entk.py", "class_mean kernel not divided by C",
      (("            if reduction == \"class_mean\":\n                k = k / C\n", "            pass\n"),
       ('outs.append(k / C if reduction == "class_mean" else k)', "outs.append(k)")), ENTK),
    M("N2", "ntk/entk.py", "lower blocks of a chunked symmetric kernel transposed wrongly",
      ("return jnp.transpose(k, (1, 0, 3, 2))", "return jnp.transpose(k, (1, 0, 2, 3))"), ENTK),
    M("N3", "ntk/entk.py", "matrix-free class_mean product not divided by C",
      ('return jnp.einsum("cnc->n", outs) / C', 'return jnp.einsum("cnc->n", outs)'), ENTK),
    M("N4", "ntk/operator.py", "non-finite input check off (the engine's check_finite)",
      ("    if bool(jnp.any(bad)):\n", "    if False:\n"), ENTK),
    M("N5", "ntk/entk.py", "padded rows of the last chunk kept in the kernel",
      (("grid[g][i][j] = out[g][:na, :nb]", "grid[g][i][j] = out[g]"),
       ("parts.append([j[:n] for j in jacobians(sel, frozen, c)])", "parts.append(list(jacobians(sel, frozen, c)))")),
      ENTK),
    # -- train ----------------------------------------------------------------------------------
    M("T1", "train.py", "finite blow-up check off",
      ("too_big = np.zeros_like(bad_loss) if limit is None else np.isfinite(losses) & (losses > limit)",
       "too_big = np.zeros_like(bad_loss)"), TRAIN),
    M("T2", "train.py", "non-finite gradient check off",
      ("bad = bad_loss | ~grad_ok | too_big", "bad = bad_loss | too_big"), TRAIN),
    M("T3", "train.py", "require_trained accepts every model",
      ("ok &= bool(np.isfinite(a) and a >= min_train_acc)", "ok &= True"), TRAIN + MOD),
    # -- store ----------------------------------------------------------------------------------
    M("S1", "store.py", "checkpoint json written before its npz",
      (("            data = _npz_bytes(arrays)\n            _write_or_explain(npz, data, resume)\n"
        "            meta = {\"key\": key, \"code\": self.code, \"array_names\": sorted(arrays),\n"
        "                    \"scalars\": scalars, \"npz_sha256\": _sha256(data), \"json_sha256\": None}\n"
        "            meta[\"json_sha256\"] = _json_digest(meta)\n"
        "            _write_or_explain(js, json.dumps(meta, indent=1).encode(), resume)\n",
        "            data = _npz_bytes(arrays)\n"
        "            meta = {\"key\": key, \"code\": self.code, \"array_names\": sorted(arrays),\n"
        "                    \"scalars\": scalars, \"npz_sha256\": _sha256(data), \"json_sha256\": None}\n"
        "            meta[\"json_sha256\"] = _json_digest(meta)\n"
        "            _write_or_explain(js, json.dumps(meta, indent=1).encode(), resume)\n"
        "            _write_or_explain(npz, data, resume)\n"),
       ("            _atomic_write_bytes(npz, _npz_bytes(arrays))\n"
        "            meta = {\"key\": key, \"array_names\": sorted(arrays), \"scalars\": scalars}\n"
        "            _atomic_write_bytes(js, json.dumps(meta, indent=1).encode())\n",
        "            meta = {\"key\": key, \"array_names\": sorted(arrays), \"scalars\": scalars}\n"
        "            _atomic_write_bytes(js, json.dumps(meta, indent=1).encode())\n"
        "            _atomic_write_bytes(npz, _npz_bytes(arrays))\n")), STORE),
    M("S2", "store.py", "no fsync before the rename",
      ("            os.fsync(fh.fileno())\n", "            pass\n"), STORE),
    M("S3", "store.py", "checkpoint key check removed",
      ("if meta.get(\"key\") != key:", "if False:"), STORE),
    M("S4", "store.py", "result npz hash not verified",
      (("        data = _read_bytes(npz, repair)\n        if _sha256(data) != integrity.get(\"npz_sha256\"):",
        "        data = _read_bytes(npz, repair)\n        if False:"),
       ("if _sha256(data) != integrity.get(\"npz_sha256\"):", "if False:")), STORE),
    M("S5", "store.py", "result json hash not verified",
      ("if integrity.get(\"json_sha256\") != _json_digest(meta):", "if False:"), STORE),
    M("S6", "store.py", "entry lock is a no-op",
      ("                fcntl.flock(fd, mode | fcntl.LOCK_NB)\n", "                pass\n"), STORE),
    M("S7", "store.py", "checkpoints of other code reused",
      ("if meta.get(\"code\", \"\") != self.code:", "if False:"), STORE),
    M("S8", "store.py", "--recompute keeps the checkpoints",
      ("self.clear_points(name, version, config, keep=None if recompute else code)",
       "self.clear_points(name, version, config, keep=code)"), STORE),
    M("S9", "store.py", "non-finite floats stored as strings again",
      ("    if isinstance(obj, float):\n        return float(obj)\n",
       "    if isinstance(obj, float):\n        return float(obj) if np.isfinite(obj) else repr(obj)\n"), STORE),
    M("S10", "store.py", "uncommitted code not refused",
      ("        if prov.get(\"git_dirty\"):\n", "        if False:\n"), STORE),
    M("S11", "store.py", "stored config not compared with the requested one",
      (("if canonical_json(meta.get(\"config\")) != canonical_json(config):", "if False:"),), STORE),
    M("S12", "store.py", "checkpoint npz hash not verified",
      ("if meta.get(\"npz_sha256\") is not None and _sha256(data) != meta[\"npz_sha256\"]:", "if False:"), STORE),
    # -- freshness: today's code or not, and reproduce (tests/test_freshness.py) ------------------
    M("R1", "freshness.py", "a result counts as today's whatever code computed it",
      (("if code_then == code_now else []", "if True else []"),
       ('    if prov.get("code_sha256") == code_now:\n', "    if True:\n")), ("tests/test_freshness.py",)),
    M("R6", "freshness.py", "a re-keying vouches whatever hash it records",
      ('        if rec.get("code_sha256") != code_now:\n            continue', "        if False:\n            continue"),
      ("tests/test_rekey.py",)),
    M("R7", "freshness.py", "a re-verification's environment read from its provenance key (never differs)",
      ("env_changes=_env_changes(_env_of(record), env))",
       "env_changes=_env_changes(_env_of(record.get(\"provenance\", record)), env))"),
      ("tests/test_freshness.py", "tests/test_rekey.py")),
    M("R2", "freshness.py", "a rerun's values are compared without their tolerance",
      ("                          bool(np.all(d <= bound)))", "                          True)"),
      ("tests/test_freshness.py",)),
    M("R3", "freshness.py", "another environment goes unsaid",
      ("    return tuple(f\"{k} {then.get(k)} -> {now.get(k)}\" for k in ENV_KEYS", "    return tuple(f\"{k}\" for k in ()"),
      ("tests/test_freshness.py",)),
    M("R4", "experiments/__init__.py", "a run with an undeclared NaN is stored",
      ("        check_finite(name, result, getattr(module, \"NONFINITE_ALLOWED\", None))\n", ""),
      ("tests/test_freshness.py",)),
    M("R5", "store.py", "a re-verification from uncommitted code is recorded in a clean store",
      ("        if self.require_clean and not prov.get(\"WARNING\"):\n            if prov.get(\"git_commit\") is None",
       "        if False:\n            if prov.get(\"git_commit\") is None"),
      ("tests/test_freshness.py",)),
    M("R8", "freshness.py", "eigenvector columns aligned by the wrong sign",
      ("    return x * np.where(dots < 0, -1.0, 1.0)", "    return x * np.where(dots > 0, -1.0, 1.0)"),
      ("tests/test_freshness.py",)),
    M("R9", "freshness.py", "any array compared up to sign, patterned or not",
      ("                                    up_to_sign=_match(key, signless) is not None))",
       "                                    up_to_sign=True))"),
      ("tests/test_freshness.py",)),
    # -- locks with the results (tests/test_faults.py) -------------------------------------------
    M("S13", "store.py", "the entry locks kept per checkout (scratch), not with the results",
      ("        return self.root / LOCKS / name / f\"{version}-{config_hash(config)}.lock\"",
       "        return self.scratch / \"locks\" / name / f\"{version}-{config_hash(config)}.lock\""),
      ("tests/test_faults.py",)),
    M("S14", "store.py", "a stored entry is loaded under the exclusive lock",
      ("        if not recompute:  # a stored entry is read under the shared lock, like any other read",
       "        if False:"), ("tests/test_faults.py",)),
    M("S15", "store.py", "the archived entries (retired experiments) listed as an experiment named archive",
      ("                and f.parent.name != ARCHIVE]", "                ]"), STORE),
    M("S16", "store.py", "an archived entry found by its first matching config value only",
      ("            if all(k in config and config[k] == v for k, v in want.items()):",
       "            if any(k in config and config[k] == v for k, v in want.items()):"), STORE),
    # -- experiments ----------------------------------------------------------------------------
    M("X1", "experiments/modular_mlp.py", "first-cliff theory 4*floor(p/2) -> 2p",
      ("\"first_cliff_theory\": 4 * (config.p // 2),", "\"first_cliff_theory\": 2 * config.p,"), MOD),
    M("X2", "experiments/modular_mlp.py", "constant mode never set aside",
      ("has_const = bool(const_w[ci] > 0.5)", "has_const = False"), MOD),
    M("X3", "experiments/gram_conditioning.py", "G~ spectrum taken from X instead of the attention output A = G X",
      ("lam_a, rank_a, kappa_a = gram.factor_spectrum(A)", "lam_a, rank_a, kappa_a = gram.factor_spectrum(x)"), GRAM),
    # -- the structured eNTK (issue 37) -------------------------------------------------------------
    M("ST1", "ntk/structured.py", "a scalar on the way to a product forgotten (its square not applied)",
      ("scale *= (s * s) if prim == \"mul\" else 1.0 / (s * s)", "scale *= 1.0"), ("tests/test_structured.py",)),
    M("ST2", "ntk/structured.py", "a product with the parameter on the left read as if on the right",
      ("    if side == 1:   # output dims", "    if True:   # output dims"), ("tests/test_structured.py",)),
    M("ST3", "ntk/structured.py", "the automatic route takes the costlier way for every leaf",
      ("elif route == \"auto\" and struct >= jac:", "elif route == \"auto\" and struct < jac:"),
      ("tests/test_structured.py",)),
    M("ST4", "ntk/structured.py", "a structured leaf's Gram matrix of positions summed over one position only",
      ("return scale * jnp.sum(HH * dot_t(a, b).reshape(n, T, m, S), axis=(1, 3))",
       "return scale * jnp.sum((HH * dot_t(a, b).reshape(n, T, m, S))[:, :1, :, :1], axis=(1, 3))"),
      ("tests/test_structured.py",)),
    M("ST5", "ntk/entk.py", "the routes a run took not recorded for its provenance",
      ("        lines.add(line)", "        pass"), ("tests/test_structured.py",)),
    # -- the influence experiments' shared helpers (issue 35 part 3) -----------------------------
    M("I1", "influence/scores.py", "Spearman's rho of the clean influences against themselves",
      ("out[f\"{label}/rho\"] = spearman(clean[label], after[label])",
       "out[f\"{label}/rho\"] = spearman(clean[label], clean[label])"), ("tests/test_influence.py",)),
    M("I2", "influence/interventions.py", "the top set's sign mix read over every point",
      ("sc[f\"clean/{label}/frac_helpful_top\"] = float(np.mean(I0[top] > 0))",
       "sc[f\"clean/{label}/frac_helpful_top\"] = float(np.mean(I0 > 0))"), ("tests/test_influence.py",)),
    M("I3", "influence/training.py", "a recipe keeps the config's attn_steps whatever the override",
      ("if f.name not in overrides}\n        return cls(**fields, **overrides)",
       "}\n        return cls(**fields)"), ("tests/test_influence.py",)),
    # -- guards of issue 17: config validation, spectra, eNTK inputs, Lanczos, precision -------
    M("V1", "experiments/demo_sweep.py", "repeats range check dropped (repeats=0 stores a NaN slope)",
      ("        v.positive_int(NAME, \"repeats\", self.repeats, \"an RMS error needs one estimate\")\n", ""), VALID),
    M("V2", "influence/config_checks.py", "even-width check dropped (the symmetric init fails late)",
      ("    \"width\": functools.partial(v.even_positive_int, why=PAIRS_UNITS),\n",
       "    \"width\": v.positive_int,\n"), VALID),
    M("V3", "validate.py", "bool accepted as an integer",
      ("return isinstance(value, int) and not isinstance(value, bool)", "return isinstance(value, int)"), VALID),
    # NaN is refused twice in number_in (isfinite, and the interval's comparisons, all False for
    # NaN): weakening one guard alone is an equivalent mutant (it survived every run), so V4
    # weakens both, the way a NaN slips through: isinf for isfinite, the interval as negations
    M("V4", "validate.py", "NaN accepted as a finite number (isinf for isfinite, the interval negated)",
      ("    ok = _is_number(value) and math.isfinite(value)\n    if ok:\n"
       "        ok = (value >= low if low_closed else value > low) and (value <= high if high_closed else value < high)\n",
       "    ok = _is_number(value) and not math.isinf(value)\n    if ok:\n"
       "        ok = not (value < low if low_closed else value <= low) and not (value > high if high_closed else value >= high)\n"),
      VALID),
    M("Q1", "ntk/gram.py", "NaN/inf spectra not refused",
      ("    if not np.all(np.isfinite(lam)):\n", "    if False:\n"), GUARDS),
    M("Q2", "ntk/gram.py", "negative eigenvalues beyond round-off not refused",
      ("        if lam[-1] < -tol:\n", "        if False:\n"), GUARDS),
    M("Q3", "ntk/gram.py", "round-off tolerance of a spectrum without the factor n",
      ("tol = lam.size * EPS * float(np.max(np.abs(lam)))", "tol = EPS * float(np.max(np.abs(lam)))"), GUARDS),
    M("Q4", "ntk/features.py", "find_cliffs no longer checks its spectrum",
      ("    lam = psd_spectrum(eigenvalues, \"eigenvalues\")",
       "    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64))[::-1]"), GUARDS),
    M("Q5", "ntk/entk.py", "class_index=True taken as 1",
      ("        if isinstance(class_index, (bool, np.bool_)) or not (", "        if not ("), GUARDS),
    M("Q6", "ntk/entk.py", "mixed eNTK dtypes silent",
      ("    if len(kinds) > 1 or narrower:", "    if False:"), GUARDS),
    M("Q7", "ntk/eig.py", "an operator's .dim not compared with dim",
      ("    if op_dim is not None and op_dim != dim:", "    if False:"), GUARDS),
    M("Q8", "ntk/eig.py", "a failing first product not explained",
      ("            if j or isinstance(exc, NtkbookError):", "            if True:"), GUARDS),
    M("Q9", "ntk/eig.py", "a Lanczos step ignores its re-orthogonalisation count",
      ("        for _ in range(reorthogonalize):\n            w = w - Q.T @ (Q @ w)",
       "        for _ in range(2):\n            w = w - Q.T @ (Q @ w)"), GUARDS),
    M("Q10", "ntk/entk.py", "one eNTK contraction at DEFAULT precision",
      (("t = jnp.einsum(\"ncp,mcp->nm\", j1[i], j2[i], precision=_HIGHEST)",
        "t = jnp.einsum(\"ncp,mcp->nm\", j1[i], j2[i], precision=jax.lax.Precision.DEFAULT)"),
       ("            return jnp.dot(a, b.T, precision=_HIGHEST)\n", "            return jnp.dot(a, b.T)\n")), GUARDS),
    M("Q11", "models/two_layer.py", "the two-layer model's forward pass at DEFAULT precision",
      ("    h = jax.nn.relu(jnp.matmul(W, x, precision=PRECISION))",
       "    h = jax.nn.relu(jnp.matmul(W, x))"), GUARDS),
    M("Q12", "ntk/gram.py", "gram_spectrum's threshold off by a factor 2 (the tiny-value approx with abs=0)",
      ("tol = (max(F.shape) * EPS * (s[0] if s.size else 0.0)) ** 2",
       "tol = 2 * (max(F.shape) * EPS * (s[0] if s.size else 0.0)) ** 2"), ("tests/test_gram.py",)),
]


def materialise(dest: Path, ref: str | None) -> None:
    """lib/ and tests/ (and the results and tools the tests read) of ``ref`` (or the working tree)
    in ``dest``."""
    parts = ["lib", "tests", "results", "tools", "pyproject.toml"]
    if ref is None:
        for p in parts:
            src = REPO / p
            if src.is_dir():
                shutil.copytree(src, dest / p, ignore=shutil.ignore_patterns("__pycache__"))
            elif src.exists():
                shutil.copy2(src, dest / p)
    else:
        tar = subprocess.run(["git", "-C", str(REPO), "archive", ref, *parts],
                             capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)


def apply(root: Path, mut: Mutation) -> bool:
    path = root / "lib" / "ntkbook" / mut.file
    if not path.exists():
        return False
    text = path.read_text()
    for old, new in mut.edits:
        if text.count(old) == 1:
            path.write_text(text.replace(old, new))
            return True
    return False


def run_tests(root: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, float, str]:
    files = [t for t in tests if (root / t).exists()]
    if not files:
        return "no tests", 0.0, ""
    env = dict(os.environ, PYTHONPATH=str(root / "lib"), PYTHONDONTWRITEBYTECODE="1",
               NTKBOOK_SCRATCH=str(root / ".scratch"), NTKBOOK_CACHE=str(root / ".cache"),
               NTKBOOK_RESULTS=str(root / "results"), NTKBOOK_GIT_COMMIT="mutation-test")
    env.setdefault("NTKBOOK_DATA", str(REPO.parent / "shared" / "data"))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                               *files], cwd=root, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - t0, ""
    dt = time.perf_counter() - t0
    failed = [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return ("pass" if proc.returncode == 0 else "fail"), dt, (failed[0] if failed else
                                                             proc.stdout.strip().splitlines()[-1:] and
                                                             proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", help="git commit whose lib/ and tests/ to mutate (default: working tree)")
    ap.add_argument("--only", nargs="*", help="mutation ids")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args(argv)
    muts = [m for m in MUTATIONS if not args.only or m.id in args.only]
    if args.list:
        for m in muts:
            print(f"{m.id:4s} {m.file:32s} {m.what}")
        return 0
    base = Path(tempfile.mkdtemp(prefix="ntkbook-mutations-"))
    clean = base / "clean"
    clean.mkdir()
    materialise(clean, args.ref)
    print(f"mutating lib/ of {args.ref or 'the working tree'} in {base}", flush=True)
    baseline: dict[str, str] = {}
    rows = []
    try:
        for m in muts:
            work = base / m.id
            shutil.copytree(clean, work)
            if not apply(work, m):
                rows.append((m, "n/a", 0.0, "the code to mutate is not there"))
                print(f"{m.id:4s} n/a       {m.what}", flush=True)
                shutil.rmtree(work)
                continue
            tests = tuple(t for t in m.tests if (clean / t).exists())
            for t in tests:  # each test file once, unmutated
                if t not in baseline:
                    baseline[t] = run_tests(clean, (t,), args.timeout)[0]
                    print(f"     baseline {t}: {baseline[t]}", flush=True)
            failing = [t for t in tests if baseline[t] != "pass"]
            if failing:
                rows.append((m, "baseline", 0.0, f"unmutated tests fail: {failing}"))
                print(f"{m.id:4s} baseline  {m.what} (tests fail unmutated)", flush=True)
                shutil.rmtree(work)
                continue
            status, dt, detail = run_tests(work, tests, args.timeout)
            verdict = {"fail": "killed", "pass": "SURVIVED"}.get(status, status)
            rows.append((m, verdict, dt, detail))
            print(f"{m.id:4s} {verdict:9s} {dt:6.1f}s  {m.what}  [{detail}]", flush=True)
            shutil.rmtree(work)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    applicable = [r for r in rows if r[1] in ("killed", "SURVIVED")]
    killed = sum(r[1] == "killed" for r in applicable)
    print(f"\nscore: {killed} of {len(applicable)} applicable mutations killed "
          f"({len(rows) - len(applicable)} not applicable or not testable here)")
    for m, verdict, _, _ in rows:
        if verdict == "SURVIVED":
            print(f"  survived: {m.id} {m.what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
