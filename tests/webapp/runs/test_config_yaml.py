"""The run page shows the run's config as the YAML the trainer reads: sections as sections, copyable."""
import yaml


def test_the_run_page_shows_the_config_as_yaml_with_sections(client_alice, run):
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    block = html.split('<pre id="config-yaml">')[1].split("</pre>")[0]
    import html as html_lib

    text = html_lib.unescape(block)
    config = yaml.safe_load(text)
    assert config["ppo"]["clip_range"] == run.config["ppo"]["clip_range"]
    assert config["model"]["lora"] == run.config["model"]["lora"]
    assert "\nppo:\n  learning_rate:" in text  # a section is a section, not a row "ppo True"
    assert "None" not in text and "True" not in text and "False" not in text  # YAML spellings: null, true, false
    assert config["problems"] == "problems.jsonl"  # never the server's absolute path
    assert str(run.config["problems"]) not in html
    assert 'id="copy-config"' in html


def test_the_config_downloads_as_a_yaml_file_the_trainer_reads(client_alice, run, tmp_path):
    from training.config import load_config

    r = client_alice.get(f"/runs/{run.pk}/config.yaml")
    assert r["Content-Disposition"] == f'attachment; filename="run-{run.pk}.yaml"'
    (tmp_path / "run.yaml").write_bytes(r.content)
    assert load_config(tmp_path / "run.yaml").ppo.clip_range == run.config["ppo"]["clip_range"]


def test_another_users_config_is_404(client, other_user, run):
    client.force_login(other_user)
    assert client.get(f"/runs/{run.pk}/config.yaml").status_code == 404
