"""``engram.eval ablate --url``'s errors. What it scores against real servers is tested on
the served placements' servers (``test/serving/test_placements.py``)."""

from __future__ import annotations

from engram.eval.__main__ import main


def test_unreachable_url_is_one_clear_line(tiny_dir, capsys):
    argv = ["ablate", "--model", str(tiny_dir), "--url", "http://127.0.0.1:9"]
    assert main([*argv, "--data", __file__, "--max-samples", "2"]) == 2
    assert capsys.readouterr().err.startswith("error: cannot reach http://127.0.0.1:9 ")
