from django.db import migrations

from accounts.scopes import scopes_sync


def seed(apps, schema_editor):
    scopes_sync(apps.get_model("accounts", "Scope"))


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
