"""`serving.tied_to_parent`: the command runs tied to its starter, and never starts once the starter is gone."""

import subprocess

from leroy import serving


def test_a_tied_command_runs_when_its_parent_is_alive(tmp_path):
    marker = tmp_path / "ran"

    done = subprocess.run(serving.tied_to_parent(["/usr/bin/touch", str(marker)]), timeout=30)

    assert done.returncode == 0
    assert marker.exists()


def test_a_tied_command_whose_parent_is_already_gone_never_starts(tmp_path):
    marker = tmp_path / "ran"
    command = serving.tied_to_parent(["/usr/bin/touch", str(marker)])
    command[3] = "1"  # the pid it was tied to is not its parent: as if that parent died before the tie took

    done = subprocess.run(command, timeout=30)

    assert done.returncode == 1
    assert not marker.exists()
