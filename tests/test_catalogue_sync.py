"""sync_catalogue, as make run and every deploy run it: the built-in integrations and the shipped
documents, indexed for search, and what curators changed kept."""

import pytest
from django.core.management import call_command

from integrations.models import Action, Capability, Integration
from integrations.services import catalogue_sync

pytestmark = pytest.mark.django_db


def test_it_writes_the_builtin_and_shipped_integrations_and_indexes_them():
    done = catalogue_sync()
    assert done["builtin"] == ["http_tools", "webhook_tools", "email_tools", "atrium_tools"]
    assert sorted(done["imported"]) == ["github_tools", "slack_tools"]
    assert Action.objects.filter(integration_id="github_tools", name="issues_create").exists()
    assert Integration.objects.get(id="slack_tools").auth_scheme == "oauth2"
    assert Integration.objects.get(id="email_tools").first_party is True
    actions = Action.objects.count()
    assert Capability.objects.filter(type="action").count() == actions
    assert Capability.objects.filter(type="integration").count() == 6
    assert not Capability.objects.filter(embedding__isnull=True).exists()


def test_running_it_again_changes_nothing_and_keeps_curators_settings():
    catalogue_sync()
    Integration.objects.filter(id="github_tools").update(base_url="https://github.example.com/api/v3",
                                                         description="Our GitHub Enterprise.")
    Integration.objects.filter(id="http_tools").update(enabled=False)
    vectors = dict(Capability.objects.values_list("name", "embedding"))
    call_command("sync_catalogue", verbosity=0)
    github = Integration.objects.get(id="github_tools")
    assert (github.base_url, github.description) == ("https://github.example.com/api/v3", "Our GitHub Enterprise.")
    assert Integration.objects.get(id="http_tools").enabled is False
    after = dict(Capability.objects.values_list("name", "embedding"))
    # Only the integration whose text changed, and its actions (whose text includes it), are embedded again.
    changed = {name for name in after if after[name] != vectors[name]}
    assert "github_tools" in changed and all(name.startswith("github_tools") for name in changed)
