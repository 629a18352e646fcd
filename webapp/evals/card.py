"""The benchmark section of a checkpoint's model card (``webapp.runs.archive.register_card_section``)."""
from __future__ import annotations

from .models import Evaluation


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def card_section(run, checkpoint) -> str:
    """"## Benchmarks": this checkpoint's finished evaluations and, for each of their benchmarks, the run's
    base model's ("before") ones; empty when the checkpoint has none."""
    done = Evaluation.objects.filter(run=run, status=Evaluation.Status.DONE).select_related("problem_set")
    mine = list(done.filter(step=checkpoint.step).order_by("created", "id"))
    if not mine:
        return ""
    benchmarks = {e.benchmark for e in mine}
    base = [e for e in done.filter(step__isnull=True).order_by("created", "id") if e.benchmark in benchmarks]
    ks = sorted({int(k) for e in mine + base for k in (e.pass_at_k or {})})
    head = "| benchmark | model | samples (n) | seed | pass@1 | " + " | ".join(f"pass@{k}" for k in ks) + " |"
    rows = [head, "|" + " --- |" * (5 + len(ks))]
    for e in base + mine:
        who = "base model (before training)" if e.step is None else f"this checkpoint (step {e.step})"
        rows.append(f"| {e.benchmark_title} | {who} | {e.samples} | {e.seed} | {_pct(e.pass_at_1)} | "
                    + " | ".join(_pct((e.pass_at_k or {}).get(str(k))) for k in ks) + " |")
    return ("## Benchmarks\n\npass@k by the unbiased estimator (Chen et al. 2021) over n samples per problem, "
            "evaluated by Crucible:\n\n" + "\n".join(rows))
