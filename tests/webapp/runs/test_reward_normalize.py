"""reward.normalize (sum | per_component) in the web app: stored configs from when it was a boolean."""
import pytest

from .conftest import migrated_back_to


@pytest.mark.django_db(transaction=True)
def test_stored_configs_with_the_old_boolean_are_upgraded_to_the_mode_and_weighted_mean():
    from django.contrib.auth import get_user_model

    from training.config import config_from_dict
    from webapp.runs.models import Run

    with migrated_back_to("runs", "0011_problem_events_solve_rate") as apps:
        OldRun = apps.get_model("runs", "Run")
        owner = apps.get_model(*get_user_model()._meta.label.split(".")).objects.create(username="old")
        plain = OldRun.objects.create(owner_id=owner.pk, name="plain sum", config={"reward": {"normalize": False}})
        mean = OldRun.objects.create(owner_id=owner.pk, name="mean", config={"reward": {"normalize": True}})
        other = OldRun.objects.create(owner_id=owner.pk, name="no reward section", config={})
    assert Run.objects.get(pk=plain.pk).config["reward"] == {"normalize": "sum", "weighted_mean": False}
    assert Run.objects.get(pk=mean.pk).config["reward"] == {"normalize": "sum", "weighted_mean": True}
    assert Run.objects.get(pk=other.pk).config == {}
    assert config_from_dict(Run.objects.get(pk=plain.pk).config).reward.weighted_mean is False
