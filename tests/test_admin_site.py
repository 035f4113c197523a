"""The admin site as a curator first sees it: Atrium's name and colours, each app named once, and
every JSON field of a model, in every Atrium admin, edited in the JSON editor."""

import re

import pytest
from django.contrib import admin
from django.db import models
from django.test import Client, RequestFactory
from django_ace import AceWidget

from accounts.admin import AtriumAdmin, JsonEditorField
from accounts.models import User

pytestmark = pytest.mark.django_db


@pytest.fixture
def curator(db, client: Client) -> User:
    user = User.objects.create_superuser("curator", "curator@example.com", "pw")
    client.force_login(user)
    return user


def test_the_index_is_atriums_and_names_each_app_once(curator, client):
    page = client.get("/admin/").content.decode()

    assert "<title>Curate Atrium | Atrium admin</title>" in page
    assert '<div id="site-name"><a href="/admin/">Atrium administration</a></div>' in page
    assert "/static/atrium-admin.css" in page and "/static/favicon.svg" in page
    apps = re.findall(r'<caption>\s*<a href="/admin/[^"]+/" class="section"[^>]*>([^<]+)</a>', page)
    assert apps == sorted(set(apps))  # each once
    assert {"Accounts and access", "Elements", "Workflows and playbooks", "Runs", "Docs knowledge base",
            "Integrations and capabilities", "Sign-in email addresses", "OAuth applications and tokens"} <= set(apps)
    assert "Django administration" not in page and "Django OAuth Toolkit" not in page


def test_every_json_field_of_an_atrium_admin_is_a_json_editor(curator):
    request = RequestFactory().get("/admin/")
    request.user = curator
    checked = []
    for model, model_admin in admin.site._registry.items():
        if not isinstance(model_admin, AtriumAdmin):
            continue
        for field in model._meta.get_fields():
            if isinstance(field, models.JSONField) and field.editable:
                formfield = model_admin.formfield_for_dbfield(field, request)
                assert isinstance(formfield, JsonEditorField), (model, field.name)
                assert isinstance(formfield.widget, AceWidget) and formfield.widget.mode == "json", (model, field.name)
                checked.append(f"{model._meta.label}.{field.name}")
    assert {"integrations.Integration.auth_config", "integrations.Skill.input_schema",
            "workflows.PlaybookTemplate.example_input"} <= set(checked)
