from decimal import Decimal

from django.db import migrations

# Prices in USD per million tokens (input, output), as published by the provider.
MODELS = (
    ("claude-opus-4-5", "Claude Opus 4.5", Decimal("5"), Decimal("25"), False),
    ("claude-sonnet-4-5", "Claude Sonnet 4.5", Decimal("3"), Decimal("15"), True),
    ("claude-haiku-4-5", "Claude Haiku 4.5", Decimal("1"), Decimal("5"), False),
)


def seed(apps, schema_editor):
    ConfiguredModel = apps.get_model("workflows", "ConfiguredModel")
    for model_id, label, price_in, price_out, is_default in MODELS:
        ConfiguredModel.objects.get_or_create(
            model_id=model_id,
            defaults={"label": label, "input_usd_per_mtok": price_in, "output_usd_per_mtok": price_out,
                      "is_default": is_default},
        )


class Migration(migrations.Migration):
    dependencies = [("workflows", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
