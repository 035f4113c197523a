from django.db import migrations

from accounts.scopes import SCOPES


def seed(apps, schema_editor):
    Scope = apps.get_model("accounts", "Scope")
    for name, description in SCOPES:
        Scope.objects.update_or_create(name=name, defaults={"description": description})


class Migration(migrations.Migration):
    dependencies = [("accounts", "0002_seed_scopes")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
