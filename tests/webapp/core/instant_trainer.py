"""A stand-in for `python -m training run` that succeeds at once: start, one step, done.

The launch tests need a run that a worker picks up and finishes, not training.
"""
import argparse
import json
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("verb")
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    with open(Path(args.out) / "events.jsonl", "a") as events:
        for event in ({"event": "start", "config": {}, "model": "instant"},
                      {"event": "step", "step": 1, "metrics": {"reward/mean": 0.5}},
                      {"event": "done", "status": "succeeded", "error": None}):
            events.write(json.dumps({**event, "time": time.time()}) + "\n")
            events.flush()


if __name__ == "__main__":
    main()
