"""A stand-in for `python -m training run` that succeeds at once: start, one step, done.

The launch tests need a run that a worker picks up and finishes, not training.
"""
import argparse
from pathlib import Path

from training.events import EventWriter, Start, done_event, step_event


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("verb")
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    with EventWriter(Path(args.out) / "events.jsonl") as events:
        for event in (Start(config={}, model="instant", steps=1), step_event(1, {"reward/mean": 0.5}),
                      done_event("succeeded")):
            events.write(event)


if __name__ == "__main__":
    main()
