from django.db import migrations

from accounts.scopes import scopes_sync


def seed(apps, schema_editor):
    scopes_sync(apps.get_model("accounts", "Scope"))


class Migration(migrations.Migration):
    dependencies = [("accounts", "0002_seed_scopes")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
