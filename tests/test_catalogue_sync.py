"""sync_catalogue (run by `make run` and on every deploy) writes the built-in integrations, imports the
shipped OpenAPI documents and indexes all of them; running it again changes nothing. An OpenAPI
document uploaded in admin is imported and indexed the same way."""

from io import StringIO

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client

from accounts.models import User
from integrations import catalogue
from integrations.models import Action, Capability, Integration

pytestmark = pytest.mark.django_db

BUILTIN = ["http_tools", "webhook_tools", "email_tools", "atrium_tools"]
SHIPPED = ["github_tools", "slack_tools"]
TINY = b"""
openapi: 3.1.0
info: {title: Tiny API, version: '1'}
servers: [{url: 'https://tiny.example.org'}]
paths:
  /things:
    get: {operationId: listThings, summary: List the things, responses: {'200': {description: ok}}}
"""


def sync() -> str:
    out = StringIO()
    call_command("sync_catalogue", stdout=out)
    return out.getvalue()


def test_it_writes_the_built_in_integrations_and_the_shipped_documents_and_indexes_them():
    out = sync()

    assert out.strip() == f"Built in: {', '.join(BUILTIN)}. Imported: {', '.join(SHIPPED)}."
    assert [spec.id for spec in catalogue.builtin_specs()] == BUILTIN
    assert set(Integration.objects.values_list("pk", flat=True)) == {*BUILTIN, *SHIPPED}
    indexed = set(Capability.objects.values_list("name", flat=True))
    assert indexed == {*BUILTIN, *SHIPPED, *(action.full_name for action in Action.objects.select_related(
        "integration"))}
    assert not Capability.objects.filter(embedding__isnull=True).exists()


def test_running_it_again_changes_nothing_and_keeps_an_integration_disabled():
    sync()
    Integration.objects.filter(pk="slack_tools").update(enabled=False)
    before = dict(Capability.objects.values_list("name", "updated_at"))

    sync()

    assert dict(Capability.objects.values_list("name", "updated_at")) == before
    assert Integration.objects.get(pk="slack_tools").enabled is False


def test_a_document_uploaded_in_admin_is_imported_and_indexed(client: Client):
    client.force_login(User.objects.create_superuser("curator", "curator@example.com", "pw"))

    response = client.post("/admin/integrations/integration/import/", {
        "document": SimpleUploadedFile("tiny.yaml", TINY), "integration_id": "tiny_tools"})

    assert response.status_code == 302
    assert response["Location"] == "/admin/integrations/integration/tiny_tools/change/"
    assert Integration.objects.get(pk="tiny_tools").base_url == "https://tiny.example.org"
    assert set(Capability.objects.values_list("name", flat=True)) == {"tiny_tools", "tiny_tools.listThings"}


def test_running_it_again_changes_nothing_and_keeps_curators_settings():
    sync()
    Integration.objects.filter(id="github_tools").update(base_url="https://github.example.com/api/v3",
                                                         description="Our GitHub Enterprise.")
    Integration.objects.filter(id="http_tools").update(enabled=False)
    vectors = dict(Capability.objects.values_list("name", "embedding"))
    sync()
    github = Integration.objects.get(id="github_tools")
    assert (github.base_url, github.description) == ("https://github.example.com/api/v3", "Our GitHub Enterprise.")
    assert Integration.objects.get(id="http_tools").enabled is False
    after = dict(Capability.objects.values_list("name", "embedding"))
    # Only the integration whose text changed, and its actions (whose text includes it), are embedded again.
    changed = {name for name in after if after[name] != vectors[name]}
    assert "github_tools" in changed and all(name.startswith("github_tools") for name in changed)
