"""A stand-in for `python -m training run` that the supervisor tests launch to script exit paths.

Reads the same CLI (`run --config C --out D [--resume]`) and writes documented event lines; what it
does next comes from `scripted.json` in the run dir: {"steps": N, "then": "done"|"crash"|"hang",
"linger_s": S (seconds between the final `done` on SIGTERM and the exit), "save_s": S (seconds the
checkpoint on SIGTERM takes to save), "starting_s": S (seconds spent "loading the model" before
`start`, deaf to SIGTERM as a hub retry or a C extension can be)}.
On SIGTERM it saves a checkpoint (a real adapter-shaped directory) and writes `done cancelled` like
the real trainer.
"""
import argparse
import json
import signal
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("verb")
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    script = json.loads((out / "scripted.json").read_text())
    events = open(out / "events.jsonl", "a")

    def emit(**e):
        events.write(json.dumps({**e, "time": time.time()}) + "\n")
        events.flush()

    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the save short
        time.sleep(script.get("save_s", 0))
        checkpoint = out / "checkpoints" / "last"
        checkpoint.mkdir(parents=True, exist_ok=True)
        (checkpoint / "adapter_config.json").write_text("{}")
        emit(event="checkpoint", step=script.get("steps", 0), path="checkpoints/last", kind="adapter")
        emit(event="done", status="cancelled", error=None)
        time.sleep(script.get("linger_s", 0))  # a trainer may take a moment to exit after its last line
        sys.exit(0)

    (out / "pid").write_text(str(__import__("os").getpid()))
    if script.get("starting_s"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(script["starting_s"])
    signal.signal(signal.SIGTERM, on_term)
    emit(event="start", config={}, model="scripted", resumed=args.resume)
    for step in range(1, script.get("steps", 1) + 1):
        emit(event="step", step=step, metrics={"reward/mean": 0.1 * step})
    then = script.get("then", "done")
    if then == "done":
        emit(event="done", status="succeeded", error=None)
    elif then == "crash":
        print("RuntimeError: CUDA out of memory (scripted)", file=sys.stderr)
        sys.exit(3)
    elif then == "hang":
        while True:
            time.sleep(0.1)


if __name__ == "__main__":
    main()
