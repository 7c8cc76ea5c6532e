"""The event-plane figure kinds draw what the probes' evidence rows hold (and say so when there is nothing)."""

from workbench import plots
from workbench.events import figures


def test_the_kinds_are_registered_for_the_probes():
    names = {name for name, _ in plots.figures_of("events.inventory_fidelity")}
    assert names == {"predicted_vs_reported"}
    assert {"events_fidelity", "events_timeline", "events_loss_curve"} <= set(plots.BUILDERS)


def test_fidelity_draws_the_engine_and_each_arm():
    rows = [{"request": i, "arm": arm, "predicted": p, "reported": 64 * (i % 2)}
            for i in range(3) for arm, p in (("right", 64 * (i % 2)), ("wrong", 0))]
    fig = figures.fidelity(rows)
    assert [t.name for t in fig.data] == ["engine reported", "predicted · right", "predicted · wrong"]
    assert list(fig.data[0].y) == [0, 64, 0]


def test_timeline_and_loss_curve():
    marks = [{"t_s": 0.1, "mark": "gap", "seq": 7, "count": 7}, {"t_s": 0.2, "mark": "cleared", "seq": 7, "count": 7},
             {"mark": "request", "request": 8, "predicted": 64, "reported": 64}]
    assert [t.name for t in figures.timeline(marks).data] == ["gap", "cleared"]
    loss = figures.loss_curve([{"consumer": 1, "lease": "held", "seen_fraction": 1.0},
                               {"consumer": 2, "lease": "refused", "seen_fraction": 0.5}])
    assert list(loss.data[0].y) == [1.0, 0.5]
    assert not figures.fidelity([]).data and figures.fidelity([]).layout.annotations[0].text == "no requests"
