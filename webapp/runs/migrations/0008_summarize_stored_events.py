"""Stored ``problem`` and ``eval`` events become their summaries (issue 23, ``runs.event_summary``).

Runs stored before keep displaying: their candidates are already rows (a ``problem`` event's since
0001; an ``eval`` event's samples since 0006), and any event whose candidates have no rows yet (an
evaluation stored before 0006) gets them here first, so nothing the candidates API served is lost.
Reversing leaves the summaries (the whole candidates are in the rows and in each run's events.jsonl).
"""
from django.db import migrations

from webapp.runs.event_summary import SUMMARIZED_KINDS, summarize

BATCH = 200


def _number(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _rows(Candidate, event, phase, step, problem_id, candidates):
    rows = []
    for index, c in enumerate(candidates):
        if not isinstance(c, dict):
            continue
        result = c.get("result") if isinstance(c.get("result"), dict) else {}
        status = str(result.get("status") or "")
        flags = c.get("penalized_flags")
        rows.append(Candidate(
            run_id=event.run_id, phase=phase, step=step, problem_id=problem_id, index=c.get("index", index),
            code=str(c.get("code") or ""), reward=_number(c.get("reward")),
            rewards=c.get("rewards") if isinstance(c.get("rewards"), dict) else {}, result=result,
            passed=status == "passed", status=status[:20], truncated=c.get("truncated") is True,
            overlong_penalty=_number(c.get("overlong_penalty")),
            penalized_flags=[str(f)[:100] for f in flags if isinstance(f, str)] if isinstance(flags, list) else []))
    return rows


def _backfill(Candidate, event):
    """Rows for the event's candidates where its (run, phase, step, problem) has none."""
    payload, step = event.payload, event.step
    if step is None:
        return []
    groups = []
    if event.kind == "problem" and isinstance(payload.get("candidates"), list) and payload.get("problem_id") is not None:
        groups.append(("train", str(payload["problem_id"]), payload["candidates"]))
    elif event.kind == "eval" and isinstance(payload.get("per_problem"), dict):
        groups += [("eval", str(pid), entry["candidates"]) for pid, entry in payload["per_problem"].items()
                   if isinstance(entry, dict) and isinstance(entry.get("candidates"), list)]
    rows = []
    for phase, problem_id, candidates in groups:
        exists = Candidate.objects.filter(run_id=event.run_id, phase=phase, step=step, problem_id=problem_id).exists()
        if not exists:
            rows += _rows(Candidate, event, phase, step, problem_id, candidates)
    return rows


def summarize_stored_events(apps, schema_editor):
    RunEvent = apps.get_model("runs", "RunEvent")
    Candidate = apps.get_model("runs", "Candidate")
    last = 0
    while True:
        # Paged by primary key: a big database is rewritten a batch at a time, never held whole.
        batch = list(RunEvent.objects.filter(kind__in=SUMMARIZED_KINDS, pk__gt=last).order_by("pk")[:BATCH])
        if not batch:
            return
        last = batch[-1].pk
        changed, rows = [], []
        for event in batch:
            if not isinstance(event.payload, dict):
                continue
            summary = summarize(event.payload)
            if summary is not event.payload:
                rows += _backfill(Candidate, event)
                event.payload = summary
                changed.append(event)
        Candidate.objects.bulk_create(rows, batch_size=500)
        RunEvent.objects.bulk_update(changed, ["payload"], batch_size=BATCH)


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0007_set_aside"),
    ]

    operations = [
        migrations.RunPython(summarize_stored_events, migrations.RunPython.noop),
    ]
