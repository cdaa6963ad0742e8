"""The second corpus (corpus_hostile.py): valid containers, hostile contents. Each bad file is one
CheckpointError line from the loader, exit 2 with that line from `info` and `predict`, and that
line in a dialog when opened through the app's File > Open dialogs, the previous model kept.
The good ones among them load. Amplifying files are refused before anything is materialised:
a subprocess that runs `info` and `predict` on every one of them stays under 1 GB."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from PySide6.QtWidgets import QFileDialog

from tests.hardening import corpus_hostile
from tests.helpers.hardening import new_window, one_line, wait_idle
from tests.helpers.hf_hub import cache_entry
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.checkpoints.formats import huggingface
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.viewer.cli.main import main

SMALL_VOCAB_PROMPT = "a b c"  # GPT-2 ids 64, 275, 269: inside the corpus models' 512-token vocabulary


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return corpus_hostile.build(str(tmp_path_factory.mktemp("hostile")))


def outcome(path: str) -> str | None:
    """The loader's one line, or None when the file loads."""
    try:
        load_checkpoint(path, device="cpu")
    except CheckpointError as e:
        return str(e)
    return None


@pytest.fixture(scope="module")
def outcomes(hostile) -> dict[str, object]:
    """name -> the loader's line, None (loaded), or the exception that escaped; each file loaded once."""
    out: dict[str, object] = {}
    for b in hostile:
        try:
            out[b.name] = outcome(b.path)
        except Exception as e:  # noqa: BLE001 - reported by the test that reads it
            out[b.name] = e
    return out


def test_the_corpus_has_every_class(hostile):
    assert len(hostile) >= 60
    assert len({b.name for b in hostile}) == len(hostile)
    groups = {g: [b for b in hostile if b.group == g] for g in corpus_hostile.GROUPS}
    assert all(len(members) >= 3 for members in groups.values()), {g: len(m) for g, m in groups.items()}
    assert sum(b.expect is None for b in hostile) >= 5  # hostile-looking but good


def test_each_file_is_one_line_or_loads(hostile, outcomes):
    problems = []
    for b in hostile:
        message = outcomes[b.name]
        if isinstance(message, Exception):
            problems.append(f"{b.name}: {type(message).__name__} escaped: {message}")
            continue
        if b.expect is None and message is not None:
            problems.append(f"{b.name}: should load, got {message!r}")
        elif b.expect is not None and (message is None or not one_line(message) or b.expect not in message.lower()):
            problems.append(f"{b.name}: {message!r} (expected {b.expect!r})")
    assert not problems, "\n".join(problems)


def strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_info_and_predict_say_the_same_line(hostile, outcomes, capsys):
    problems = []
    for b in hostile:
        expected = outcomes[b.name]
        predict = ["predict", "--checkpoint", b.path, "--prompt", SMALL_VOCAB_PROMPT]
        commands = [["info", b.path], predict] + ([["info", "--json", b.path]] if expected is None else [])
        for argv in commands:
            rc = main(argv)
            out, err = capsys.readouterr()
            if expected is None:
                if rc != 0 or err.strip():
                    problems.append(f"{b.name} {argv[:2]}: rc={rc} err={err[:200]!r}")
                elif "--json" in argv:
                    facts = strict_json(out)  # NaN/Infinity from a training record would fail here
                    assert facts["checkpoint"] == b.path
            elif rc != 2 or out or err.strip().splitlines() != [f"error: {expected}"]:
                problems.append(f"{b.name} {argv[0]}: rc={rc} out={out[:80]!r} err={err[:300]!r}")
    assert not problems, "\n".join(problems)


def test_info_json_of_a_nan_training_record_is_strict_json(hostile, capsys):
    path = next(b.path for b in hostile if b.name == "training_nan")
    assert main(["info", "--json", path]) == 0
    facts = strict_json(capsys.readouterr().out)
    assert facts["training"]["final_train_loss"] is None and facts["training"]["best"] is None
    assert facts["training"]["steps"] == 0
    assert load_checkpoint(path).training["best"] == float("inf")  # the record itself is kept as saved


def test_each_shard_file_is_read_once(hostile, monkeypatch):
    folder = next(b.path for b in hostile if b.name == "shards_same_file_twice")
    os.link(os.path.join(folder, "model-00002-of-00002.safetensors"), os.path.join(folder, "hardlink.safetensors"))
    index = os.path.join(folder, "model.safetensors.index.json")
    with open(index, encoding="utf-8") as f:
        data = json.load(f)
    data["weight_map"]["extra.b"] = "hardlink.safetensors"
    data["weight_map"]["extra.c"] = "sub/../model-00002-of-00002.safetensors"
    with open(index, "w", encoding="utf-8") as f:
        json.dump(data, f)
    reads = []
    real = huggingface.load_safetensors
    monkeypatch.setattr(huggingface, "load_safetensors",
                        lambda p, **kw: reads.append(os.path.basename(p)) or real(p, **kw))
    loaded = load_checkpoint(folder)
    assert loaded.config.n_layer == 2
    assert len(reads) == 2 and len(set(reads)) == 2, reads  # five names, two files, two reads


def test_the_app_open_dialogs_show_each_line_and_keep_the_model(qtbot, tmp_path, tiny_ckpt, hostile, outcomes,
                                                                dialogs, monkeypatch):
    window = new_window(qtbot, tmp_path, tiny_ckpt)
    st = window.state
    before, trace_before = st.model_info, st.trace
    problems = []
    for b in (b for b in hostile if b.expect is not None):
        expected = outcomes[b.name]
        n = len(dialogs.shown)
        if os.path.isdir(b.path):
            monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(lambda *a, p=b.path, **k: p))
            window.actions_.open_folder_dialog()
        else:
            monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, p=b.path, **k: (p, "")))
            window.actions_.open_dialog()
        wait_idle(qtbot, window, lambda n=n: len(dialogs.shown) > n)
        if dialogs.shown[n:] != [expected]:
            problems.append(f"{b.name}: dialogs {dialogs.shown[n:]!r}, expected {expected!r}")
        if st.model_info != before or st.trace is not trace_before:
            problems.append(f"{b.name}: the loaded model or its trace changed")
    assert not problems, "\n".join(problems)
    good = next(b.path for b in hostile if b.name == "float8_native")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (good, "")))
    n = len(dialogs.shown)
    window.actions_.open_dialog()
    wait_idle(qtbot, window, lambda: st.model_info is not before)
    assert len(dialogs.shown) == n and st.model_info.name == "float8_native.safetensors"  # loaded, no dialog
    window.close()


# -- the Hugging Face cache: broken entries beside a good snapshot -----------------------------------
def cached_model(hub, repo: str, model_folder: str) -> str:
    """A cache entry for `repo` whose one snapshot is a copy of `model_folder`."""
    import shutil

    snap = hub / f"models--{repo.replace('/', '--')}" / "snapshots" / "goodrev"
    shutil.copytree(model_folder, snap)
    return str(snap)


@pytest.mark.parametrize("damage", ["dangling", "loop", "huge_ref", "ref_up", "ref_binary"])
def test_a_broken_cache_entry_does_not_hide_a_good_snapshot(hostile, tmp_path, monkeypatch, damage):
    good = next(b.path for b in hostile if b.name == "shards_good")
    hub = tmp_path / "hub"
    snap = cached_model(hub, "org/tiny", good)
    repo = os.path.dirname(os.path.dirname(snap))
    snapshots = os.path.join(repo, "snapshots")
    refs = os.path.join(repo, "refs")
    os.makedirs(refs)
    if damage == "dangling":
        os.symlink(os.path.join(repo, "blobs", "gone"), os.path.join(snapshots, "newer"))
    elif damage == "loop":
        os.symlink(os.path.join(snapshots, "loop"), os.path.join(snapshots, "loop"))
    elif damage == "huge_ref":
        with open(os.path.join(refs, "main"), "w") as f:
            f.write("a" * (50 << 20))  # 50 MB where a 40-character hash belongs: never read whole
    elif damage == "ref_up":
        with open(os.path.join(refs, "main"), "w") as f:
            f.write("..")
    else:
        with open(os.path.join(refs, "main"), "wb") as f:
            f.write(b"\xff\xfe\x00")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    loaded = load_checkpoint("org/tiny")
    assert loaded.name == "org/tiny" and loaded.config.n_layer == 2


def test_amplifying_files_stay_under_a_gigabyte(hostile, tmp_path):
    """Every amplifying file through `info` and `predict` in one process: its peak resident memory
    (torch included) stays under 1 GB, because nothing they describe is materialised.

    The peak is the child's own VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across
    fork and exec, so a child of a test process that has grown to 2 GB would report 2 GB however
    little it used itself."""
    paths = [b.path for b in hostile if b.group == "amplify"]
    listing = tmp_path / "paths.json"
    listing.write_text(json.dumps(paths))
    script = (
        "import json, sys\n"
        "from transformer_viewer.viewer.cli.main import main\n"
        "codes = []\n"
        "for p in json.load(open(sys.argv[1])):\n"
        "    codes.append(main(['info', p]))\n"
        "    codes.append(main(['predict', '--checkpoint', p, '--prompt', 'hi']))\n"
        "peak = [int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM:')]\n"
        "print(json.dumps({'codes': codes, 'peak_kb': peak[0]}))\n"
    )
    if not os.path.exists("/proc/self/status"):
        pytest.skip("the peak of one process alone is read from /proc (Linux)")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.getcwd())
    done = subprocess.run([sys.executable, "-c", script, str(listing)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["codes"] == [2] * (2 * len(paths))
    assert result["peak_kb"] < 1024 * 1024, f"peak {result['peak_kb'] / 1024:.0f} MiB"


def test_a_sharded_cache_snapshot_loads_through_its_blob_links(hostile, tmp_path, monkeypatch):
    good = next(b.path for b in hostile if b.name == "shards_good")
    cache_entry(tmp_path / "hub", "org/sharded", good)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert load_checkpoint("org/sharded").config.n_layer == 2


def test_a_shard_linked_into_another_repository_is_refused(hostile, tmp_path, monkeypatch):
    good = next(b.path for b in hostile if b.name == "shards_good")
    snap = cache_entry(tmp_path / "hub", "org/sharded", good)
    shard = os.path.join(snap, "model-00002-of-00002.safetensors")
    target = os.path.realpath(shard)
    other = tmp_path / "hub" / "models--org--other" / "blobs"
    other.mkdir(parents=True)
    os.replace(target, other / "shard")
    os.remove(shard)
    os.symlink(os.path.relpath(other / "shard", snap), shard)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(CheckpointError, match="cache snapshot may link only into its own repository's blobs/"):
        load_checkpoint("org/sharded")
    assert main(["info", "org/sharded"]) == 2
