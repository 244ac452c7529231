"""The loss curve's reader: the harness's metrics.jsonl, or an unmodified script's output.log
through the variant's frozen metrics_regex."""

import json

from console.metrics_tail import MetricTail
from console.widgets.plots.loss_plot import LossPlot


def test_harness_metrics_file_is_followed_incrementally(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"t": 0, "step": i, "loss": 1.0 / (i + 1)}) + "\n" for i in range(3)) + '{"step": 3, "lo'
    )
    tail = MetricTail(tmp_path)
    assert tail.poll() == 3  # the partial last line waits for its newline
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('ss": 0.2}\n')
    assert tail.poll() == 1


def test_unmodified_script_curve_comes_from_its_output_log(tmp_path):
    (tmp_path / "run.toml").write_text(
        "[variant]\nname = \"nano\"\nmetrics_regex = 'iter (?P<step>\\d+): loss (?P<loss>\\S+)'\n"
    )
    (tmp_path / "output.log").write_text(
        "step 0: train loss 10.9, val loss 10.9\niter 0: loss 10.93, time 12ms\niter 10: loss 7.41, time 11ms\n"
    )
    tail = MetricTail(tmp_path)
    assert tail.path.name == "output.log"
    assert tail.poll() == 2
    with open(tmp_path / "output.log", "a") as f:
        f.write("iter 20: loss nan, time 11ms\niter 30: loss 6.2, time 11ms\n")
    assert tail.poll() == 2  # nan is a point too: the plot shows where it broke


def test_the_plot_reads_only_the_curves_it_draws(tmp_path):
    """Eight running runs write 100 lines a second each: an idle console decodes the one or two
    curves it draws, not the lines of every running run (a curve shown next is read then)."""
    rows = []
    for i in range(4):
        folder = tmp_path / f"r{i}"
        folder.mkdir()
        (folder / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
        rows.append({"id": f"r{i}", "variant": "v", "state": "running", "run_dir": str(folder)})
    plot = LossPlot()
    plot.take_runs(rows, full=True)
    plot.selected = "r2"
    assert set(plot.read_new()) == {"r2"}
    plot.show_all = True  # the `v` view: every running run is drawn
    assert set(plot.read_new()) == {"r0", "r1", "r2", "r3"}
    plot.tails.close()
