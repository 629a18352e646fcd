"""sampling.dynamic and sampling.max_rounds on the new-run form, in the run's config and on its page."""
from webapp.runs.models import Run

from tests.factories import form_data


def test_the_form_offers_dynamic_sampling_with_its_help_and_bounds(client_alice, problem_set):
    r = client_alice.get(f"/runs/new?problem_set={problem_set.pk}")
    html = r.content.decode()
    assert 'type="checkbox" name="sampling.dynamic"' in html and "Dynamic sampling (DAPO)" in html
    sampling = [f.name for f in dict(r.context["form"].groups())["Sampling"]]
    assert "sampling.dynamic" in sampling and "sampling.max_rounds" in sampling
    assert r.context["form"]["sampling.max_rounds"].initial == 3


def test_dynamic_sampling_reaches_the_run_config_and_the_page(client_alice, problem_set):
    data = form_data(problem_set, **{"sampling.dynamic": "on", "sampling.max_rounds": "5"})
    assert client_alice.post("/runs/new", data).status_code == 302
    run = Run.objects.get()
    assert run.config["sampling"]["dynamic"] is True and run.config["sampling"]["max_rounds"] == 5
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert "dynamic sampling (≤ 5 rounds)" in html
    assert 'id="chart-groups"' in html and 'id="difficulty"' in html and "js/run_difficulty.js" in html
    r = client_alice.post("/runs/new", form_data(problem_set, **{"sampling.max_rounds": "0"}))
    assert "must be >= 1" in r.context["form"]["sampling.max_rounds"].errors[0]
