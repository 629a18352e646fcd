"""`POST /api/problem-sets/{id}/probe` (docs/design.md "Web (webapp/)": the JSON API table); the set's
`GET` shows the probe under `probe` (webapp.problems.api)."""
from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema
from ninja.responses import Status

from webapp.problems.api import FieldError, Message, ProbeState, request_user, visible_sets

from . import services

router = Router(tags=["problem sets"])


class ProbeIn(Schema):
    model: str = Field(description="a preset or installed model (models/<name>), a hub id (org/name), or a "
                                   "checkpoint of one of your runs as run:<id>/step-<n>")
    adapter: str | None = Field(None, description="an adapter checkpoint of one of your runs (run:<id>/step-<n>) "
                                                  "merged into model; null for none")
    samples: int = Field(services.DEFAULT_SAMPLES, description="candidates per problem (1 to the server's "
                                                             "CRUCIBLE_PROBE_MAX_SAMPLES)")


@router.post("/{int:problem_set_id}/probe", response={202: ProbeState, 400: FieldError, 409: Message},
             summary="Estimate the difficulty of the set's problems (a job on the gpu_short queue)",
             description="Samples `samples` candidates per problem from `model` (+ `adapter`) with the sampling "
                         "settings of the model's preset or run, executes them in the sandbox and stores each "
                         "problem's pass rate; `GET /api/problem-sets/{id}` follows it under `probe`. A model "
                         "name you may not use is a 400 that names the field and tells nothing about the server; "
                         "while it waits, `probe.queue` says where it stands and what it waits for; "
                         "409 while the set is imported or another probe of it is under way.")
def probe(request: HttpRequest, problem_set_id: int, payload: ProbeIn):
    ps = get_object_or_404(visible_sets(request).select_related("owner"), pk=problem_set_id)
    created = services.request_probe(ps, request_user(request), payload.model, payload.adapter, payload.samples)
    return Status(202, created.state())
