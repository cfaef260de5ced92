"""What `parallax train` prints: the plain progress lines of a log file and the summary table."""

from __future__ import annotations

import io
import re

from rich.console import Console

from parallax.run import train
from parallax.run.progress import LiveProgress, ProfileProgress, TenthsGate, step_line, summary_table

from test_train import FakeEngine, tiny_run


def log_console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=False, width=200), buffer


def test_log_lines_say_warmup_without_a_rate_then_tokens_per_second():
    console, buffer = log_console()
    live = LiveProgress(total_steps=4, tokens_per_step=1000, warmup=2, console=console)
    for step, ms in enumerate([52.7, 40.0, 10.0, 20.0]):
        live.step(step, 5.0 - step, ms)
    assert buffer.getvalue().splitlines() == [
        "step 1/4  loss 5.0000  52.7 ms  warmup",
        "step 2/4  loss 4.0000  40.0 ms  warmup",
        "step 3/4  loss 3.0000  10.0 ms  100,000 tok/s",
        "step 4/4  loss 2.0000  20.0 ms  66,667 tok/s",  # the median of 10 and 20 ms
    ]


def test_the_summary_names_the_evaluation_step_as_the_progress_counts_it(tmp_path, monkeypatch):
    monkeypatch.setattr(train, "get_engine", lambda name: FakeEngine(step_ms=[9.0] * 6))
    result = train.run_training(tiny_run(tmp_path))
    assert result["eval"][0]["step"] == 5  # stored 0-based, as the engine counts
    console, buffer = log_console()
    console.print(summary_table(result))
    row = next(line for line in buffer.getvalue().splitlines() if "│ eval" in line)
    assert "loss 4.0000, perplexity 54.60 after step 6 " in row  # the 6th of 6 steps: progress says 6/6


def test_a_log_gets_the_first_step_then_one_line_per_tenth():
    gate = TenthsGate(total=200)
    printed = [step for step in range(1, 201) if gate("cell", step)]
    assert printed == [1, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200]
    assert gate("other cell", 57)  # each run counts on its own
    short = TenthsGate(total=4)
    assert [step for step in (1, 2, 2, 3, 4) if short("c", step)] == [1, 2, 3, 4]


def test_a_step_line_names_the_cell_and_step_k_of_n():
    assert step_line("torch bf16 seed 0 rep 0", 40, 200, 6.123, 142.0) == (
        "torch bf16 seed 0 rep 0: step 40/200  loss 6.1230  142.0 ms")
    assert step_line("jax fp8 seed 1 rep 0", 1, 20, None, None) == "jax fp8 seed 1 rep 0: step 1/20"


def test_a_profile_counts_each_stage_k_of_n_in_a_log():
    console, buffer = log_console()
    shown = ProfileProgress([("warm-up", 3), ("timed", 2), ("profiled", 2)], console=console)
    shown.phase("starting MaxText (compiling)")
    for step in (0, 1, 2, 4, 5, 6, 7):  # the timed steps told together (4); 7: MaxText's last, past the stages
        shown.step(step, None, None)
    assert buffer.getvalue().splitlines() == [
        "[starting MaxText (compiling)]", "warm-up step 1/3", "warm-up step 2/3", "warm-up step 3/3", "timed step 2/2",
        "profiled step 1/2", "profiled step 2/2"]


def test_a_profiles_log_gets_one_line_per_tenth_of_each_stage():
    console, buffer = log_console()
    shown = ProfileProgress([("warm-up", 100), ("timed", 5), ("profiled", 5)], console=console)
    for step in range(110):
        shown.step(step, None, None)
    lines = buffer.getvalue().splitlines()
    assert lines[:3] == ["warm-up step 1/100", "warm-up step 10/100", "warm-up step 20/100"]
    assert lines[10:12] == ["warm-up step 100/100", "timed step 1/5"]
    assert lines[-1] == "profiled step 5/5" and len(lines) == 11 + 5 + 5


def test_a_profiles_bar_on_a_terminal_says_the_stage_and_k_of_n():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=80, color_system=None)
    with ProfileProgress([("warm-up", 3), ("timed", 2), ("profiled", 2)], console=console) as shown:
        for step in (0, 1, 2, 4, 5, 6):
            shown.step(step, None, None)
    frames = []
    for frame in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buffer.getvalue())):  # each redraw
        words = [w for w in frame.split() if not set(w) <= set("━╸") and not re.fullmatch(r"\d+:\d\d:\d\d", w)]
        if words and " ".join(words) not in frames[-1:]:
            frames.append(" ".join(words))
    assert frames == ["warm-up step 1/3", "warm-up step 2/3", "warm-up step 3/3", "timed step 2/2",
                      "profiled step 1/2", "profiled step 2/2"]
