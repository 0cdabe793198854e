"""The timeline (HOROVOD_TIMELINE, start_timeline/stop_timeline): rank 0's files parse as
Chrome trace JSON and hold every collective's rows and phases (timeline_worker.py)."""
import json

import pytest

from _jobs import expect_ok, run_job


@pytest.mark.parametrize("np", [1, 2, 3])
def test_timeline_records_every_collective(tmp_path, np):
    first, second = tmp_path / "timeline.json", tmp_path / "again.json"
    job = run_job(np, "timeline_worker.py", str(second), env={"HOROVOD_TIMELINE": str(first)},
                  forward=("HOROVOD_TIMELINE",), timeout=90)
    expect_ok(job, np, "timeline checks passed")
    assert isinstance(json.loads(first.read_text()), list)
