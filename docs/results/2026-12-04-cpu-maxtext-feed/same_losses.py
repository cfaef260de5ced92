"""The two runs' losses step by step (steps.jsonl): equal bit for bit, or the first step that differs."""
import json
import sys
from pathlib import Path

here = Path(__file__).parent
feed, grain = ([json.loads(line) for line in (here / name / "steps.jsonl").read_text().splitlines()]
               for name in ("feed", "grain"))
assert len(feed) == len(grain) == 20, (len(feed), len(grain))
for a, b in zip(feed, grain):
    if a["loss"] != b["loss"]:
        sys.exit(f"step {a['step']}: {a['loss']!r} (our loader) != {b['loss']!r} (Grain)")
print(f"{len(feed)} steps, every loss equal bit for bit; data wait median "
      f"{sorted(s['data_wait_ms'] for s in feed)[10]:.2f} ms (our loader), "
      f"{sorted(s['data_wait_ms'] for s in grain)[10]:.2f} ms (Grain, eight workers on 2 busy cores)")
