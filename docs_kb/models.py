from django.db import models
from django.utils import timezone


class DocPage(models.Model):
    """One page of the documentation: the markdown under docs/, or as a curator edited it."""

    slug = models.CharField(max_length=200, unique=True)
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    markdown = models.TextField(help_text="The page's body, without its front matter.")
    source_path = models.CharField(max_length=500, blank=True)
    # sha256 of the source file as last imported; import_docs compares it to spot changes.
    checksum = models.CharField(max_length=64, blank=True)
    # Set when a curator edits the page in admin: import_docs then leaves it alone (unless forced).
    edited = models.BooleanField(default=False)
    updated = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["slug"]
        verbose_name = "docs page"

    def __str__(self) -> str:
        return self.slug


class DocSection(models.Model):
    """A heading and everything under it down to the next heading of equal or higher level; the
    page's lede (before its first `##`) is the section with no heading id."""

    page = models.ForeignKey(DocPage, on_delete=models.CASCADE, related_name="sections")
    # The page's title again, so PostgreSQL's generated search vector can weigh it (migration 0002).
    page_title = models.CharField(max_length=200, blank=True)
    position = models.PositiveIntegerField()
    heading_id = models.CharField(max_length=200, blank=True)  # "" for the lede
    heading_text = models.CharField(max_length=300, blank=True)
    level = models.PositiveSmallIntegerField(default=0)
    markdown = models.TextField()
    # From the heading to the next heading of any level: what fits when the whole section does not.
    own_markdown = models.TextField(blank=True)
    # The section's own text (to its next heading of any level), as plain words: what search reads.
    text = models.TextField(blank=True)

    class Meta:
        ordering = ["page", "position"]
        constraints = [models.UniqueConstraint(fields=["page", "position"], name="doc_section_position")]

    def __str__(self) -> str:
        return f"{self.page.slug}#{self.heading_id or ''}"


class DocTerm(models.Model):
    """Every word the docs use, for typo correction: PostgreSQL finds near spellings with a trigram
    index (migration 0002); elsewhere the search index compares edit distances."""

    term = models.CharField(max_length=100, unique=True)

    def __str__(self) -> str:
        return self.term
