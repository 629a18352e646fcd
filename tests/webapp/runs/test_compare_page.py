"""Compare: fewer than two runs is explained, and config values read as the YAML config spells them."""
import json
import re

from training import metrics as metric_registry

from webapp.runs.services import create_run

from tests.factories import TINY_OVERRIDES


def test_compare_with_fewer_than_two_runs_says_why(client_alice, run):
    for url in ("/runs/compare?ids=", f"/runs/compare?ids={run.pk}"):
        r = client_alice.get(url, follow=True)
        assert r.redirect_chain[-1][0] == "/runs/"
        assert "Tick at least two runs" in r.content.decode()


def test_compare_spells_values_as_the_config_does(client_alice, user, problem_set, run):
    other = create_run(user, "other", problem_set, TINY_OVERRIDES | {"ppo": {"clip_range_high": 0.3}})
    html = client_alice.get(f"/runs/compare?ids={run.pk},{other.pk}").content.decode()
    row = html.split("<code>ppo.clip_range_high</code>")[1].split("</tr>")[0]
    assert "<code>null</code>" in row and "<code>0.3</code>" in row and "None" not in row


def test_the_compare_page_loads_the_shared_metric_names(client_alice, user, problem_set, run):
    other = create_run(user, "other", problem_set, TINY_OVERRIDES)
    html = client_alice.get(f"/runs/compare?ids={run.pk},{other.pk}").content.decode()
    scripts = re.findall(r'<script src="/static/([^"]+)"', html)
    # run_compare.js names its charts with CrucibleMetrics.label, which metrics.js defines: it loads first
    assert "js/metrics.js" in scripts and "js/run_compare.js" in scripts
    assert scripts.index("js/metrics.js") < scripts.index("js/run_compare.js")
    served = client_alice.get("/static/js/metrics.js")
    assert served.status_code == 200
    names = b"".join(served.streaming_content).decode()
    assert re.search(r"var CrucibleMetrics\b", names) and '"kl"' not in names  # no label table of its own
    # the names come from training/metrics.py, embedded in the page
    embedded = json.loads(re.search(r'<script id="metric-registry" type="application/json">(.*?)</script>', html,
                                    re.S).group(1))
    assert embedded == json.loads(json.dumps(metric_registry.registry_json()))
    assert {m["key"]: m["label"] for m in embedded["metrics"]}["kl"] == "KL to the reference model"
    compare = b"".join(client_alice.get("/static/js/run_compare.js").streaming_content).decode()
    assert 'CrucibleMetrics.label("kl")' in compare


def test_compare_takes_ids_as_repeated_parameters_as_the_run_pages_form_sends_them(client_alice, user, problem_set,
                                                                                     run):
    other = create_run(user, "other", problem_set, TINY_OVERRIDES)
    html = client_alice.get(f"/runs/compare?ids={run.pk}&ids={other.pk}").content.decode()
    assert "Compare runs" in html and f"#{other.pk} other" in html


def test_the_run_page_offers_the_users_other_runs_to_compare_with(client_alice, user, other_user, problem_set, run):
    from tests.factories import make_problem_set

    other = create_run(user, "other", problem_set, TINY_OVERRIDES)
    bobs = create_run(other_user, "bobs", make_problem_set(other_user), TINY_OVERRIDES)
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    pick = html.split('id="compare-with"')[1].split("</details>")[0]
    assert f'name="ids" value="{run.pk}"' in pick and f'value="{other.pk}"' in pick and "same set" in pick
    assert f'value="{bobs.pk}"' not in pick  # another tenant's run is never offered
