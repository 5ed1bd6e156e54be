"""Faults injected on purpose into the results store, with the demo experiment (seconds each).

Each fault must end in a clear error (a :class:`StoreError` that names the file and the repair)
or in a correct resume, and nothing finished may be lost:

- truncated and bit-flipped payloads (result npz, result json, checkpoints);
- two processes computing one entry at once;
- ``kill -9`` in the middle of a sweep, then a rerun;
- a read-only results folder;
- a full disk, via a small file-size limit (``RLIMIT_FSIZE``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ntkbook import store as store_mod
from ntkbook.experiments import demo_sweep
from ntkbook.store import Result, Store, StoreError


def result_files(root):
    """The files in a results folder other than its git-ignored entry locks (``.locks/``)."""
    return [p for p in root.rglob("*")
            if p.is_file() and store_mod.LOCKS not in p.relative_to(root).parts]


LIB = Path(__file__).resolve().parents[1] / "lib"
CONFIG = demo_sweep.Config.smoke()

# A child process: the CLI, with the demo's point function logged (and slowed or stalled).
CHILD = r"""
import os, sys, time
if os.environ.get("FAULT_FSIZE"):  # a full disk: no file of this process may grow beyond it
    import resource
    limit = int(os.environ["FAULT_FSIZE"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from ntkbook.experiments import demo_sweep
real = demo_sweep.rms_error
def logged(n, repeats, seed):
    with open(os.environ["FAULT_LOG"], "a") as fh:
        fh.write(f"{os.getpid()} {n}\n")
    if n == int(os.environ.get("FAULT_STALL_AT", "-1")):
        time.sleep(120)
    gate, t0 = os.environ.get("FAULT_GATE"), time.monotonic()
    while gate and not os.path.exists(gate) and time.monotonic() - t0 < 120:
        time.sleep(0.05)  # held, with the entry's lock, until the test opens the gate
    time.sleep(float(os.environ.get("FAULT_DELAY", "0")))
    return real(n, repeats, seed)
demo_sweep.rms_error = logged
from ntkbook.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("NTKBOOK_SCRATCH", str(tmp_path / "scratch"))
    e = dict(os.environ, PYTHONPATH=str(LIB), PYTHONDONTWRITEBYTECODE="1",
             NTKBOOK_SCRATCH=str(tmp_path / "scratch"), NTKBOOK_CACHE=str(tmp_path / "cache"),
             FAULT_LOG=str(tmp_path / "log"), JAX_PLATFORMS="cpu")
    return e


def child(env, results, *args, wait=True, prefix=(), **extra):
    cmd = [*prefix, sys.executable, "-c", CHILD, "run", "demo_sweep", "--scale", "smoke",
           "--results", str(results), *args]
    proc = subprocess.Popen(cmd, env={**env, **extra}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if not wait:
        return proc
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def computed(env) -> list[tuple[int, int]]:
    log = Path(env["FAULT_LOG"])
    if not log.exists():
        return []
    return [tuple(map(int, line.split())) for line in log.read_text().splitlines()]


def wait_for(predicate, timeout=60.0):
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("the child never got there")
        time.sleep(0.05)


def reference() -> dict[str, np.ndarray]:
    return demo_sweep.run(CONFIG).arrays


def stored(results) -> Result:
    return Store(results).load("demo_sweep", demo_sweep.VERSION, CONFIG)


# -- damaged payloads -----------------------------------------------------------------------------
def _entry(tmp_path):
    store = Store(tmp_path / "results", scale="smoke")
    rng = np.random.default_rng(0)
    result = Result("demo_sweep", {"k": 1},
                    arrays={"a": rng.standard_normal((20, 30)), "i": np.arange(50)},
                    scalars={"x": 1.5, "t": {"r": [1, 2]}})
    folder = store.save(result, "1")
    return store, folder


@pytest.mark.parametrize("which", ["result.npz", "result.json"])
def test_truncated_payloads(tmp_path, which):
    store, folder = _entry(tmp_path)
    path = folder / which
    data = path.read_bytes()
    for cut in (0, 1, len(data) // 3, len(data) - 1):
        path.write_bytes(data[:cut])
        for read in (store.has, store.load):
            with pytest.raises(StoreError) as info:
                read("demo_sweep", "1", {"k": 1})
            assert which in str(info.value)
            assert "python -m ntkbook run demo_sweep --scale smoke --recompute" in str(info.value)
        assert store.list()[0]["status"] == "corrupt"
    path.write_bytes(data)
    assert store.load("demo_sweep", "1", {"k": 1})["x"] == 1.5


@pytest.mark.parametrize("which", ["result.npz", "result.json"])
def test_bit_flips(tmp_path, which):
    """Every single-byte change of a payload is caught (here 300 random ones per file)."""
    store, folder = _entry(tmp_path)
    path = folder / which
    data = path.read_bytes()
    original = store.load("demo_sweep", "1", {"k": 1})
    rng = np.random.default_rng(1)
    caught = 0
    for _ in range(300):
        flipped = bytearray(data)
        pos = int(rng.integers(len(data)))
        flipped[pos] ^= 1 << int(rng.integers(8))
        path.write_bytes(bytes(flipped))
        try:
            back = store.load("demo_sweep", "1", {"k": 1})
        except StoreError as exc:
            assert "--recompute" in str(exc)
            caught += 1
            continue
        # only a flip that leaves the content as it was may load (in JSON, "1e+24" -> "1E+24")
        assert json.dumps(back.scalars) == json.dumps(original.scalars)
        assert back.provenance == original.provenance and back.config == original.config
        assert all(np.array_equal(back[k], original[k]) for k in original.arrays)
    assert caught >= 290


def test_decoding_errors_are_store_errors(tmp_path):
    """Behind the hash check, the decoders themselves turn every failure into a StoreError
    (zlib, zip, npy header tokenizer, dtype, UTF-8, JSON): 300 flips of an npz and of a json."""
    _, folder = _entry(tmp_path)
    rng = np.random.default_rng(2)
    for name, decode in (("result.npz", store_mod._decode_npz), ("result.json", store_mod._decode_json)):
        data = (folder / name).read_bytes()
        kinds = set()
        for _ in range(300):
            flipped = bytearray(data)
            flipped[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
            try:
                decode(bytes(flipped), folder / name, "Repair: x.")
            except StoreError as exc:
                kinds.add(str(exc).split(": ")[1] if ": " in str(exc) else "")
        assert kinds  # some flips break decoding; none escapes as another exception type


def test_damaged_checkpoint_is_reported_and_recompute_repairs(tmp_path, env):
    results = tmp_path / "results"
    rc, out, err = child(env, results, FAULT_STALL_AT="-1")
    assert rc == 0, err
    # leave a damaged checkpoint behind by stalling a second config, then killing it
    proc = child(env, results, "--set", "seed=1", wait=False, FAULT_STALL_AT="256")
    wait_for(lambda: sum(n == 256 for _, n in computed(env)) == 2)
    proc.kill()
    proc.wait()
    points = next(Path(env["NTKBOOK_SCRATCH"]).rglob("n=16-*.npz"))
    points.write_bytes(points.read_bytes()[:10])
    rc, out, err = child(env, results, "--set", "seed=1")
    assert rc == 2 and "n=16" in err and "--recompute" in err
    rc, out, err = child(env, results, "--set", "seed=1", "--recompute")
    assert rc == 0, err


# -- concurrency ----------------------------------------------------------------------------------
def test_two_processes_on_one_entry(tmp_path, env):
    """The second run waits for the first and loads its result: one computation, one entry.

    The first run is held at its first point (``FAULT_GATE``) until the second says it waits, so
    the order does not depend on how fast either starts on a loaded machine."""
    results, gate, log2 = tmp_path / "results", tmp_path / "gate", tmp_path / "second.err"
    first = child(env, results, wait=False, FAULT_GATE=str(gate))
    wait_for(lambda: computed(env))
    with open(log2, "w") as err:
        second = subprocess.Popen(
            [sys.executable, "-c", CHILD, "run", "demo_sweep", "--scale", "smoke", "--results", str(results)],
            env={**env, "FAULT_GATE": str(gate)}, stdout=subprocess.PIPE, stderr=err, text=True)
        wait_for(lambda: "waiting for pid" in log2.read_text(), timeout=120)
        gate.touch()
        out1, err1 = first.communicate(timeout=120)
        out2, _ = second.communicate(timeout=120)
    err2 = log2.read_text()
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    assert "waiting for pid" in err2
    pids = {pid for pid, _ in computed(env)}
    assert len(pids) == 1 and len(computed(env)) == len(CONFIG.sample_sizes)
    np.testing.assert_array_equal(stored(results)["rms_error"], reference()["rms_error"])


def test_second_process_can_refuse(tmp_path, env):
    """With ``--no-wait`` a second run refuses while the first holds the entry (held at its first
    point until the refusal is seen, whatever the load)."""
    results, gate = tmp_path / "results", tmp_path / "gate"
    first = child(env, results, wait=False, FAULT_GATE=str(gate))
    wait_for(lambda: computed(env))
    rc, out, err = child(env, results, "--no-wait")
    gate.touch()
    assert rc == 2 and "is being computed by pid" in err
    first.communicate(timeout=120)
    assert first.returncode == 0
    np.testing.assert_array_equal(stored(results)["rms_error"], reference()["rms_error"])


# -- kill -9 --------------------------------------------------------------------------------------
def test_kill_9_mid_sweep_then_resume(tmp_path, env):
    results = tmp_path / "results"
    proc = child(env, results, wait=False, FAULT_STALL_AT=str(CONFIG.sample_sizes[2]))
    wait_for(lambda: len(computed(env)) == 3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # nothing in the results folder (so `git status` stays clean), two points in the scratch
    assert not result_files(results)
    assert len(list(Path(env["NTKBOOK_SCRATCH"]).rglob("n=*.json"))) == 2
    rc, out, err = child(env, results)
    assert rc == 0, err
    resumed = [n for pid, n in computed(env) if pid != computed(env)[0][0]]
    assert resumed == list(CONFIG.sample_sizes[2:])  # the two finished points were reused
    result = stored(results)
    assert result.provenance["resumed_points"] == 2
    np.testing.assert_array_equal(result["rms_error"], reference()["rms_error"])
    assert not list(Path(env["NTKBOOK_SCRATCH"]).rglob("n=*.json"))  # cleared once saved


# -- read-only results folder ---------------------------------------------------------------------
def test_read_only_results_folder(tmp_path, env):
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o555)
    prefix = ()
    if os.geteuid() == 0:  # root ignores permissions unless it drops the capability
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: cannot make a folder read-only")
        prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")
    try:
        rc, out, err = child(env, results, prefix=prefix)
    finally:
        results.chmod(0o755)
    assert rc == 2 and "cannot write to" in err and "Nothing was computed" in err
    assert computed(env) == []  # refused before computing anything


# -- full disk ------------------------------------------------------------------------------------
def test_disk_full_while_saving_then_resume(tmp_path, env):
    """The checkpoints fit but the result's json does not: a clear error, the finished points
    kept, and the rerun (with space) resumes from all of them."""
    results = tmp_path / "results"
    rc, out, err = child(env, results, FAULT_FSIZE="700")
    assert rc == 2, (out, err)
    assert "could not write" in err and "result.json" in err and "larger than this process" in err
    assert not Store(results).has("demo_sweep", demo_sweep.VERSION, CONFIG)
    assert len(list(Path(env["NTKBOOK_SCRATCH"]).rglob("n=*.json"))) == len(CONFIG.sample_sizes)
    rc, out, err = child(env, results)
    assert rc == 0, err
    result = stored(results)
    assert result.provenance["resumed_points"] == len(CONFIG.sample_sizes)
    assert len(computed(env)) == len(CONFIG.sample_sizes)  # nothing computed twice
    np.testing.assert_array_equal(result["rms_error"], reference()["rms_error"])


def test_disk_full_while_checkpointing(tmp_path, env):
    results = tmp_path / "results"
    rc, out, err = child(env, results, FAULT_FSIZE="100")
    assert rc == 2 and "could not write" in err and "run the same command again to resume" in err
    assert not [p for p in Path(env["NTKBOOK_SCRATCH"]).rglob("*.tmp")]  # no partial files
    rc, out, err = child(env, results)
    assert rc == 0, err
    np.testing.assert_array_equal(stored(results)["rms_error"], reference()["rms_error"])


# -- two checkouts on one results folder ----------------------------------------------------------
TWO_CHECKOUTS = r"""
import json, os, sys
import numpy as np
from ntkbook.store import Result, Store, StoreError
role, root, scratch, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
store = Store(root, scratch=scratch)
config = {"k": 1}
counts = {"saves": 0, "loads": 0, "lists": 0, "failures": 0, "errors": []}
for i in range(n):
    try:
        if role == "writer":
            x = np.full(20000, float(i))  # each save changes the content
            store.save(Result("exp", config, arrays={"x": x}, scalars={"i": i}), "1")
            counts["saves"] += 1
        else:
            r = store.load("exp", "1", config)
            assert float(r["x"][0]) == r["i"], "npz and json from different saves"
            counts["loads"] += 1
            rows = store.list()
            assert [row["status"] for row in rows] == ["ok"], rows
            counts["lists"] += 1
    except (StoreError, AssertionError) as exc:
        counts["failures"] += 1
        counts["errors"].append(str(exc)[:200])
print(json.dumps(counts))
"""


def test_two_checkouts_share_one_results_folder(tmp_path):
    """Two processes with their own scratch folders (two checkouts) on one results folder: one
    rewrites an entry while the other loads and lists it; no load fails, no row reads corrupt."""
    root = tmp_path / "results"
    Store(root, scratch=tmp_path / "a").save(
        Result("exp", {"k": 1}, arrays={"x": np.zeros(20000)}, scalars={"i": 0}), "1")
    env = {**os.environ, "PYTHONPATH": str(LIB)}
    procs = [subprocess.Popen([sys.executable, "-c", TWO_CHECKOUTS, role, str(root),
                               str(tmp_path / scratch), "200"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for role, scratch in (("writer", "a"), ("reader", "b"))]
    outs = [p.communicate(timeout=300) for p in procs]
    counts = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    print(f"two checkouts: {counts[0]['saves']} saves against {counts[1]['loads']} loads and "
          f"{counts[1]['lists']} lists, {counts[0]['failures'] + counts[1]['failures']} failures")
    assert counts[0]["saves"] == 200 and counts[1]["loads"] == 200 and counts[1]["lists"] == 200, \
        (counts, [err for _, err in outs])
    assert all(c["failures"] == 0 for c in counts), counts


def test_a_stored_entry_loads_under_a_shared_lock(tmp_path):
    """Loading a stored entry through get_or_compute takes only the shared lock: it goes ahead
    while another reader holds the entry (an exclusive lock would be refused with wait=False)."""
    import fcntl

    store = Store(tmp_path / "results", scratch=tmp_path / "s")
    store.save(Result("demo_sweep", dataclasses.asdict(CONFIG), arrays={"x": np.ones(2)}), "1")
    path = store.lock_path("demo_sweep", "1", dataclasses.asdict(CONFIG))
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # another reader
        got = store.get_or_compute("demo_sweep", "1", dataclasses.asdict(CONFIG),
                                   lambda points: pytest.fail("recomputed"), wait=False)
        assert got["x"].tolist() == [1.0, 1.0]
        with pytest.raises(StoreError, match="being computed"):
            with store.lock("demo_sweep", "1", dataclasses.asdict(CONFIG), wait=False):
                pass
    finally:
        os.close(fd)
    assert (store.root / store_mod.LOCKS / ".gitignore").read_text().strip().endswith("*")


def test_a_read_only_results_folder_is_read_without_locks(tmp_path, env):
    results = tmp_path / "results"
    Store(results).save(Result("exp", {"k": 1}, arrays={"x": np.ones(2)}), "1")
    shutil.rmtree(results / store_mod.LOCKS)
    code = ("from ntkbook.store import Store; import sys; "
            "r = Store(sys.argv[1]).load('exp', '1', {'k': 1}); print(r['x'].sum())")
    prefix = ()
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: cannot make a folder read-only")
        prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")
    for folder in (results, *results.rglob("*")):
        if folder.is_dir():
            folder.chmod(0o555)
    try:
        out = subprocess.run([*prefix, sys.executable, "-c", code, str(results)], env=env,
                             capture_output=True, text=True, timeout=120)
    finally:
        for folder in (results, *results.rglob("*")):
            if folder.is_dir():
                folder.chmod(0o755)
    assert out.returncode == 0 and out.stdout.strip() == "2.0", out.stderr
