"""Each owner's number of elements per type, kept by triggers on both databases (elements.counts),
filled from the elements already there."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from elements.counts import POSTGRES_BACKWARD, POSTGRES_FORWARD, SQLITE_TRIGGERS, ensure_sqlite_counts
from elements.db import vendor_sql


def sqlite_forward(apps, schema_editor):
    ensure_sqlite_counts(schema_editor.connection)


def sqlite_backward(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for name in SQLITE_TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")


class Migration(migrations.Migration):

    dependencies = [
        ('elements', '0009_merge_portfolio_and_submissions'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ElementCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('element_type', models.CharField(max_length=16)),
                ('count', models.BigIntegerField(default=0)),
                ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('owner', 'element_type'), name='element_count_unique')],
            },
        ),
        migrations.RunPython(vendor_sql("postgresql", POSTGRES_FORWARD), vendor_sql("postgresql", POSTGRES_BACKWARD)),
        migrations.RunPython(sqlite_forward, sqlite_backward),
    ]
