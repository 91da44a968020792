import json
import multiprocessing
import os

import pytest

from fragscope_record import manifest, naming


def files(out, base):
    return {role: os.path.join(out, name) for role, name in naming.set_files(base).items()}


def publish(out, rank, world_size=4, job="train"):
    entry = manifest.rank_entry(rank, rank % 2, files(out, "%s.rank%d" % (job, rank)), out,
                                outcome="ok", host="node%d" % (rank // 2))
    return manifest.publish_rank(out, job, world_size, entry)


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]])
def test_manifest_lists_every_rank_whatever_the_order(tmp_path, order):
    out = str(tmp_path)
    for rank in order:
        publish(out, rank)
    with open(os.path.join(out, "fragscope-job.json")) as f:
        written = json.load(f)
    assert written["format"] == "fragscope-job/1"
    assert written["job"] == "train"
    assert written["world_size"] == 4
    assert [r["rank"] for r in written["ranks"]] == [0, 1, 2, 3]
    assert written["ranks"][3] == {
        "rank": 3, "local_rank": 1, "snapshot": "train.rank3.pickle",
        "stats": "train.rank3.stats.json", "summary": "train.rank3.summary.txt",
        "env": "train.rank3.env.json", "outcome": "ok", "host": "node1"}
    assert manifest.read_manifest(os.path.join(out, "fragscope-job.json")) == written


def test_a_rank_written_again_replaces_its_entry(tmp_path):
    out = str(tmp_path)
    publish(out, 0)
    entry = manifest.rank_entry(0, 0, files(out, "train.rank0.oom"), out, outcome="oom")
    written = manifest.publish_rank(out, "train", 4, entry)
    assert len(written["ranks"]) == 1
    assert written["ranks"][0]["snapshot"] == "train.rank0.oom.pickle"


def test_paths_are_relative_to_the_manifest(tmp_path):
    out = str(tmp_path)
    entry = manifest.rank_entry(1, 1, files(os.path.join(out, "sub"), "train.rank1"), out)
    assert entry["snapshot"] == "sub/train.rank1.pickle"


def _publish_in_child(args):
    out, rank = args
    publish(out, rank, world_size=16)
    return rank


def test_ranks_finishing_together_all_land_in_the_manifest(tmp_path):
    out = str(tmp_path)
    with multiprocessing.get_context("fork").Pool(8) as pool:
        assert sorted(pool.map(_publish_in_child, [(out, r) for r in range(16)])) == list(range(16))
    written = manifest.read_manifest(os.path.join(out, "fragscope-job.json"))
    assert [r["rank"] for r in written["ranks"]] == list(range(16))
    leftovers = [n for n in os.listdir(out) if n.endswith(".tmp")]
    assert leftovers == []


def test_another_job_in_the_same_folder_is_refused(tmp_path):
    out = str(tmp_path)
    publish(out, 0, job="train")
    with pytest.raises(manifest.ManifestError, match="belongs to job 'train'"):
        publish(out, 0, job="eval")


@pytest.mark.parametrize("content, message", [
    ("not json", "cannot read"),
    ("[]", "expected a JSON object"),
    ('{"format": "fragscope-job/9", "job": "a", "world_size": 1, "ranks": []}', "format"),
    ('{"format": "fragscope-job/1", "job": "a", "world_size": "2", "ranks": []}', "world_size"),
    ('{"format": "fragscope-job/1", "job": "a", "world_size": 1, "ranks": [{"rank": 0}]}',
     r"ranks\[0\].snapshot"),
])
def test_bad_manifests_name_the_place(tmp_path, content, message):
    path = tmp_path / "fragscope-job.json"
    path.write_text(content)
    with pytest.raises(manifest.ManifestError, match=message):
        manifest.read_manifest(str(path))


def test_the_gpu_jobs_manifest_reads():
    """The manifest torchrun's two ranks wrote on the GPU machine (tests/fixtures)."""
    folder = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures",
                          "fragscope-record", "ddp")
    path = os.path.join(folder, "fragscope-job.json")
    if not os.path.exists(path):
        pytest.skip("no repository fixtures beside the package")
    job = manifest.read_manifest(path)
    assert (job["job"], job["world_size"]) == ("ddp_gloo", 2)
    assert [r["rank"] for r in job["ranks"]] == [0, 1]
    for entry in job["ranks"]:
        for role in ("snapshot", "stats", "summary", "env"):
            assert os.path.exists(os.path.join(folder, entry[role])), entry[role]
