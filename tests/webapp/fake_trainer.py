"""A stand-in for `python -m training run` that tests launch instead of training: the web app's workers
and supervisor run it (``CRUCIBLE_TRAINER_MODULE``, or ``CRUCIBLE_TEST_TRAINER_MODULE`` for worker
processes) where a test needs a run's exit paths, not its learning.

It reads the same CLI (`run --config C --out D [--resume]`) and writes its events with training's own
constructors (training/events.py), as the trainer does. What it does comes from `scripted.json` in the
run dir; without one it succeeds at once (start, one step, done), which is what launch tests need:
a run that a worker picks up and finishes.

`scripted.json`: {"steps": N, "then": "done"|"crash"|"hang", "linger_s": S (seconds between the final
`done` on SIGTERM and the exit), "save_s": S (seconds the checkpoint on SIGTERM takes to save),
"starting_s": S (seconds spent "loading the model" before `start`, deaf to SIGTERM as a hub retry or a
C extension can be)}. On SIGTERM it saves a checkpoint (a real adapter-shaped directory) and writes
`done cancelled` like the real trainer.
"""
import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from training.events import EventWriter, Start, checkpoint_event, done_event, step_event

INSTANT = {"steps": 1, "then": "done"}
"""The script of a run dir without `scripted.json`."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("verb")
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    scripted = out / "scripted.json"
    script = json.loads(scripted.read_text()) if scripted.exists() else INSTANT
    events = EventWriter(out / "events.jsonl")

    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the save short
        time.sleep(script.get("save_s", 0))
        checkpoint = out / "checkpoints" / "last"
        checkpoint.mkdir(parents=True, exist_ok=True)
        (checkpoint / "adapter_config.json").write_text("{}")
        events.write(checkpoint_event(script.get("steps", 0), "checkpoints/last", "adapter"))
        events.write(done_event("cancelled"))
        time.sleep(script.get("linger_s", 0))  # a trainer may take a moment to exit after its last line
        sys.exit(0)

    (out / "pid").write_text(str(os.getpid()))
    if script.get("starting_s"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(script["starting_s"])
    signal.signal(signal.SIGTERM, on_term)
    events.write(Start(config={}, model="scripted", steps=script.get("steps", 1)))
    for step in range(1, script.get("steps", 1) + 1):
        events.write(step_event(step, {"reward/mean": 0.1 * step}))
    then = script.get("then", "done")
    if then == "done":
        events.write(done_event("succeeded"))
        events.close()
    elif then == "crash":
        print("RuntimeError: CUDA out of memory (scripted)", file=sys.stderr)
        sys.exit(3)
    elif then == "hang":
        while True:
            time.sleep(0.1)


if __name__ == "__main__":
    main()
